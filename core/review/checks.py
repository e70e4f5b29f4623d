"""Checks: the project's own commands run on a receipt's outputs, and what they found.

A check (``[checks.NAME]`` in `config.toml`) runs in a scratch tree (`core.review.scratch`):
the repository as it is now with the receipt's verified outputs written in, under the
sandbox (`core.review.sandbox`). Its result is kept as a record bound to what it checked,
``.gen/checks/<key>/<name>.json``: the command, the receipt's output hashes, the base
input hashes, the exit status, the duration, whether it was sandboxed, and the tail of
its output as evidence. A candidate's checks (best-of-N) are run and kept the same way,
in ``.gen/checks/<key>/candidate-<n>/``, bound to that candidate's outputs. A record
counts only for those exact bytes: when the receipt's
outputs, the job's base in the tree, or the check's command or sandbox differ from what
it names, it is stale. `require_checks` is the policy apply holds receipts to.

While a check runs, ``<name>.lock`` is held (one run of a check at a time) and
``<name>.run`` names the process running it, for other views to show it running.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shlex
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import BadInput, GenjobError, Stale, VerificationFailed, WrongState
from core.model.canonical import canonical, loads_strict, read_bytes, sha256_bytes
from core.model.models import Job, Receipt, TextEnum
from core.model.protected import flagged
from core.model.standing import CheckState, CheckStatus, Standing
from core.review import sandbox
from core.review.scratch import Mode, Scratch, scratch_tree
from core.review.verify import Verification, verify
from core.store import procfs
from core.store.config import Check, CheckName, Config, load_config
from core.store.durable import atomic_write_at, folder
from core.store.events import actor, bounded, record_event
from core.store.layout import FOLDER_STATE, Layout
from core.store.ownership import repository_owners, require_trusted
from core.store.queue import locate
from core.store.seal import seal, sealed_here
from core.store.tree import closing, open_folder, open_regular

RECORD_SCHEMA: Literal["genjob.check.v1"] = "genjob.check.v1"
_SEAL = "check record"
MAX_RECORD_BYTES = 4 << 20
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
# The verification steps that say the receipt's outputs are the bytes it names.
_BYTES_STEPS = ("receipt", "paths", "present", "regular", "size", "hashes")

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class ChecksRequired(GenjobError):
    """Policy requires checks that have not passed on these exact outputs."""


class CheckResult(StrEnum):
    """How one run of a check ended, as its record says (a str: the record holds the word)."""

    PASSED = "passed"
    FAILED = "failed"
    TIMED_OUT = "timed out"


class CheckRecord(BaseModel):
    """What one run of a check found, and the bytes it found it on."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, populate_by_name=True)

    schema_: Literal["genjob.check.v1"] = Field(alias="schema")
    key: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
    name: CheckName
    command: str
    ran: str
    sandbox: Literal["bwrap", "none"]
    scratch: Literal["overlay", "copy"]
    outputs: dict[str, Sha256]
    base: dict[str, Sha256 | None]
    result: Annotated[CheckResult, *TextEnum]
    exit_code: int | None
    started_at: float
    duration: float
    timeout: float
    tail: str
    output_bytes: int
    head: str | None
    by: str

    @property
    def sandboxed(self) -> bool:
        return self.sandbox != "none"

    def document(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)


@dataclass(frozen=True)
class CheckRun:
    """One run of a check: how it ended, the record kept (None when it was stopped)."""

    name: str
    finished: sandbox.Finished
    record: CheckRecord | None
    sandbox: str
    scratch: Mode

    @property
    def passed(self) -> bool:
        return self.record is not None and self.record.result is CheckResult.PASSED


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


# --- records ---------------------------------------------------------------------------


