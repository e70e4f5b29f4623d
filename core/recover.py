"""Recovery after a crash: finish interrupted applies and resolve inconsistent pairs.

The rules, applied in this order (each is reported):
 R1 an open apply journal is rolled forward (see `core.apply`);
 R2 a key in `applied/` and anywhere else: applied wins, the tree was written; other job
    copies are removed, a rejection record is kept aside under `.gen/logs/<key>/`;
 R3 a key in `rejected/` and in `queue/` or `running/`: rejected wins, the copies go;
 R4 a key in both `queue/` and `running/`: the claim happened, running wins;
 R5 a lease or cancel request with no running job is removed;
 R6 temp files of interrupted writes (`.tmp-*`) in `.gen/` folders are removed.
A copy is removed only when its digest equals the winner's; a copy with other content
is never deleted but moved aside to `.gen/logs/<key>/` and reported.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from core.apply import apply_job
from core.durable import flocked, remove_stale_temps
from core.errors import BadInput, GenjobError
from core.events import record_event
from core.layout import Layout
from core.queue import JOB_FOLDERS, read_job_file


def recover(layout: Layout) -> list[str]:
    """Bring `.gen/` back to one state per key; returns one line per thing done."""
    report: list[str] = []
    for journal in sorted(layout.journal.glob("*.json")):
        key = journal.stem
        try:
            res = apply_job(layout, key)
            report.append(f"R1 {key}: finished the interrupted apply ({len(res.changed)} file(s))")
        except GenjobError as exc:
            report.append(f"R1 {key}: cannot finish: {exc}")
    with flocked(layout.lock):
        report += _resolve_pairs(layout)
        report += _sweep_strays(layout)
        for folder in [layout.gen, *layout.all_dirs()]:
            for path in remove_stale_temps(folder):
                report.append(f"R6 removed the temp file {path.relative_to(layout.root)}")
    if report:
        record_event(layout, "recovered", None, actions=report)
    return report


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
                dst = _aside(layout, key, path, loser)
                moved = dst.relative_to(layout.root)
                report.append(f"{rule} {key}: {winner} wins; moved the {loser} copy to {moved}")
    return report


def _aside(layout: Layout, key: str, path: Path, folder: str) -> Path:
    dst_dir = layout.log_dir(key)
    dst_dir.mkdir(parents=True, exist_ok=True)
    dst = dst_dir / f"{folder}-{int(time.time() * 1000)}.json"
    os.rename(path, dst)
    return dst


def _sweep_strays(layout: Layout) -> list[str]:
    report = []
    running = _keys(layout.running, ".json")
    for suffix in (".lease", ".cancel"):
        for key in sorted(_keys(layout.running, suffix) - running):
            (layout.running / f"{key}{suffix}").unlink(missing_ok=True)
            report.append(f"R5 {key}: removed the {suffix[1:]} file of a job no longer running")
    return report
