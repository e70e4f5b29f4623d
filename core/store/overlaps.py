"""Which jobs in flight share allowed paths: the receipts that would fight, foretold.

A job is in flight from its mint until it is applied or closed: its document is in
`queue/` or `running/` (QUEUED, RUNNING, ORPHANED, RECEIVED, STALE). Two jobs overlap on
the allowed paths they share. Under `policy.overlapping = "serialize"` a job waits for
the overlapping jobs in flight that were minted before it (by `created_at`, then key),
so that two jobs never wait for each other.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from core.errors import BadInput
from core.model.canonical import read_bytes, sha256_file
from core.model.models import KEY_RE, Job, job_from_bytes
from core.model.paths import lstat_inside
from core.store.layout import Layout

IN_FLIGHT_FOLDERS = ("running", "queue")


@dataclass(frozen=True)
class Overlap:
    """Another job in flight and the allowed paths it shares with a job."""

    key: str
    paths: tuple[str, ...]

    def line(self) -> str:
        return f"overlaps {self.key[:12]} on {', '.join(self.paths)}"

    def to_dict(self) -> dict[str, object]:
        return {"key": self.key, "paths": list(self.paths)}


def in_flight(layout: Layout) -> dict[str, Job]:
    """Every job whose document is in `running/` or `queue/` and loads (one that does not
    load is INVALID, shown with its fault elsewhere, and overlaps nothing)."""
    jobs: dict[str, Job] = {}
    for folder in IN_FLIGHT_FOLDERS:
        try:
            names = os.listdir(layout.gen / folder)
        except FileNotFoundError:
            continue
        for name in sorted(names):
            key = name[: -len(".json")]
            if not name.endswith(".json") or not KEY_RE.fullmatch(key) or key in jobs:
                continue
            path = layout.job_file(folder, key)
            try:
                job = job_from_bytes(read_bytes(path), str(path))
            except (BadInput, OSError):
                continue
            if job.key == key:
                jobs[key] = job
    return jobs


def overlapping(job: Job, others: Mapping[str, Job]) -> list[Overlap]:
    """The jobs of `others` (but `job` itself) that share an allowed path with `job`, by key."""
    mine = set(job.allowed_paths)
    found = []
    for key, other in sorted(others.items()):
        shared = mine.intersection(other.allowed_paths)
        if key != job.key and shared:
            found.append(Overlap(key, tuple(sorted(shared))))
    return found


@dataclass(frozen=True)
class FlightPaths:
    """The allowed paths of each job in flight and the jobs in flight on each path: the
    overlaps of one job are found when asked, since those of every job at once grow with
    the square of the jobs (a queue of jobs on one file)."""

    paths: dict[str, tuple[str, ...]] = field(default_factory=dict)
    on_path: dict[str, list[str]] = field(default_factory=dict)

    def overlapping(self) -> frozenset[str]:
        """The jobs in flight that share an allowed path with another."""
        return frozenset(key for keys in self.on_path.values() if len(keys) > 1 for key in keys)

    def of(self, key: str) -> list[Overlap]:
        """The jobs in flight (but `key` itself) that share an allowed path with `key`, by key."""
        shared: dict[str, list[str]] = {}
        for rel in self.paths.get(key, ()):
            for other in self.on_path[rel]:
                if other != key:
                    shared.setdefault(other, []).append(rel)
        return [Overlap(other, tuple(sorted(rels))) for other, rels in sorted(shared.items())]


def flight_paths(layout: Layout) -> FlightPaths:
    """Every job in flight by its allowed paths, and each path's jobs."""
    paths = {key: tuple(job.allowed_paths) for key, job in in_flight(layout).items()}
    on_path: dict[str, list[str]] = {}
    for key, rels in paths.items():
        for rel in rels:
            on_path.setdefault(rel, []).append(key)
    return FlightPaths(paths, on_path)


def overlap_map(layout: Layout, keys: Iterable[str] | None = None) -> dict[str, list[Overlap]]:
    """For each job in flight (or each of `keys` that is), the jobs in flight it overlaps;
    a job that overlaps none is left out. What `ls --json` shows per row."""
    flight = flight_paths(layout)
    wanted = flight.paths.keys() if keys is None else [k for k in keys if k in flight.paths]
    return {key: found for key in wanted if (found := flight.of(key))}


def overlaps_of(layout: Layout, key: str) -> list[Overlap]:
    """The jobs in flight that job `key` overlaps (none when it is not in flight itself)."""
    return overlap_map(layout, [key]).get(key, [])


def minted_before(a: Job, b: Job) -> bool:
    return (a.created_at, a.key) < (b.created_at, b.key)


def waits_for(job: Job, others: Mapping[str, Job]) -> list[Overlap]:
    """The overlapping jobs in flight that `job` waits for under serialize: the older ones."""
    return [o for o in overlapping(job, others) if minted_before(others[o.key], job)]


def moved_inputs(layout: Layout, job: Job) -> list[str]:
    """The allowed paths of `job` that the tree no longer holds at its input hash."""
    moved = []
    for rel in job.allowed_paths:
        want = job.input_digest(rel)
        try:
            st = lstat_inside(layout.root, rel)
        except BadInput:
            moved.append(rel)
            continue
        if st is None:
            now = None
        elif not stat.S_ISREG(st.st_mode):
            now = "other"
        else:
            now = sha256_file(layout.root / rel)
        if now != want:
            moved.append(rel)
    return moved
