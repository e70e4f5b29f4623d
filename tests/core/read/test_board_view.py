"""core.read.board_view: the view keeps its order and filter under any updates, from names
alone and from rows read; untrusted text shows visibly."""

from __future__ import annotations

import os

from corekit import write_jobs
from hypothesis import given, settings
from hypothesis import strategies as st

from core.model.lifecycle import STATE_ORDER, State
from core.model.terminal import visible
from core.read.board_view import STAMPED, BoardListing, BoardView, board_listing, row_matches
from core.read.snapshot import JobRow
from core.store.layout import Layout
from core.store.queue import claim, queue_stamps, reject

KEYS = [f"{i:032x}" for i in range(12)]
RANK = {state: i for i, state in enumerate(STATE_ORDER)}
NAMED = {
    "queue": State.QUEUED,
    "running": State.RUNNING,
    "applied": State.APPLIED,
    "rejected": State.REJECTED,
}


def row(key: str, state: State, modified: int, text: str) -> JobRow:
    return JobRow(
        key=key, state=state, instruction=text, allowed_paths=("a.py",), folders=("queue",), modified=modified
    )


def listing(named: dict[str, str]) -> BoardListing:
    where = {key: NAMED[folder] for key, folder in named.items()}
    groups: dict[State, list[str]] = {state: [] for state in STATE_ORDER}
    for key, state in where.items():
        groups[state].append(key)
    return BoardListing(where, groups, [k for k, s in where.items() if s is State.RUNNING])


rows = st.builds(
    row,
    st.sampled_from(KEYS),
    st.sampled_from(list(State)),
    st.sampled_from([1, 2, 3]),
    st.sampled_from(["add hints", "fix parser", "docs"]),
)
updates = st.lists(
    st.dictionaries(st.sampled_from(KEYS), st.one_of(st.none(), rows), max_size=5), max_size=12
)
names = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(sorted(NAMED)), max_size=8)


def expected(
    where: dict[str, State], read: dict[str, JobRow], stamps: dict[str, int], view: BoardView
) -> list[str]:
    """Every key the filter passes, most urgent state first, then newest first where stamped."""

    def passes(key: str) -> bool:
        state = where[key]
        if view.states and state not in view.states:
            return False
        needle = view.text
        if not needle or needle in state.value.casefold() or key.startswith(needle):
            return True
        return key in read and row_matches(read[key], needle)

    def order(key: str) -> tuple[int, int, str]:
        state = where[key]
        return RANK[state], -stamps.get(key, 0) if state in STAMPED else 0, key

    return sorted(filter(passes, where), key=order)


@settings(max_examples=200, deadline=None)
@given(
    names,
    st.dictionaries(st.sampled_from(KEYS), st.integers(0, 5)),
    updates,
    st.frozensets(st.sampled_from(list(State)), max_size=3),
    st.sampled_from(["", "fix", "DOCS", "queued", "0000"]),
)
def test_view_matches_a_fresh_sort(
    named: dict[str, str],
    queue_stamps: dict[str, int],
    batches: list[dict[str, JobRow | None]],
    states: frozenset[State],
    text: str,
) -> None:
    view = BoardView(track={State.RUNNING, State.RECEIVED})
    first = listing(named)
    view.set_listing(first)
    view.set_filter(states, text)
    stamps = {k: s for k, s in queue_stamps.items() if first.where.get(k) is State.QUEUED}
    view.set_stamps(stamps)
    where, read = dict(first.where), {}
    for batch in batches:
        fixed = {k: (r if r is None else r._replace(key=k)) for k, r in batch.items()}
        view.update(fixed)
        for k, r in fixed.items():
            stamps.pop(k, None)
            if r is None:
                where.pop(k, None)
                read.pop(k, None)
            else:
                where[k], read[k] = r.state, r
                if r.state in STAMPED:
                    stamps[k] = r.modified
        want = expected(where, read, stamps, view)
        assert [view.key_at(i) for i in range(len(view))] == want
        for i, key in enumerate(want):
            assert view.index_of(key) == i
            assert view.rows.get(view.key_at(i)) == read.get(key)
        assert sum(view.counts.values()) == len(where)
        assert view.counts == {s: n for s in State if (n := sum(1 for v in where.values() if v is s))}
        assert view.unread == len(where.keys() - read.keys())
        assert view.tracked == {k for k, s in where.items() if s in view.track}


