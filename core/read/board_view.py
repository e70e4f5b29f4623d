"""The board's job list as a read-model: every known job, and the sorted, filtered subset.

UI-free: a dashboard keeps one `BoardView` and feeds it the rows a `Scanner` produces;
the view keeps its order under updates with a bisect per changed job, so a board with
100,000 jobs never re-sorts all of them for one file event. `age` and `summary_line` are
the short texts a listing shows for a row (the board and `genjob ls` alike).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping
from operator import attrgetter

from core.model.lifecycle import STATE_ORDER, State
from core.model.terminal import one_line
from core.read.snapshot import JobRow

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
