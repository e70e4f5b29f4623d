"""Read-models for a board: the sorted, filtered job list and the approve preflight.

UI-free: a dashboard keeps one `BoardView` and feeds it the rows a `Scanner` produces;
the view keeps its order under updates with a bisect per changed job, so a board with
100,000 jobs never re-sorts all of them for one file event.
"""

from __future__ import annotations

import bisect
import os
import subprocess
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

from core.config import load_config
from core.errors import GenjobError
from core.inspect_job import JobDetail
from core.layout import Layout
from core.lifecycle import STATE_ORDER, State
from core.mint import build_job
from core.paths import RESERVED_TOP
from core.queue import Enqueued, enqueue, locate
from core.snapshot import JobRow
from core.terminal import one_line
from core.verify import PASSED, verify

_RANK = {state: i for i, state in enumerate(STATE_ORDER)}

# (rank of the state, minus the creation time, key): what needs an operator first, newest first.
SortKey = tuple[int, float, str]


def sort_key(row: JobRow) -> SortKey:
    return (_RANK[row.state], -row.created_at, row.key)


def _sorted(rows: list[JobRow]) -> list[JobRow]:
    """`rows` in `sort_key` order, by three stable sorts on one field each: unlike one sort
    on `sort_key`, it makes no key object per row (100,000 tuples at once, on a big board)."""
    rows.sort(key=_KEY)
    rows.sort(key=_CREATED, reverse=True)
    rows.sort(key=_rank)
    return rows


_KEY = attrgetter("key")
_CREATED = attrgetter("created_at")


def _rank(row: JobRow) -> int:
    return _RANK[row.state]


