"""What a scheduler said about a run, and a host's `cleanup`, which stops what a dead worker left.

The runner reports, as it starts, the ids its scheduler or container engine gave the run
(`core.remote.rules.FACTS`: Slurm's job and step, the container, the pod), and the worker
records them in `.gen/attempts/<key>.jsonl` (a `STARTED` record). A worker killed together
with its client (`srun`, `kubectl`, `docker`) can leave that run going: Slurm, at its
default `InactiveLimit=0`, lets a step run on until its `--time`. A host's `cleanup`
command, run on this machine with the recorded facts shell-quoted, stops it. `genjob
requeue`, `genjob recover` and a stop of an orphaned job run it for each run of the job's
current attempt that reported facts and has not been cleaned up yet (a failed cleanup is
tried again the next time), and record how it went (a `CLEANED_UP` record).

An attempts file is a claim, as every file in `.gen/` is: each fact is checked again here
before it is quoted into a command, and only a config the operator allowed names one.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import GenjobError
from core.remote.rules import FACT_VALUE
from core.store.config import CLEANUP_PLACEHOLDER, Config, load_config
from core.store.events import attempts, claims, record_attempt, record_event
from core.store.layout import Layout

STARTED = "started"
CLEANED_UP = "cleanup"
# How long a cleanup command may take; past it, it is killed and counts as failed.
CLEANUP_TIMEOUT = 60.0
# How much of what a cleanup printed its record and its message quote.
MAX_WORDS = 300


@dataclass(frozen=True)
class Cleanup:
    """How one run's cleanup went: its host, attempt and candidate, the command line it ran
    (None when it could not be made), whether it exited 0, and what it said or why not."""

    host: str
    attempt: int
    candidate: int | None
    command: str | None
    ok: bool
    detail: str

    @property
    def line(self) -> str:
        which = f"attempt {self.attempt}" + (
            f" candidate {self.candidate}" if self.candidate is not None else ""
        )
        if self.ok:
            return f"ran host {self.host}'s cleanup for {which}: {self.command}"
        return f"host {self.host}'s cleanup for {which} failed: {self.detail}"


@dataclass(frozen=True)
class Started:
    """One run of an attempt as the runner reported it: where it ran and what it said."""

    host: str
    candidate: int | None
    facts: dict[str, Any]


def started_runs(records: Iterable[Mapping[str, Any]], attempt: int) -> list[Started]:
    """The runs of `attempt` that reported facts, the latest report of each."""
    runs: dict[object, Started] = {}
    for r in records:
        host, facts, candidate = r.get("host"), r.get("facts"), r.get("candidate")
        if r.get("event") != STARTED or r.get("attempt") != attempt or not isinstance(host, str):
            continue
        if isinstance(facts, dict) and facts:
            runs[candidate] = Started(host, candidate if isinstance(candidate, int) else None, facts)
    return list(runs.values())


def _cleaned(records: Iterable[Mapping[str, Any]], attempt: int) -> set[object]:
    """The candidates (None for a single run) of `attempt` whose cleanup worked."""
    return {
        r.get("candidate")
        for r in records
        if r.get("event") == CLEANED_UP and r.get("attempt") == attempt and r.get("ok") is True
    }


def clean_up(layout: Layout, key: str, attempt: int | None = None) -> list[Cleanup]:
    """Run its host's cleanup for each run of `attempt` (default: the job's current one)
    that reported facts and was not cleaned up yet, and record each; [] when there is none.

    Never raises for what a cleanup meets: a config that does not load, a host gone from
    it or waiting for approval, a fact missing, a command that fails: each is a failed
    `Cleanup` that says so."""
    records = attempts(layout, key)
    attempt = claims(records) if attempt is None else attempt
    done = _cleaned(records, attempt)
    runs = [run for run in started_runs(records, attempt) if run.candidate not in done]
    if not runs:
        return []
    try:
        config: Config | str = load_config(layout.config)
    except GenjobError as exc:
        config = str(exc)
    results = [_clean_one(layout, run, attempt, config) for run in runs]
    found = [c for c in results if c is not None]
    for cleanup in found:
        _record(layout, key, cleanup)
    return found


def _clean_one(layout: Layout, run: Started, attempt: int, config: Config | str) -> Cleanup | None:
    """Run `run`'s cleanup; None when its host has none."""

    def failed(why: str, command: str | None = None) -> Cleanup:
        return Cleanup(run.host, attempt, run.candidate, command, False, why)

    if isinstance(config, str):
        return failed(f"not run: {config}")
    host = config.hosts.get(run.host)
    if host is None:
        held = config.held
        if held is not None and run.host in held.hosts:
            return failed(f"not run: {held.hint}")
        return failed(f"not run: {layout.config} no longer has a host {run.host!r}")
    if host.cleanup is None:
        return None
    try:
        command = render_cleanup(host.cleanup, run.facts)
    except ValueError as exc:
        return failed(f"not run: {exc}")
    ok, words = run_cleanup(command, layout)
    return Cleanup(run.host, attempt, run.candidate, command, ok, words)


def render_cleanup(template: str, facts: Mapping[str, Any]) -> str:
    """`template` with each placeholder replaced, in one pass, by its fact shell-quoted;
    ValueError naming a fact that the run did not report or that is not a plain word."""

    def value(match: Any) -> str:
        name = match.group(1)
        fact = facts.get(name)
        if fact is None:
            raise ValueError(f"it needs {{{name}}}, which the run did not report")
        if not isinstance(fact, str) or not FACT_VALUE.fullmatch(fact):
            raise ValueError(f"the recorded {name} {fact!r} is not a plain word")
        return shlex.quote(fact)

    return str(CLEANUP_PLACEHOLDER.sub(value, template))


def run_cleanup(command: str, layout: Layout) -> tuple[bool, str]:
    """Run `command` with `/bin/sh -c` in the repository, with genjob's environment (what
    `scancel` or `kubectl` need to reach their cluster); whether it exited 0, and its last
    words or why it failed. One that runs past CLEANUP_TIMEOUT is killed with its group."""
    try:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=layout.root,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        return False, f"cannot run /bin/sh: {exc.strerror}"
    try:
        out, _ = proc.communicate(timeout=CLEANUP_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return False, f"`{command}` still ran after {CLEANUP_TIMEOUT:g}s and was killed"
    words = _last_words(out)
    if proc.returncode == 0:
        return True, words
    return False, f"`{command}` exited with status {proc.returncode}" + (f": {words}" if words else "")


def _last_words(out: bytes) -> str:
    lines = [line.strip() for line in out.decode("utf-8", errors="replace").splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last if len(last) <= MAX_WORDS else last[:MAX_WORDS] + "…"


def _record(layout: Layout, key: str, cleanup: Cleanup) -> None:
    """Record the cleanup in the attempts file and the audit log; one that cannot be
    recorded costs nothing else (it is tried again next time)."""
    where = {"candidate": cleanup.candidate} if cleanup.candidate is not None else {}
    fields = {"host": cleanup.host, "command": cleanup.command, "ok": cleanup.ok, "detail": cleanup.detail}
    with contextlib.suppress(GenjobError, OSError):
        record_attempt(layout, key, CLEANED_UP, attempt=cleanup.attempt, **where, **fields)
        record_event(layout, "cleaned_up", key, attempt=cleanup.attempt, **where, **fields)