def read_record(layout: Layout, key: str, name: str, candidate: int | None = None) -> CheckRecord | None:
    """The record of check `name` on `key`'s receipt (or its candidate `candidate`'s);
    None when there is none.

    A record is a claim that policy acts on, so like an apply journal it counts only if
    no one but the repository's owner could have written it, and only if genjob wrote it
    on this machine (its seal, `core.store.seal`: a record can arrive with a repository); a
    record that does not parse, is reached through a link or fails either test raises
    BadInput.
    """
    path = layout.check_record(key, name, candidate)
    try:
        with folder(layout.gen) as gen:
            fd = open_folder(gen, layout.check_parts(key, candidate), str(path.parent))
    except FileNotFoundError:
        return None
    with closing(fd):
        opened = open_regular(fd, path.name, str(path))
        if opened is None:
            return None
        file_fd, _ = opened
        with closing(file_fd):
            data = os.read(file_fd, MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        raise BadInput(f"{path}: over the {MAX_RECORD_BYTES}-byte limit of a check record")
    require_trusted(path, layout.gen, repository_owners(layout.root), "a check record")
    obj = loads_strict(data, str(path))
    tag = obj.pop("seal", None) if isinstance(obj, dict) else None
    if not sealed_here(_SEAL, _sealed_part(layout, path, obj), tag):
        raise BadInput(
            f"{path}: not written by genjob on this machine (its seal does not verify: it may have "
            "come with the repository), so it counts for nothing"
        )
    try:
        record = CheckRecord.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise BadInput(f"{path}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    if record.key != key or record.name != name:
        raise BadInput(f"{path}: a record of {record.name} on {record.key}, not of this check")
    return record


def _sealed_part(layout: Layout, path: Path, obj: object) -> bytes:
    """What a record's seal covers: where it lives below `.gen/`, and its document."""
    return str(path.relative_to(layout.gen)).encode() + b"\0" + canonical(obj)


def write_record(layout: Layout, record: CheckRecord, candidate: int | None = None) -> Path:
    """Write a record (of the job's receipt, or of its candidate `candidate`), sealed,
    atomically and durably, through real folders only."""
    where = layout.check_dir(record.key, candidate)
    with folder(layout.gen) as gen:
        fd = open_folder(gen, layout.check_parts(record.key, candidate), str(where), [])
    with closing(fd):
        path = layout.check_record(record.key, record.name, candidate)
        doc = record.document()
        doc["seal"] = seal(_SEAL, _sealed_part(layout, path, doc))
        atomic_write_at(fd, path.name, canonical(doc), path)
    return path


# --- what each check's state is ----------------------------------------------------------


def check_statuses(
    layout: Layout, job: Job, config: Config, v: Verification | None, candidate: int | None = None
) -> list[CheckStatus]:
    """Every configured check of `job`, in the config's order: passed, failed, not run,
    stale or running, judged against the receipt and tree that `v` verified just now.
    With `candidate`, that candidate's records are judged (`v` verified its receipt).
    A required check the config may not run yet (`Config.held`) is listed as not run."""
    statuses = [
        _status(layout, job, name, check, config, v, candidate) for name, check in config.checks.items()
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


# --- running ------------------------------------------------------------------------------


def running_since(layout: Layout, key: str, name: str, candidate: int | None = None) -> float | None:
    """When the run of check `name` on `key` (or its candidate) under way started; None
    when none is."""
    path = layout.check_dir(key, candidate) / f"{name}.run"
    try:
        info = loads_strict(read_bytes(path, 64 << 10), str(path))
    except BadInput:
        return None
    if not isinstance(info, dict):
        return None
    pid, started, host = info.get("pid"), info.get("started_at"), info.get("host")
    if not isinstance(pid, int) or not isinstance(started, (int, float)):
        return None
    if host != socket.gethostname():
        limit = info.get("timeout")
        fresh = isinstance(limit, (int, float)) and time.time() - started < limit + 60
        return float(started) if fresh else None
    if _process_start(pid) != info.get("pid_start"):
        return None  # that process is gone (or its pid now names another)
    return float(started)


def _process_start(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot; None when there is none."""
    fields = procfs.stat_fields(pid)
    return int(fields[procfs.START_TIME]) if fields and len(fields) > procfs.START_TIME else None


@contextlib.contextmanager
def _running(layout: Layout, key: str, name: str, timeout: float, candidate: int | None) -> Iterator[None]:
    """Hold `<name>.lock` and publish `<name>.run` for the block; WrongState when another
    run of the same check (on the same receipt or candidate) is under way."""
    where = layout.check_dir(key, candidate)
    with folder(layout.gen) as gen:
        fd = open_folder(gen, layout.check_parts(key, candidate), str(where), [])
    with closing(fd):
        lock = os.open(
            f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=fd
        )
        with closing(lock):
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                of = f" of candidate {candidate}" if candidate is not None else ""
                raise WrongState(f"{key}: check {name}{of} is running already") from None
            info = {
                "pid": os.getpid(),
                "pid_start": _process_start(os.getpid()),
                "host": socket.gethostname(),
                "started_at": time.time(),
                "timeout": timeout,
                "by": actor(),
            }
            atomic_write_at(fd, f"{name}.run", canonical(info), where / f"{name}.run", durable=False)
            try:
                yield
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{name}.run", dir_fd=fd)


def checkable(layout: Layout, key: str, config: Config) -> tuple[Job, Receipt, Verification]:
    """The job `key` and its receipt, verified now; refused when checks cannot run on it."""
    loc = locate(layout, key)
    if loc.folder != "running" or not os.path.lexists(layout.receipt(key)):
        state = FOLDER_STATE[loc.folder]
        raise WrongState(f"{key}: is {state}; checks run on a job with a receipt that is not yet applied")
    v = verify(layout, loc.job, config)
    return loc.job, _verified_receipt(v, key, key, str(layout.receipt(key))), v


def checkable_candidate(
    layout: Layout, key: str, number: int, config: Config
) -> tuple[Job, Receipt, Verification, Path]:
    """The job `key`, its candidate `number`'s receipt verified now (signature included),
    and the folder of that candidate's outputs; refused when checks cannot run on it."""
    from core.review.candidates import load, verify_candidate  # core.review.candidates imports this module

    loc = locate(layout, key)
    if loc.folder != "running":
        state = FOLDER_STATE[loc.folder]
        raise WrongState(f"{key}: is {state}; a candidate's checks run while the job waits for a choice")
    candidate = load(layout, key, number)
    v = verify_candidate(layout, loc.job, config, candidate)
    where = f"{key}: candidate {number}"
    return loc.job, _verified_receipt(v, key, where, where), v, candidate.files.out


def _verified_receipt(v: Verification, key: str, job_label: str, receipt_label: str) -> Receipt:
    """The receipt `v` verified, or why checks may not run on it: a tree that moved since
    the job was minted (replay it), or a receipt that does not verify."""
    if not v.ok:
        if v.only_base_failed():
            raise Stale(
                f"{job_label}: the tree changed since the job was minted ({v.check('base').detail}); "
                f"checks would not speak for what apply would write. Replay it: genjob replay {key}"
            )
        lines = "; ".join(f"{c.name}: {c.detail}" for c in v.failures)
        raise VerificationFailed(f"{receipt_label}: does not verify, so it is not checked; {lines}")
    if v.receipt is None:
        raise VerificationFailed(f"{receipt_label}: no receipt to check")
    return v.receipt


def scratch_mode(layout: Layout, check: Check, name: str) -> Mode:
    """How the scratch tree is made for `check`; SandboxError when its sandbox cannot run."""
    if check.sandbox == "none":
        return "copy"
    problem = sandbox.bwrap_problem()
    if problem is not None:
        raise sandbox.SandboxError(
            f"check {name}: cannot run sandboxed here ({problem}); install bubblewrap, or set "
            f'sandbox = "none" in [checks.{name}] to run it unsandboxed'
        )
    layout.scratch.mkdir(mode=0o755, exist_ok=True)
    return "overlay" if sandbox.overlay_problem(layout.scratch) is None else "copy"


def read_only_paths(layout: Layout, check: Check) -> tuple[Path, ...]:
    """The check's extra read-only paths, relative ones taken in the repository."""
    return tuple(layout.root / Path(p).expanduser() for p in check.read_only)


def _head(root: Path) -> str | None:
    with contextlib.suppress(OSError):
        proc = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "-q", "--verify", "HEAD"], capture_output=True
        )
        if proc.returncode == 0:
            return proc.stdout.decode().strip() or None
    return None


def _named(layout: Layout, config: Config, name: str) -> Check:
    """The check called `name`; BadInput, naming the ones there are, when none is."""
    if name not in config.checks:
        if config.held is not None and name in config.held.checks:
            raise BadInput(config.held.hint)
        known = ", ".join(config.checks) or "none"
        raise BadInput(f"{layout.config}: no check named {name!r} (configured: {known})")
    return config.checks[name]


def _confinement(
    layout: Layout, job: Job, name: str, check: Check, made: Scratch, mode: Mode
) -> sandbox.Confinement:
    """Where check `name` runs: in its scratch tree (under an overlay, or a copy), with
    its extra read-only paths, and the job's key and its own name in its environment."""
    return sandbox.Confinement(
        folder=sandbox.Overlay(made.tree, made.mount_point) if mode == "overlay" else made.tree,
        at=layout.root if check.sandbox == "bwrap" else None,
        read_only=read_only_paths(layout, check),
        tree=layout.root,
        named_by=f"{layout.config}: [checks.{name}]",
        env={"GENJOB_KEY": job.key, "GENJOB_CHECK": name},
        kind=check.sandbox,
        home=made.home,
    )


async def run_check(
    layout: Layout,
    job: Job,
    receipt: Receipt,
    name: str,
    config: Config,
    on_output: Callable[[bytes], None] | None = None,
    cancel: asyncio.Event | None = None,
    candidate: int | None = None,
    out: Path | None = None,
) -> CheckRun:
    """Run check `name` on `job`'s verified `receipt` and keep its record (not when stopped).

    With `candidate`, the receipt is that candidate's, its outputs are read from `out`
    (its `out/` folder) and the record goes to the candidate's own place.
    The scratch tree is made and removed in a thread, so an event loop (the board's)
    stays responsive on a large repository.
    """
    check = _named(layout, config, name)
    mode = await asyncio.to_thread(scratch_mode, layout, check, name)
    ran = check.run.replace("{paths}", " ".join(shlex.quote(p) for p in sorted(receipt.outputs)))
    with _running(layout, job.key, name, check.timeout, candidate):
        tree = scratch_tree(layout, job, receipt, mode, config.limits.max_file_bytes, out)
        made = await asyncio.to_thread(tree.__enter__)
        try:
            how = sandbox.launch(_confinement(layout, job, name, check, made, mode), ["/bin/sh", "-c", ran])
            started = time.time()
            finished = await sandbox.run(how, check.timeout, on_output, cancel, config.limits.max_tail_bytes)
        finally:
            await asyncio.to_thread(tree.__exit__, None, None, None)
        if finished.cancelled:
            return CheckRun(name, finished, None, how.describe, mode)
        record = CheckRecord(
            schema=RECORD_SCHEMA,
            key=job.key,
            name=name,
            command=check.run,
            ran=bounded(ran),
            sandbox=check.sandbox,
            scratch=mode,
            outputs=dict(made.outputs),
            base=dict(made.base),
            result=CheckResult.TIMED_OUT
            if finished.timed_out
            else CheckResult.PASSED
            if finished.passed
            else CheckResult.FAILED,
            exit_code=finished.exit_code,
            started_at=started,
            duration=round(finished.duration, 3),
            timeout=check.timeout,
            tail=finished.tail.decode("utf-8", errors="replace"),
            output_bytes=finished.output_bytes,
            head=await asyncio.to_thread(_head, layout.root),
            by=bounded(actor()),
        )
        await asyncio.to_thread(_keep, layout, record, candidate)
    return CheckRun(name, finished, record, how.describe, mode)


def _keep(layout: Layout, record: CheckRecord, candidate: int | None) -> None:
    write_record(layout, record, candidate)
    of = {"candidate": candidate} if candidate is not None else {}
    record_event(
        layout,
        "checked",
        record.key,
        check=record.name,
        **of,
        result=record.result,
        exit_code=record.exit_code,
        sandbox=record.sandbox,
        duration=record.duration,
    )


def selected(config: Config, names: Sequence[str], where: Path) -> list[str]:
    """The checks to run: `names`, or every configured one; BadInput for an unknown name."""
    if config.held is not None and config.held.checks:  # a held config has no check to run
        raise BadInput(config.held.hint)
    if not config.checks:
        raise BadInput(f'{where}: no checks configured; add a [checks.NAME] table with run = "..."')
    unknown = [n for n in names if n not in config.checks]
    if unknown:
        raise BadInput(
            f"{where}: no check named {', '.join(unknown)} (configured: {', '.join(config.checks)})"
        )
    return list(dict.fromkeys(names)) or list(config.checks)


async def run_checks(
    layout: Layout,
    key: str,
    names: Sequence[str] = (),
    on_start: Callable[[str], None] | None = None,
    on_output: Callable[[str, bytes], None] | None = None,
    cancel: asyncio.Event | None = None,
    on_done: Callable[[CheckRun], None] | None = None,
    candidate: int | None = None,
) -> list[CheckRun]:
    """Run the named checks (default: all) on job `key`'s receipt (or its candidate
    `candidate`'s), one after another; `on_start`, `on_output` and `on_done` hear of
    each as it goes."""
    config = await asyncio.to_thread(load_config, layout.config)  # a board's loop may be running this
    wanted = selected(config, names, layout.config)
    out = None
    if candidate is None:
        job, receipt, _ = await asyncio.to_thread(checkable, layout, key, config)
    else:
        job, receipt, _, out = await asyncio.to_thread(checkable_candidate, layout, key, candidate, config)
    runs = []
    for name in wanted:
        if cancel is not None and cancel.is_set():
            break
        if on_start is not None:
            on_start(name)
        heard = (lambda chunk, n=name: on_output(n, chunk)) if on_output is not None else None
        run = await run_check(layout, job, receipt, name, config, heard, cancel, candidate, out)
        runs.append(run)
        if on_done is not None:
            on_done(run)
    return runs
