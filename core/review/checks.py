"""Running checks: the project's own commands run on a receipt's outputs.

A check (``[checks.NAME]`` in `config.toml`) runs in a scratch tree (`core.review.scratch`):
the repository as it is now with the receipt's verified outputs written in, under the
sandbox (`core.review.sandbox`). Its result is kept as a record bound to what it checked
(`core.model.check_record`, written by `core.store.check_records`); a candidate's checks
(best-of-N) are run and kept the same way, bound to that candidate's outputs. Where a
check stands is judged by `core.review.check_status`.

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
from pathlib import Path

from core.errors import BadInput, Stale, VerificationFailed, WrongState
from core.model.canonical import canonical
from core.model.check_record import RECORD_SCHEMA, CheckRecord, CheckResult, MergedOutputs
from core.model.models import Job, Receipt
from core.review import sandbox
from core.review.scratch import Mode, Scratch, scratch_tree
from core.review.verify import Verification, verify, verify_candidate
from core.store.candidate_store import load
from core.store.check_records import _process_start, write_record
from core.store.config import Check, Config, load_config
from core.store.durable import atomic_write_at, folder
from core.store.events import actor, bounded, record_event
from core.store.job_state import said_state
from core.store.layout import Layout
from core.store.queue import locate
from core.store.tree import closing, open_folder

_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


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


# --- records ---------------------------------------------------------------------------


# --- what each check's state is ----------------------------------------------------------


# --- running ------------------------------------------------------------------------------


@contextlib.contextmanager
def _running(
    layout: Layout, key: str, name: str, timeout: float, candidate: int | None, merged: str | None = None
) -> Iterator[None]:
    """Hold `<name>.lock` and publish `<name>.run` for the block; WrongState when another
    run of the same check (on the same receipt, candidate or merged bytes) is under way."""
    where = layout.check_dir(key, candidate, merged=merged)
    with folder(layout.gen) as gen:
        fd = open_folder(gen, layout.check_parts(key, candidate, merged=merged), str(where), [])
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
        state = said_state(layout, key)
        raise WrongState(f"{key}: is {state}; checks run on a job with a receipt that is not yet applied")
    v = verify(layout, loc.job, config)
    return loc.job, _verified_receipt(v, key, key, str(layout.receipt(key))), v


def checkable_candidate(
    layout: Layout, key: str, number: int, config: Config
) -> tuple[Job, Receipt, Verification, Path]:
    """The job `key`, its candidate `number`'s receipt verified now (signature included),
    and the folder of that candidate's outputs; refused when checks cannot run on it."""
    loc = locate(layout, key)
    if loc.folder != "running":
        state = said_state(layout, key)
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
    layout: Layout, job: Job, name: str, check: Check, made: Scratch, *, mode: Mode
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
    *,
    on_output: Callable[[bytes], None] | None = None,
    cancel: asyncio.Event | None = None,
    candidate: int | None = None,
    out: Path | None = None,
    merged: MergedOutputs | None = None,
) -> CheckRun:
    """Run check `name` on `job`'s verified `receipt` and keep its record (not when stopped).

    With `candidate`, the receipt is that candidate's, its outputs are read from `out`
    (its `out/` folder) and the record goes to the candidate's own place. With `merged`,
    `receipt` names the merged bytes staged in `out` (`core.review.merge_checks`), and the
    record, bound to them, goes to their own place.
    The scratch tree is made and removed in a thread, so an event loop (the board's)
    stays responsive on a large repository.
    """
    check = _named(layout, config, name)
    mode = await asyncio.to_thread(scratch_mode, layout, check, name)
    ran = check.run.replace("{paths}", " ".join(shlex.quote(p) for p in sorted(receipt.outputs)))
    at = merged.digest if merged is not None else None
    with _running(layout, job.key, name, check.timeout, candidate, at):
        tree = scratch_tree(layout, job, receipt, mode, config.limits.max_file_bytes, out=out)
        made = await asyncio.to_thread(tree.__enter__)
        try:
            how = sandbox.launch(
                _confinement(layout, job, name, check, made, mode=mode), ["/bin/sh", "-c", ran]
            )
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
            base=dict(merged.base if merged is not None else made.base),
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
        await asyncio.to_thread(_keep, layout, record, candidate, at)
    return CheckRun(name, finished, record, how.describe, mode)


def _keep(layout: Layout, record: CheckRecord, candidate: int | None, merged: str | None) -> None:
    write_record(layout, record, candidate, merged=merged)
    of: dict[str, object] = {"candidate": candidate} if candidate is not None else {}
    if merged is not None:
        of["merged"] = merged
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
    *,
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
        run = await run_check(
            layout, job, receipt, name, config, on_output=heard, cancel=cancel, candidate=candidate, out=out
        )
        runs.append(run)
        if on_done is not None:
            on_done(run)
    return runs
