"""The board's job list as a read-model: every job by name, the rows read, and the order.

`board_listing` puts each key in the group of its provisional state (`core.read.folders`);
`BoardView.update` moves a key to its state's group once its row is read. The view holds
a string and a dict slot per job, the operator's rows and at most `KEPT_ROWS` others.
Order: `STATE_ORDER`; within a state the newest job file first where each is stat'ed
anyway (running/ and the queue, as `Claimer` lists it; the queue once `set_stamps` has
its mtimes, after the first frame), else by key; a group is sorted when first looked into.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from core.model.lifecycle import STATE_ORDER, State
from core.model.terminal import one_line
from core.read.folders import folder_keys, provisional_state
from core.read.rows import JobRow
from core.store.layout import FOLDER_STATE, JOB_FOLDERS

KEPT_ROWS = 10_000
# Ordered by their job files' mtimes; all but the queue are the operator's, whose rows stay.
STAMPED = frozenset({State.ORPHANED, State.RECEIVED, State.STALE, State.FAILED, State.RUNNING, State.QUEUED})
OPERATORS = STAMPED - {State.QUEUED}
_RANK = {state: i for i, state in enumerate(STATE_ORDER)}
_NAMED = {folder: State(state) for folder, state in FOLDER_STATE.items()}
_FOLDER: dict[State | None, str] = {state: folder for folder, state in _NAMED.items()}


def summary_line(row: JobRow) -> str:
    """What a listing shows in its last column: the instruction, or the fault of a bad file."""
    if row.state in (State.INVALID, State.INCONSISTENT) and row.problems:
        _, sep, fault = row.problems[0].partition(".json: ")
        return one_line(fault if sep else row.problems[0])
    return one_line(row.instruction or (row.problems[0] if row.problems else ""))


def row_matches(row: JobRow, needle: str) -> bool:
    """Whether a row passes a text filter (casefolded): a key prefix, the state's name, or
    part of the instruction, the worker, a path or a problem."""
    texts = (row.state.value, row.instruction, row.worker, *row.allowed_paths, *row.problems)
    return row.key.startswith(needle) or any(needle in text.casefold() for text in texts)


class BoardListing(NamedTuple):
    where: dict[str, State]  # each key's provisional state
    groups: dict[State, list[str]]  # the keys of each state, not sorted yet
    operators: list[str]  # the jobs in running/, with a receipt or with candidates: read at once


# The folders of finished jobs: most of a large `.gen/`, and below the rest on the board.
FINISHED = ("applied", "rejected")


def board_listing(gen: str, *, finished: bool = True) -> BoardListing:
    """Each state folder listed once, names alone; a key in two folders, or with a receipt,
    takes the state its names give it. Without `finished`, the finished jobs' folders are
    not listed (their keys, and a key also in one of them, come with the whole listing)."""
    keys = {
        folder: folder_keys(f"{gen}/{folder}") if finished or folder not in FINISHED else []
        for folder in (*JOB_FOLDERS, "receipts")
    }
    biggest = max(JOB_FOLDERS, key=lambda folder: len(keys[folder]))
    where = dict.fromkeys(keys[biggest], _NAMED[biggest])  # one dict of a million slots, made once
    for folder in JOB_FOLDERS:
        if folder != biggest:
            where.update(dict.fromkeys(keys[folder], _NAMED[folder]))
    several: set[str] = set()
    if len(where) < sum(len(keys[folder]) for folder in JOB_FOLDERS):  # a key in two folders (a crash)
        seen = Counter(key for folder in JOB_FOLDERS for key in keys[folder])
        several = {key for key, n in seen.items() if n > 1}
    receipts = set(keys["receipts"])
    odd = several | receipts
    groups: dict[State, list[str]] = {state: [] for state in STATE_ORDER}
    for folder in JOB_FOLDERS:
        listed = keys[folder]
        groups[_NAMED[folder]] = listed if odd.isdisjoint(listed) else [k for k in listed if k not in odd]
    for key in odd:
        named = (
            [f for f in JOB_FOLDERS if key in keys[f]] if key in several else [_FOLDER.get(where.get(key))]
        )
        where[key] = provisional_state(key, filter(None, named), receipt=key in receipts)
        groups[where[key]].append(key)
    operators = dict.fromkeys([*keys["running"], *receipts, *folder_keys(f"{gen}/candidates", "")])
    return BoardListing(where, groups, list(operators))


class BoardView:
    """Every known job by name, the rows read, and the order of those the filter passes.

    `states` empty means every state. With a `text`, the jobs shown are those `matched`:
    by key or state name at once, by content once read (`update`, `found`).
    """

    def __init__(self, track: Iterable[State] = ()) -> None:
        self.track = frozenset(track)
        self.where: dict[str, State] = {}
        self.rows: dict[str, JobRow] = {}
        self.stamps: dict[str, int] = {}
        self.read: set[str] = set()  # keys whose state was read, not only named
        self.states: frozenset[State] = frozenset()
        self.text = ""
        self.matched: set[str] = set()
        self._groups: dict[State, list[str]] = {state: [] for state in STATE_ORDER}
        self._sorted: set[State] = set()
        self._others: dict[str, None] = {}  # rows kept of jobs not the operator's, oldest first
        self._shown: list[str] | None = None  # with a text: the keys it passes, in order
        # The ready filter: only these keys, in this order (the order `apply --ready` takes them).
        self.only: tuple[str, ...] | None = None
        self._at: dict[str, int] = {}  # under `only`: each shown key's index

    @property
    def unread(self) -> int:
        """Jobs counted by their names alone."""
        return len(self.where) - len(self.read)

    @property
    def counts(self) -> Counter[State]:
        return Counter({state: len(keys) for state, keys in self._groups.items() if keys})

    @property
    def tracked(self) -> set[str]:
        """The keys of jobs in `track` states."""
        return {key for state in self.track for key in self._groups[state]}

    # -- order -----------------------------------------------------------------------------
    def _within(self, state: State) -> Callable[[str], tuple[int, str]] | None:
        """How a state's group is ordered: newest job file first, or by key (None)."""
        return (lambda key: (-self.stamps.get(key, 0), key)) if state in STAMPED else None

    def _group(self, state: State) -> list[str]:
        group = self._groups[state]
        if state not in self._sorted:
            group.sort(key=self._within(state))
            self._sorted.add(state)
        return group

    def _position(self, key: str) -> int | None:
        state = self.where[key]
        group, within = self._group(state), self._within(state)
        at = bisect.bisect_left(group, within(key), key=within) if within else bisect.bisect_left(group, key)
        return at if at < len(group) and group[at] == key else None

    def _order_key(self, key: str) -> tuple[int, int, str]:
        state = self.where[key]
        within = self._within(state)
        return _RANK[state], *(within(key) if within else (0, key))

    def _selected(self) -> list[State]:
        return [s for s in STATE_ORDER if not self.states or s in self.states]

    def _filtered(self) -> list[str]:
        """With a text: the jobs it matches, and whole the states whose name it matches;
        under `only`, those of its keys the states and the text pass, in its order."""
        if self._shown is None and self.only is not None:
            selected = set(self._selected())
            self._shown = [k for k in self.only if self.where.get(k) in selected and self._passes(k)]
            self._at = {k: i for i, k in enumerate(self._shown)}
        if self._shown is None:
            by_state: dict[State, list[str]] = {state: [] for state in STATE_ORDER}
            for key in self.matched:
                by_state[self.where[key]].append(key)
            self._shown = []
            for state in self._selected():
                whole = self.text in state.value.casefold()
                self._shown += self._group(state) if whole else sorted(by_state[state], key=self._order_key)
        return self._shown

    def _passes(self, key: str) -> bool:
        return not self.text or key in self.matched or self.text in self.where[key].value.casefold()

    @property
    def listed(self) -> bool:
        """Whether the jobs shown are a list of their own (a text or the ready filter)."""
        return bool(self.text) or self.only is not None

    def __len__(self) -> int:
        return len(self._filtered()) if self.listed else sum(len(self._groups[s]) for s in self._selected())

    def key_at(self, index: int) -> str:
        if self.listed:
            return self._filtered()[index]
        for state in self._selected():
            if index < len(self._groups[state]):
                return self._group(state)[index]
            index -= len(self._groups[state])
        raise IndexError(index)

    def index_of(self, key: str) -> int | None:
        state = self.where.get(key)
        if state is None or state not in self._selected():
            return None
        if self.only is not None:
            self._filtered()
            return self._at.get(key)
        if self.text:
            shown = self._filtered()
            at = bisect.bisect_left(shown, self._order_key(key), key=self._order_key)
            return at if at < len(shown) and shown[at] == key else None
        here = self._position(key)
        before = sum(len(self._groups[s]) for s in self._selected() if _RANK[s] < _RANK[state])
        return None if here is None else before + here

    # -- changes ---------------------------------------------------------------------------
    def set_listing(self, listing: BoardListing) -> None:
        """Start again from a listing; a row read is kept while the listing names its files."""
        where = listing.where
        self.stamps = {k: s for k, s in self.stamps.items() if where.get(k) in STAMPED}
        rows = self.rows.items()
        kept = {
            k: r
            for k, r in rows
            if where.get(k) is provisional_state(k, r.folders, receipt=bool(r.receipt_status))
        }
        self.where, self._groups, self._sorted = where, listing.groups, set()
        self.rows, self.read, self._others, self._shown = {}, set(), {}, None
        self.matched = {k for k in self.matched if k in where}
        self.update(kept)

    def set_stamps(self, queued: Mapping[str, int]) -> None:
        """The queue's mtimes (`core.store.queue.queue_stamps`): its jobs go newest first."""
        self.stamps = {k: s for k, s in queued.items() if k in self.where} | self.stamps
        self._sorted.discard(State.QUEUED)
        self._shown = None

    def update(self, changed: Mapping[str, JobRow | None]) -> None:
        """Apply rows read, and keys gone (None)."""
        for key, row in changed.items():
            if key in self.where and (at := self._position(key)) is not None:
                del self._groups[self.where.pop(key)][at]
            for kept in (self.rows, self._others, self.stamps):
                kept.pop(key, None)
            if row is None:
                self.where.pop(key, None)
                self.read.discard(key)
                self.matched.discard(key)
                continue
            self.read.add(key)
            self.rows[key] = row
            if row.state in STAMPED:
                self.stamps[key] = row.modified
            if row.state not in OPERATORS:
                self._others[key] = None
            if self.text:
                (self.matched.add if row_matches(row, self.text) else self.matched.discard)(key)
            self.where[key] = row.state
            bisect.insort(self._group(row.state), key, key=self._within(row.state))
        while len(self._others) > KEPT_ROWS:  # the oldest read first; their keys stay in place
            oldest = next(iter(self._others))
            del self._others[oldest], self.rows[oldest]
        self._shown = None

    def set_filter(
        self,
        states: Iterable[State] | None = None,
        text: str | None = None,
        only: tuple[str, ...] | bool | None = False,
    ) -> None:
        """Change the filter; a new text starts from the jobs it matches by name or row read.
        `only`: the keys of the ready filter, in order (None: off; False: as it was)."""
        if states is not None:
            self.states = frozenset(states)
        if only is not False:
            self.only = only if isinstance(only, tuple) else None
        if text is not None and text.strip().casefold() != self.text:
            needle = self.text = text.strip().casefold()
            self.matched = {k for k in self.where if k.startswith(needle)} if needle else set()
            self.matched.update(k for k, row in self.rows.items() if needle and row_matches(row, needle))
        self._shown = None

    def to_search(self) -> list[str]:
        """The keys a text filter has yet to read to know whether they match."""
        states = [s for s in self._selected() if self.text and self.text not in s.value.casefold()]
        return [k for s in states for k in self._groups[s] if k not in self.matched and k not in self.rows]

    def found(self, needle: str, rows: Iterable[JobRow]) -> None:
        """Rows a search for `needle` read and found matching (kept while it is the filter)."""
        if needle == self.text:
            self.update({row.key: row for row in rows if row.key in self.where})
