"""Where each check of a receipt stands (passed, failed, not run, stale or running), judged
against the bytes it ran on; the policy that requires some to have passed before apply
writes them; and when a receipt that is ready so waits on the operator alone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence

from core.errors import BadInput, GenjobError
from core.model.canonical import canonical, sha256_bytes
from core.model.check_record import CheckRecord, CheckResult
from core.model.models import Job
from core.model.protected import flagged
from core.model.standing import CheckState, CheckStatus, Standing
from core.review.verify import Verification, verify
from core.store.check_records import read_record, running_since
from core.store.config import Check, Config
from core.store.layout import Layout
from core.store.notify import Event, waiting_for_approval
from core.store.queue import locate

# What makes a received job ready for the apply plane.
READY = "verifies, and its required checks passed"

# The verification steps that say the receipt's outputs are the bytes it names.
_BYTES_STEPS = ("receipt", "paths", "present", "regular", "size", "hashes")


class ChecksRequired(GenjobError):
    """Policy requires checks that have not passed on these exact outputs."""


def receipt_standing(layout: Layout, key: str, config: Config) -> Standing:
    """Verify `key`'s receipt now and judge its checks; never raises for a bad job."""
    try:
        loc = locate(layout, key)
        if not os.path.lexists(layout.receipt(key)):
            return Standing(None, (), None)
        v = verify(layout, loc.job, config)
    except (GenjobError, OSError):
        return Standing(None, (), None)
    outputs = sha256_bytes(canonical(v.receipt.outputs)) if v.receipt is not None else None
    checks = tuple(check_statuses(layout, loc.job, config, v)) if loc.folder == "running" else ()
    written = v.receipt.outputs if v.receipt is not None else {}
    return Standing(v.ok, checks, outputs, flagged(tuple(written), tuple(config.policy.protected_paths)))


def run_hint(key: str, names: Sequence[str], candidate: int | None = None) -> str:
    which = f" --candidate {candidate}" if candidate is not None else ""
    return f"genjob check {key}{which}" + "".join(f" --name {n}" for n in names)


def check_statuses(
    layout: Layout, job: Job, config: Config, v: Verification | None, candidate: int | None = None
) -> list[CheckStatus]:
    """Every configured check of `job`, in the config's order: passed, failed, not run,
    stale or running, judged against the receipt and tree that `v` verified just now.
    With `candidate`, that candidate's records are judged (`v` verified its receipt).
    A required check the config may not run yet (`Config.held`) is listed as not run."""
    statuses = [
        _status(layout, job, name, check, config, v=v, candidate=candidate)
        for name, check in config.checks.items()
    ]
    waiting = config.held.hint if config.held is not None else f"{layout.config}: not configured"
    for name in config.policy.require_checks:
        if name not in config.checks:
            statuses.append(CheckStatus(name, CheckState.NOT_RUN, True, waiting, True))
    return statuses


def _status(
    layout: Layout,
    job: Job,
    name: str,
    check: Check,
    config: Config,
    *,
    v: Verification | None,
    candidate: int | None,
) -> CheckStatus:
    required = name in config.policy.require_checks
    sandboxed = check.sandbox != "none"
    hint = run_hint(job.key, [name], candidate)
    running = running_since(layout, job.key, name, candidate)
    try:
        record = read_record(layout, job.key, name, candidate)
    except BadInput as exc:
        return CheckStatus(name, CheckState.NOT_RUN, required, f"{exc}; run it again: {hint}", sandboxed)
    if running is not None:
        return CheckStatus(
            name, CheckState.RUNNING, required, f"running for {time.time() - running:.0f}s", sandboxed, record
        )
    if record is None:
        return CheckStatus(name, CheckState.NOT_RUN, required, f"not run yet: {hint}", sandboxed)
    why = stale_because(record, job, check, v)
    if why is not None:
        return CheckStatus(
            name, CheckState.STALE, required, f"{why}; run it again: {hint}", sandboxed, record
        )
    state = CheckState.PASSED if record.result is CheckResult.PASSED else CheckState.FAILED
    return CheckStatus(name, state, required, describe(record), record.sandboxed, record)


def stale_because(record: CheckRecord, job: Job, check: Check, v: Verification | None) -> str | None:
    """Why `record` does not speak for the job's receipt and tree now; None when it does."""
    receipt = v.receipt if v is not None else None
    if v is None or receipt is None:
        return "the receipt it checked is gone"
    if record.outputs != receipt.outputs:
        return "it ran on other outputs than this receipt's"
    if not all(c.passed for c in v.checks if c.name in _BYTES_STEPS):
        return "the outputs are no longer the bytes the receipt names"
    if record.base != {rel: job.input_digest(rel) for rel in job.allowed_paths}:
        return "it ran on another base than this job's"
    if not all(c.passed for c in v.checks if c.name == "base"):
        return "the tree changed since it ran"
    if record.command != check.run:
        return "its command changed since it ran"
    if record.sandbox != check.sandbox:
        return f"it ran with sandbox = {record.sandbox!r}; the config says {check.sandbox!r} now"
    return None


def describe(record: CheckRecord) -> str:
    """One line on how a run ended: how long, how, and with what last words."""
    how = "sandboxed (bwrap)" if record.sandboxed else "UNSANDBOXED"
    if record.result is CheckResult.PASSED:
        return f"passed in {record.duration:.1f}s, {how}"
    lines = [line for line in record.tail.splitlines() if line.strip()]
    last = f": {lines[-1].strip()[:160]}" if lines else ""
    if record.result is CheckResult.TIMED_OUT:
        return f"timed out after {record.timeout:g}s, {how}{last}"
    return f"failed (exit {record.exit_code}) in {record.duration:.1f}s, {how}{last}"


def require_checks(layout: Layout, job: Job, config: Config, v: Verification) -> None:
    """Raise ChecksRequired unless every check policy requires passed on these exact bytes."""
    if not config.policy.require_checks:
        return
    wanted = [s for s in check_statuses(layout, job, config, v) if s.required]
    missing = [s for s in wanted if not s.satisfied]
    if not missing:
        return
    which = ", ".join(f"{s.name} ({s.state.value})" for s in missing)
    raise ChecksRequired(
        f"{job.key}: required check{'s' if len(missing) > 1 else ''} not passed on these exact "
        f"outputs: {which}; nothing was written. Run: {run_hint(job.key, [s.name for s in missing])}"
    )


def awaiting_approval(config: Config, v: Verification, statuses: Iterable[CheckStatus]) -> Event | None:
    """The `approval` event when the receipt `v` verified now waits on the operator alone:
    it is ready (it verifies and every required check passed on it) and no apply plane
    applies it unasked (`policy.auto_apply = "never"`), so only `genjob apply` writes it."""
    checked = all(s.satisfied for s in statuses if s.required)
    if not (v.ok and checked and config.policy.auto_apply == "never"):
        return None
    return waiting_for_approval(v.key, f"{READY}; genjob apply {v.key[:12]}")