def age(seconds: float) -> str:
    """A short age: 42s, 5m, 3h, 2d."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def summary_line(row: JobRow) -> str:
    """What the list shows in its last column: the instruction, or the fault of a bad file."""
    if row.state in (State.INVALID, State.INCONSISTENT) and row.problems:
        problem = row.problems[0]
        _, sep, fault = problem.partition(".json: ")
        return one_line(fault if sep else problem)
    return one_line(row.instruction) if row.instruction else one_line(row.problems[0] if row.problems else "")


class BoardView:
    """Every known job, and the sorted subset that passes the filter.

    `states` empty means every state; `text` matches (case-insensitively) a key prefix,
    the instruction, the worker, a path or the state name. `tracked` holds the keys of
    jobs in `track` states, kept up to date, for re-deriving them as time passes.
    """

    def __init__(self, track: Iterable[State] = ()) -> None:
        self.track = frozenset(track)
        self.tracked: set[str] = set()
        self.rows: dict[str, JobRow] = {}
        self.counts: Counter[State] = Counter()
        self.states: frozenset[State] = frozenset()
        self.text = ""
        self._order: list[JobRow] = []  # sorted by `sort_key`, which is never stored

    def __len__(self) -> int:
        return len(self._order)

    def matches(self, row: JobRow) -> bool:
        if self.states and row.state not in self.states:
            return False
        if not self.text:
            return True
        needle = self.text
        return (
            row.key.startswith(needle)
            or needle in row.instruction.casefold()
            or needle in row.worker.casefold()
            or needle in row.state.value.casefold()
            or any(needle in p.casefold() for p in row.allowed_paths)
            or any(needle in p.casefold() for p in row.problems)
        )

    def set_filter(self, states: Iterable[State] | None = None, text: str | None = None) -> None:
        """Change the filter and rebuild the visible order."""
        if states is not None:
            self.states = frozenset(states)
        if text is not None:
            self.text = text.strip().casefold()
        self._order = _sorted([r for r in self.rows.values() if self.matches(r)])

    def update(self, changed: Mapping[str, JobRow | None]) -> None:
        """Apply changed rows (None: the job is gone), keeping the order by bisection."""
        big = len(changed) > 64 and len(changed) * 8 > len(self._order)
        for key, row in changed.items():
            old = self.rows.pop(key, None)
            if old is not None:
                self.counts[old.state] -= 1
            if row is not None:
                self.rows[key] = row
                self.counts[row.state] += 1
            if row is not None and row.state in self.track:
                self.tracked.add(key)
            else:
                self.tracked.discard(key)
            if big:
                continue
            if old is not None and self.matches(old):
                del self._order[bisect.bisect_left(self._order, sort_key(old), key=sort_key)]
            if row is not None and self.matches(row):
                bisect.insort(self._order, row, key=sort_key)
        if big:
            self.set_filter()
        self.counts = +self.counts

    def remove_missing(self, present: Iterable[str]) -> list[str]:
        """Drop every job not in `present` (after a full scan); returns the dropped keys."""
        keep = set(present)
        gone = [k for k in self.rows if k not in keep]
        self.update(dict.fromkeys(gone))
        return gone

    def key_at(self, index: int) -> str:
        return self._order[index].key

    def row_at(self, index: int) -> JobRow:
        return self._order[index]

    def index_of(self, key: str) -> int | None:
        row = self.rows.get(key)
        if row is None or not self.matches(row):
            return None
        return bisect.bisect_left(self._order, sort_key(row), key=sort_key)

    def keys(self) -> list[str]:
        return [r.key for r in self._order]


@dataclass(frozen=True)
class PathChange:
    path: str
    status: str
    added: int
    removed: int


@dataclass(frozen=True)
class Preflight:
    """What an operator needs to see before apply writes the tree."""

    key: str
    changes: tuple[PathChange, ...]
    signature_required: bool
    signature: str
    signature_ok: bool
    base_fresh: bool
    base_detail: str
    verified: bool
    failures: tuple[str, ...]

    @property
    def added(self) -> int:
        return sum(c.added for c in self.changes)

    @property
    def removed(self) -> int:
        return sum(c.removed for c in self.changes)


def preflight(detail: JobDetail) -> Preflight:
    """The approve preflight of one job, from its freshly read detail."""
    v = detail.verification
    checks = {c.name: c for c in v.checks} if v else {}
    sig = checks.get("signature")
    base = checks.get("base")
    return Preflight(
        key=detail.row.key,
        changes=tuple(PathChange(d.path, d.status, d.added, d.removed) for d in detail.diffs),
        signature_required=v.signature_required if v else True,
        signature=sig.detail if sig else "no receipt to check",
        signature_ok=bool(sig and sig.status == PASSED),
        base_fresh=bool(base and base.status == PASSED),
        base_detail=base.detail if base else "not checked",
        verified=bool(v and v.ok),
        failures=tuple(f"{c.name}: {c.detail}" for c in (v.failures if v else [])) + tuple(detail.errors),
    )


def receipt_verdict(layout: Layout, key: str) -> bool | None:
    """Whether apply would accept the job's receipt now; None when there is nothing to check.

    The list shows it next to RECEIVED so that an operator sees which receipts are
    approvable without opening each one; the detail pane always verifies afresh.
    """
    try:
        located = locate(layout, key)
        if not layout.receipt(key).exists():
            return None
        return verify(layout, located.job, load_config(layout.config)).ok
    except (GenjobError, OSError):
        return None


def submit_job(
    layout: Layout, instruction: str, paths: Iterable[str], new_paths: Iterable[str] = ()
) -> Enqueued:
    """Mint a v2 job over the tree as it is now and queue it (the secret check included)."""
    return enqueue(layout, build_job(layout, instruction, list(paths), list(new_paths)))


def repo_files(root: Path, limit: int = 20000) -> list[str]:
    """The repository's files a job may name: git's tracked and untracked-but-not-ignored
    files when it is a git work tree, else a walk that skips `.git/` and `.gen/`."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
            timeout=20,
        ).stdout
        names = sorted({n for n in out.decode("utf-8", "surrogateescape").split("\0") if n})
    except (OSError, subprocess.SubprocessError):
        names = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in RESERVED_TOP)
            rel_dir = os.path.relpath(dirpath, root)
            for name in sorted(filenames):
                names.append(name if rel_dir == "." else f"{rel_dir}/{name}")
            if len(names) >= limit:
                break
    return [n for n in names if not n.startswith((".gen/", ".git/"))][:limit]