def test_a_text_filter_searches_only_what_names_and_rows_do_not_decide() -> None:
    view = BoardView()
    view.set_listing(listing({KEYS[0]: "queue", KEYS[1]: "queue", KEYS[2]: "applied"}))
    view.update({KEYS[1]: row(KEYS[1], State.QUEUED, 1, "fix parser")})
    view.set_filter(text="FIX")
    assert [view.key_at(i) for i in range(len(view))] == [KEYS[1]]
    assert sorted(view.to_search()) == [KEYS[0], KEYS[2]]
    view.found("fix", [row(KEYS[2], State.APPLIED, 1, "fix this too")])
    assert [view.key_at(i) for i in range(len(view))] == [KEYS[1], KEYS[2]]
    view.found("other", [row(KEYS[0], State.QUEUED, 1, "fix")])
    assert len(view) == 2, "what a search for another text found is not shown"
    view.set_filter(text="applied")
    assert view.to_search() == [KEYS[0]], "a state the text names is shown whole, unread"
    assert [view.key_at(i) for i in range(len(view))] == [KEYS[2]]


def test_a_new_listing_keeps_the_rows_its_names_agree_with() -> None:
    view = BoardView()
    view.set_listing(listing({KEYS[0]: "queue", KEYS[1]: "queue"}))
    view.update({k: row(k, State.QUEUED, 1, "x") for k in KEYS[:2]})
    view.set_listing(listing({KEYS[0]: "queue", KEYS[1]: "running"}))
    assert KEYS[0] in view.rows and KEYS[1] not in view.rows, "claimed since: read again"
    assert view.where[KEYS[1]] is State.RUNNING and view.unread == 1


def test_the_queue_is_by_key_until_its_stamps_come_then_newest_first_across_listings() -> None:
    view = BoardView()
    view.set_listing(listing(dict.fromkeys(KEYS[:3], "queue")))
    assert [view.key_at(i) for i in range(3)] == KEYS[:3]
    view.set_stamps({KEYS[0]: 1, KEYS[1]: 3, KEYS[2]: 2, KEYS[5]: 9})
    assert [view.key_at(i) for i in range(3)] == [KEYS[1], KEYS[2], KEYS[0]]
    assert view.index_of(KEYS[0]) == 2 and KEYS[5] not in view.stamps, "a key not listed: no stamp"
    view.set_listing(listing(dict.fromkeys(KEYS[:4], "queue")))
    assert [view.key_at(i) for i in range(4)] == [KEYS[1], KEYS[2], KEYS[0], KEYS[3]], "kept till restamped"


def test_board_listing_gives_each_key_its_provisional_state(repo: Layout) -> None:
    queued, running, rejected, twice = write_jobs(repo, 4)
    claim(repo, "w1", running)
    reject(repo, rejected, "no")
    os.link(repo.queue / f"{twice}.json", repo.applied / f"{twice}.json")
    got = board_listing(str(repo.gen))
    assert got.where == {
        queued: State.QUEUED,
        running: State.RUNNING,
        rejected: State.REJECTED,
        twice: State.INCONSISTENT,
    }
    assert got.groups[State.QUEUED] == [queued] and got.groups[State.INCONSISTENT] == [twice]
    assert queue_stamps(repo) == {k: os.stat(repo.queue / f"{k}.json").st_mtime_ns for k in (queued, twice)}
    assert got.operators == [running]
    (repo.receipts / f"{running}.json").write_bytes(b"{}")  # names alone: never parsed here
    (repo.receipts / ("f" * 32 + ".json")).write_bytes(b"{}")
    got = board_listing(str(repo.gen))
    assert (got.where[running], got.where["f" * 32]) == (State.RECEIVED, State.INCONSISTENT)
    assert got.groups[State.RECEIVED] == [running] and running not in got.groups[State.RUNNING]
    assert set(got.operators) == {running, "f" * 32}


def test_board_listing_without_the_finished_folders_leaves_their_keys_for_later(repo: Layout) -> None:
    queued, running, rejected, twice = write_jobs(repo, 4)
    claim(repo, "w1", running)
    reject(repo, rejected, "no")
    os.link(repo.queue / f"{twice}.json", repo.applied / f"{twice}.json")
    early = board_listing(str(repo.gen), finished=False)
    assert early.where == {queued: State.QUEUED, running: State.RUNNING, twice: State.QUEUED}
    assert not early.groups[State.REJECTED] and not early.groups[State.APPLIED]
    assert early.operators == [running]
    assert board_listing(str(repo.gen)).where[twice] is State.INCONSISTENT


def test_visible_never_passes_controls() -> None:
    raw = "a\x1b[2Jb\x00c\x7fd\x9be\u202ef\u200bg\r\n"
    shown = visible(raw)
    assert all(c.isprintable() for c in shown)
    assert "␛[2J" in shown and "␀" in shown and "<U+202E>" in shown and "\\x9b" in shown
