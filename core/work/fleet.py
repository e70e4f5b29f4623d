"""The fleet: each configured generator host, what runs on it now and how it last fared.

A read-model for `genjob hosts` and the board's host view. What a host is comes from
config.toml; what runs on it now is derived from the running jobs (a live lease and the
attempt records that name the host), so a dead worker's runs vanish with its lease;
how it last fared (the last error, the last success, the round trip of the last probe)
is kept in `.gen/fleet/<host>.json`, written by workers as runs end and by probes.
Those files are operational notes, never evidence: losing one loses nothing else.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import BadInput, GenjobError
from core.model.canonical import canonical, loads_strict, read_bytes
from core.model.contract import ReceiptStatus
from core.model.models import KEY_RE
from core.review import sandbox
from core.review.host_sandbox import LocalSandbox
from core.store.candidate_store import CANDIDATE_DONE
from core.store.config import Config, Host
from core.store.durable import atomic_write, flocked
from core.store.events import attempts, bounded
from core.store.layout import Layout
from core.store.lease import read_lease
from core.store.tree import make_folder
from core.work.bundle import ResultInfo

if TYPE_CHECKING:
    from core.work.transport.base import Transport

# Runs of an attempt are announced with this attempt record (with `host`, and `candidate`
# for one of several candidates); a candidate's end with `CANDIDATE_DONE`.
SHIPPING = "shipping"
# The status of a note on a run its host could not start (`note_unstarted`).
NOT_STARTED = "not started"
# How long a probe may take before it counts as failed.
PROBE_TIMEOUT = 60.0
MAX_FLEET_FILE = 64 * 1024


@dataclass(frozen=True)
class Note:
    """One thing a host did: when, for which job and attempt (None for a probe), and how."""

    at: float
    key: str | None
    attempt: int | None
    status: str  # a run's receipt status, "probe", or NOT_STARTED
    reason: str | None


@dataclass(frozen=True)
class HostView:
    """One configured host as the fleet view shows it.

    `running` holds the keys of the runs on it now (a key twice when two candidates of
    one job run there); `last_error` is its latest run or probe that did not end `ok`;
    `rtt` is the wall time of its latest successful probe: an empty job there and back.
    """

    name: str
    transport: str
    target: str
    concurrency: int
    running: tuple[str, ...]
    last_ok: Note | None
    last_error: Note | None
    rtt: float | None
    rtt_at: float | None
    stand_in: bool
    # A local host's sandbox: whether its runs are sandboxed now, and that said plainly.
    sandboxed: bool | None = None
    isolation: str | None = None
    # What a local host's generator needs and this machine lacks, with how to install it.
    missing: str | None = None


def describe_target(host: Host) -> str:
    """Where a host's runs go, as an operator would write it."""
    if host.transport == "ssh":
        return f"{host.address}:{host.port}"
    if host.transport == "command" and host.command:
        return shlex.join(host.command)
    return "this machine"


def describe_isolation(host: Host) -> tuple[bool | None, str | None]:
    """Whether a local host's runs are sandboxed now, and what they can reach, said
    plainly; (None, None) for a remote host, which its own means confine."""
    if host.transport != "local":
        return None, None
    confine = LocalSandbox.of(host)
    return confine.sandboxed_now(), confine.describe()


def describe_missing(host: Host) -> str | None:
    """What a local host's generator runs as `python3 -m MODULE` and the Python its runs
    find first on their PATH cannot import, said with how to install it; None when nothing
    is missing (or the host is remote, where its own machine has what it has)."""
    if host.transport != "local":
        return None
    python = shutil.which("python3", path=_run_path(host))
    if python is None:
        return "needs python3, and a local run finds none on its PATH"
    for module in generator_modules(host.generator):
        if not _importable(python, module):
            return (
                f"needs {module}, not installed for {python}: "
                f"`pip install {module}` there, or `uv tool install genjob --with {module}`"
            )
    return None


def generator_modules(generator: str) -> list[str]:
    """The modules a generator command line runs as `python3 -m MODULE`, in order."""
    try:
        words = shlex.split(generator)
    except ValueError:  # unbalanced quotes: the run will say so itself
        return []
    found = [words[i + 2] for i in range(len(words) - 2) if words[i] == "python3" and words[i + 1] == "-m"]
    return list(dict.fromkeys(found))


def _run_path(host: Host) -> str:
    """The PATH a local run of `host` starts with (`core.work.transport.local`)."""
    from core.work.transport.local import local_env

    if LocalSandbox.of(host).sandboxed_now():
        return sandbox.sandbox_path()
    return local_env(sys.executable)["PATH"]


