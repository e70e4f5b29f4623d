"""Recovery after a crash: finish interrupted applies and resolve inconsistent pairs.

The rules, applied in this order (each is reported):
 R1 an open apply journal is finished by `core.review.apply_job`: rolled forward when the receipt
    verifies now and every target is at its before or after hash; rolled back, from the
    originals it kept, when one holds a user's edit or the receipt no longer verifies (a
    key no longer trusted, a policy turned on, outputs changed or gone), and the line
    names what was restored and removed; set aside as evidence when it does not fit the
    job. A rollback is all or nothing: an original missing or not at the job's input
    hash leaves the journal and the tree as they are, and the line says what to do;
 R2 a key in `applied/` and anywhere else: applied wins, the tree was written; other job
    copies are removed, a rejection record is kept aside under `.gen/logs/<key>/`;
 R3 a key in `rejected/` and in `queue/` or `running/`: rejected wins, the copies go;
 R4 a key in both `queue/` and `running/`: the claim happened, running wins;
 R5 a lease or cancel request with no running job is removed;
 R6 temp files of interrupted writes (`.tmp-*`) in `.gen/` folders are removed once no
    process is writing them (their lock is free), and a worker's staging folder in
    `.gen/out/` (a run's, or a candidate's) once its attempt is over (the job no longer
    runs under that attempt);
 R7 an ORPHANED job (in `running/`, no receipt, its lease not live) whose current attempt
    left a run on a host that names a `cleanup` gets it run (`core.store.scheduler`), once:
    a Slurm step or a container that outlived its worker is stopped. This one runs a
    command, the operator's own from the config they allowed, outside the state lock.
 R8 an applied job whose commit did not happen (git refused it, or the apply was killed)
    is committed now with the same trailers (`core.review.commit`), or its line says why not.
 R9 the input bytes kept from mint (`.gen/blobs/`) that no job that could still be merged
    uses are removed (`core.store.blobs.collect`), and the line says how many bytes that freed.
A copy is removed only when its digest equals the winner's; a copy with other content
is never deleted but moved aside to `.gen/logs/<key>/` and reported.

Recovery never stops at the first fault: every journal and every rule is tried, each
fault is reported on one line, and `Recovery.left` says whether anything was left.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import ApplyConflict, BadInput, GenjobError, NotFound
from core.model.models import KEY_RE
from core.review.apply_job import apply_job
from core.review.commit import commit_applied, commit_state
from core.review.writer_lock import writer
from core.store.blobs import blobs_dir, collect
from core.store.durable import TMP_PREFIX, environment_fault, flocked, remove_stale_temps
from core.store.events import record_event
from core.store.evidence import set_aside
from core.store.job_state import read_job_file
from core.store.layout import JOB_FOLDERS, Layout
from core.store.lease import read_lease
from core.store.queue import lease_state, locate
from core.store.scheduler import clean_up

# A run's staging folder in `.gen/out/`: `.tmp-<key>-<attempt>`, or with `-c<n>` for a candidate.
_STAGING = re.compile(rf"^{re.escape(TMP_PREFIX)}([0-9a-f]{{32}})-(\d+)(?:-c\d+)?$")


@dataclass
class Recovery:
    """What `recover` did (`done`) and what it could not do (`left`), one line each."""

    done: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)

    @property
    def lines(self) -> list[str]:
        return self.done + self.left

    def attempt(self, rule: str, subject: str, step: Callable[[], list[str]]) -> None:
        """Run one step; a fault is reported as a line in `left`, and recovery goes on."""
        try:
            self.done += step()
        except GenjobError as exc:
            self.left.append(f"{rule} {subject}: cannot finish: {exc}")
        except OSError as exc:
            fault = environment_fault(exc, exc.filename or subject)
            self.left.append(f"{rule} {subject}: cannot finish: {fault or exc}")


def recover(layout: Layout) -> Recovery:
    """Bring `.gen/` back to one state per key, as the repository's one writer."""
    with writer(layout):
        return _recover(layout)


def _recover(layout: Layout) -> Recovery:
    out = Recovery()
    for key in _journal_keys(layout):
        out.attempt("R1", key, functools.partial(_finish_apply, layout, key))
    with flocked(layout.lock):
        out.attempt("R2-R4", "pairs", functools.partial(_resolve_pairs, layout))
        out.attempt("R5", "strays", functools.partial(_sweep_strays, layout))
        for folder in [layout.gen, *layout.all_dirs(), blobs_dir(layout)]:
            where = str(folder.relative_to(layout.root))
            out.attempt("R6", where, functools.partial(_sweep_temps, layout, folder))
        out.attempt("R6", "staging", functools.partial(_sweep_staging, layout))
        out.attempt("R9", "blobs", functools.partial(_collect_blobs, layout))
    for key in _orphaned(layout):
        out.attempt("R7", key, functools.partial(_clean_up_after, layout, key, out.left))
    for key in _uncommitted(layout):
        out.attempt("R8", key, functools.partial(_commit_pending, layout, key))
    if out.lines:
        record_event(layout, "recovered", None, actions=[line[:300] for line in out.lines[:200]])
    return out


def _journal_keys(layout: Layout) -> list[str]:
    """Keys with an open journal (or originals kept by one), in order."""
    try:
        names = os.listdir(layout.journal)
    except FileNotFoundError:
        return []
    keys = {n[: -len(".json")] if n.endswith(".json") else n for n in names if not n.startswith(".")}
    return sorted(keys)


def _finish_apply(layout: Layout, key: str) -> list[str]:
    path = layout.journal_file(key)
    if not KEY_RE.fullmatch(key):
        raise BadInput(f"{layout.journal / key}: not named for a job key; left in place for you to look at")
    if not os.path.lexists(path):
        kept = set_aside(layout, key, layout.journal / key, "originals-without-journal")
        return [f"R1 {key}: originals kept with no journal; set aside at {kept.relative_to(layout.root)}"]
    try:
        res = apply_job(layout, key)
    except ApplyConflict as exc:
        if os.path.lexists(path):
            raise
        return [f"R1 {key}: rolled back the interrupted apply: {exc}"]
    except NotFound:
        kept = set_aside(layout, key, path, "journal-without-job")
        return [f"R1 {key}: a journal for no job; set aside at {kept.relative_to(layout.root)}"]
    if res.already:
        return [f"R1 {key}: closed the journal of an apply that had finished"]
    return [f"R1 {key}: finished the interrupted apply ({len(res.changed)} file(s))"]


def _uncommitted(layout: Layout) -> list[str]:
    """Applied jobs whose apply record says their commit is pending."""
    pending = []
    for key in sorted(_keys(layout.gen / "applied", ".json")):
        with contextlib.suppress(BadInput):
            _, record = read_job_file(layout.job_file("applied", key), "applied")
            if commit_state(record) == "pending":
                pending.append(key)
    return pending


def _commit_pending(layout: Layout, key: str) -> list[str]:
    sha = commit_applied(layout, locate(layout, key))
    return [f"R8 {key}: committed the applied job, whose commit had not happened: {sha}"]


def _keys(folder: Path, suffix: str) -> set[str]:
    try:
        return {n[: -len(suffix)] for n in os.listdir(folder) if n.endswith(suffix) and not n.startswith(".")}
    except FileNotFoundError:
        return set()


def _resolve_pairs(layout: Layout) -> list[str]:
    report = []
    where: dict[str, list[str]] = {}
    for folder in JOB_FOLDERS:
        for key in _keys(layout.gen / folder, ".json"):
            where.setdefault(key, []).append(folder)
    for key, folders in sorted(where.items()):
        if len(folders) < 2:
            continue
        winner = folders[0]  # JOB_FOLDERS is ordered most final first
        rule = {"applied": "R2", "rejected": "R3", "running": "R4"}[winner]
        try:
            won, _ = read_job_file(layout.job_file(winner, key), winner)
        except BadInput as exc:
            report.append(f"{rule} {key}: left as is, the {winner} copy does not load: {exc}")
            continue
        for loser in folders[1:]:
            path = layout.job_file(loser, key)
            try:
                other, _ = read_job_file(path, loser)
                same = other.digest == won.digest
            except BadInput:
                same = False
            if same and loser != "rejected":
                path.unlink()
                report.append(f"{rule} {key}: {winner} wins; removed the copy in {loser}/")
            else:
                moved = set_aside(layout, key, path, loser).relative_to(layout.root)
                report.append(f"{rule} {key}: {winner} wins; moved the {loser} copy to {moved}")
    return report


def _orphaned(layout: Layout) -> list[str]:
    """The keys in `running/` with no receipt whose lease is not live: no worker runs them."""
    return sorted(
        key
        for key in _keys(layout.running, ".json")
        if KEY_RE.fullmatch(key) and not layout.receipt(key).exists() and not lease_state(layout, key).live
    )


def _clean_up_after(layout: Layout, key: str, left: list[str]) -> list[str]:
    """Run the host's cleanup for what the orphaned job's attempt left: the lines of those
    that worked; those that failed go to `left`."""
    done: list[str] = []
    for cleanup in clean_up(layout, key):
        (done if cleanup.ok else left).append(f"R7 {key}: {cleanup.line}")
    return done


def _collect_blobs(layout: Layout) -> list[str]:
    done = collect(layout)
    if not done.blobs:
        return []
    return [f"R9 removed {done.blobs} kept input(s) no job in flight uses, freeing {done.freed} bytes"]


def _sweep_strays(layout: Layout) -> list[str]:
    report = []
    running = _keys(layout.running, ".json")
    for suffix in (".lease", ".cancel"):
        for key in sorted(_keys(layout.running, suffix) - running):
            (layout.running / f"{key}{suffix}").unlink(missing_ok=True)
            report.append(f"R5 {key}: removed the {suffix[1:]} file of a job no longer running")
    return report


def _sweep_temps(layout: Layout, folder: Path) -> list[str]:
    return [f"R6 removed the temp file {p.relative_to(layout.root)}" for p in remove_stale_temps(folder)]


def _sweep_staging(layout: Layout) -> list[str]:
    """A worker's staging folder `.gen/out/.tmp-<key>-<attempt>` once that attempt is over."""
    report: list[str] = []
    try:
        names = os.listdir(layout.out)
    except FileNotFoundError:
        return report
    for name in sorted(names):
        m = _STAGING.match(name)
        path = layout.out / name
        if m is None or not path.is_dir() or path.is_symlink():
            continue
        key, attempt = m.group(1), int(m.group(2))
        if _attempt_running(layout, key, attempt):
            continue
        shutil.rmtree(path)
        report.append(f"R6 {key}: removed the staging folder of attempt {attempt}, which is over")
    return report


def _attempt_running(layout: Layout, key: str, attempt: int) -> bool:
    if not layout.job_file("running", key).exists() or layout.receipt(key).exists():
        return False
    try:
        lease = read_lease(layout, key)
    except BadInput:
        return False
    return lease is not None and lease.token == attempt and lease.fresh(time.time())