@functools.cache
def _importable(python: str, module: str) -> bool:
    """Whether `python` finds `module` with genjob's own package on its path, as a local
    run has it (asked once per process: the fleet view reads the hosts every few seconds)."""
    from core.work.transport.local import local_env

    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)"
    env = {**local_env(python), "PYTHONSAFEPATH": "1"}
    try:
        done = subprocess.run(
            [python, "-c", probe, module], env=env, cwd="/", capture_output=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def _read(layout: Layout, host: str) -> dict[str, Any]:
    """The host's notes; a missing or unreadable file reads as none (they are only notes)."""
    path = layout.fleet_file(host)
    if not os.path.lexists(path):
        return {}
    try:
        obj = loads_strict(read_bytes(path, MAX_FLEET_FILE), str(path))
    except BadInput:
        return {}
    return obj if isinstance(obj, dict) else {}


def _note(obj: object) -> Note | None:
    if not isinstance(obj, dict):
        return None
    at, key, attempt, status, reason = (obj.get(k) for k in ("at", "key", "attempt", "status", "reason"))
    if not isinstance(at, (int, float)) or not isinstance(status, str):
        return None
    return Note(
        float(at),
        key if isinstance(key, str) and KEY_RE.fullmatch(key) else None,
        attempt if isinstance(attempt, int) else None,
        status,
        reason if isinstance(reason, str) else None,
    )


def _update(layout: Layout, host: str, changes: Mapping[str, Any]) -> None:
    """Merge `changes` into the host's notes, one writer at a time."""
    make_folder(layout.fleet, layout.gen)
    with flocked(layout.fleet / ".lock"):
        record = {**_read(layout, host), **bounded(dict(changes))}
        atomic_write(layout.fleet_file(host), canonical(record), durable=False)


def note_run(
    layout: Layout,
    host: str,
    key: str,
    attempt: int,
    status: ReceiptStatus,
    reason: str | None,
    at: float | None = None,
) -> None:
    """Record how a run on `host` ended: the last success, or the last error."""
    note = {"at": time.time() if at is None else at, "key": key, "attempt": attempt, "status": status}
    if status is ReceiptStatus.OK:
        _update(layout, host, {"last_ok": note})
    else:
        _update(layout, host, {"last_error": {**note, "reason": reason}})


def note_unstarted(layout: Layout, host: str, key: str, attempt: int, reason: str) -> None:
    """Record that `host` could not start a run (`core.work.ship.host_failed`): its last
    error, which `genjob hosts` and the fleet view show."""
    note = {"at": time.time(), "key": key, "attempt": attempt, "status": NOT_STARTED, "reason": reason}
    _update(layout, host, {"last_error": note})


def note_probe(layout: Layout, host: str, seconds: float | None, error: str | None) -> None:
    """Record a probe: its round trip when it worked, else an error."""
    at = time.time()
    if error is None:
        _update(layout, host, {"probe": {"at": at, "seconds": seconds}})
    else:
        _update(layout, host, {"last_error": {"at": at, "status": "probe", "reason": error}})


def runs_now(layout: Layout, now: float | None = None) -> dict[str, list[str]]:
    """The keys running on each host now: the current attempt's runs of every running
    job whose lease is live, less the candidates of it that have finished."""
    now = time.time() if now is None else now
    found: dict[str, list[str]] = {}
    try:
        names = os.listdir(layout.running)
    except FileNotFoundError:
        return found
    for name in names:
        key = name.removesuffix(".lease")
        if not name.endswith(".lease") or not KEY_RE.fullmatch(key):
            continue
        try:
            lease = read_lease(layout, key)
            records = attempts(layout, key) if lease is not None and lease.fresh(now) else []
        except BadInput:
            continue
        for host in _live_runs(records, lease.token if lease else 0):
            found.setdefault(host, []).append(key)
    return found


def _live_runs(records: Iterable[dict[str, Any]], token: int) -> list[str]:
    """The hosts of the runs of attempt `token` that have not finished."""
    runs: dict[object, str] = {}
    for r in records:
        if r.get("attempt") != token:
            continue
        if r.get("event") == SHIPPING and isinstance(r.get("host"), str):
            runs[r.get("candidate")] = r["host"]
        elif r.get("event") == CANDIDATE_DONE:
            runs.pop(r.get("candidate"), None)
    return list(runs.values())


def fleet(layout: Layout, config: Config, now: float | None = None) -> list[HostView]:
    """Every configured host, in config order, with its runs now and its notes."""
    running = runs_now(layout, now)
    views = []
    for name, host in config.hosts.items():
        sandboxed, isolation = describe_isolation(host)
        notes = _read(layout, name)
        probe = notes.get("probe")
        probe = probe if isinstance(probe, dict) else {}
        seconds, probed_at = probe.get("seconds"), probe.get("at")
        views.append(
            HostView(
                name=name,
                transport=host.transport,
                target=describe_target(host),
                concurrency=host.concurrency,
                running=tuple(sorted(running.get(name, []))),
                last_ok=_note(notes.get("last_ok")),
                last_error=_note(notes.get("last_error")),
                rtt=float(seconds) if isinstance(seconds, (int, float)) else None,
                rtt_at=float(probed_at) if isinstance(probed_at, (int, float)) else None,
                stand_in=host.stand_in,
                sandboxed=sandboxed,
                isolation=isolation,
                missing=describe_missing(host),
            )
        )
    return views


def _no_files() -> dict[str, bytes]:
    return {}


def _failure(info: ResultInfo | None) -> str | None:
    """Why a probe that came back failed; None when it worked."""
    if info is None:
        return "no result from the host"
    if info.error:
        return info.error
    if info.exit_code != 0:
        return f"`true` exited with status {info.exit_code} there"
    return None


@dataclass(frozen=True)
class Probe:
    host: str
    seconds: float | None
    error: str | None


async def probe(layout: Layout, name: str, transport: Transport, timeout: float = PROBE_TIMEOUT) -> Probe:
    """Time an empty job on the host, there and back (start, bundle, runner, result),
    and note it in the host's file. Every failure is a Probe with its error."""
    from core.work.transport.base import JobSpec, run_job  # the transports: only when probing

    doc = canonical({"allowed_paths": ["probe"], "instruction": "probe"})
    spec = JobSpec(doc, "probe", ["probe"], _no_files, "true", timeout)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="genjob-probe-") as tmp:
        try:
            outcome, info = await asyncio.wait_for(run_job(transport, spec, Path(tmp) / "out"), timeout + 30)
        except TimeoutError:
            error: str | None = f"no answer in {timeout + 30:g}s"
        except GenjobError as exc:
            error = str(exc)
        else:
            error = outcome.error or _failure(info)
    seconds = None if error else time.perf_counter() - start
    await asyncio.to_thread(note_probe, layout, name, seconds, error)
    return Probe(name, seconds, error)
