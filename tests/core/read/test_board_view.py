"""core.read.board_view: the view keeps its order and filter under any updates; untrusted text
shows visibly."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from core.model.lifecycle import State
from core.model.terminal import visible
from core.read.board_view import BoardView, sort_key
from core.read.snapshot import JobRow

KEYS = [f"{i:032x}" for i in range(12)]


def row(key: str, state: State, created: float, text: str) -> JobRow:
    return JobRow(key, state, "genjob.v2", "d" * 64, text, ("a.py",), created, 0, "", None, ("queue",), ())


rows = st.builds(
    row,
    st.sampled_from(KEYS),
    st.sampled_from(list(State)),
    st.sampled_from([1.0, 2.0, 3.0]),
    st.sampled_from(["add hints", "fix parser", "docs"]),
)
updates = st.lists(
    st.dictionaries(st.sampled_from(KEYS), st.one_of(st.none(), rows), max_size=5), max_size=12
)


@settings(max_examples=200, deadline=None)
@given(updates, st.frozensets(st.sampled_from(list(State)), max_size=3), st.sampled_from(["", "fix", "DOCS"]))
def test_view_matches_a_fresh_sort(
    batches: list[dict[str, JobRow | None]], states: frozenset[State], text: str
) -> None:
    view = BoardView(track={State.RUNNING, State.RECEIVED})
    view.set_filter(states, text)
    truth: dict[str, JobRow] = {}
    for batch in batches:
        fixed = {
            k: (r if r is None else row(k, r.state, r.created_at, r.instruction)) for k, r in batch.items()
        }
        view.update(fixed)
        for k, r in fixed.items():
            if r is None:
                truth.pop(k, None)
            else:
                truth[k] = r
        expected = sorted((r for r in truth.values() if view.matches(r)), key=sort_key)
        assert view.keys() == [r.key for r in expected]
        for i, r in enumerate(expected):
            assert view.index_of(r.key) == i
        assert sum(view.counts.values()) == len(truth)
        assert view.tracked == {k for k, r in truth.items() if r.state in view.track}


@given(
    st.lists(
        st.tuples(st.sampled_from(list(State)), st.sampled_from([1.0, 2.0, 3.0, 1e9])),
        min_size=65,
        max_size=300,
    ),
    st.frozensets(st.sampled_from(list(State)), max_size=3),
)
def test_a_big_update_and_a_new_filter_sort_like_sort_key(
    made: list[tuple[State, float]], states: frozenset[State]
) -> None:
    rows = {f"{i:032x}": row(f"{i:032x}", state, created, "x") for i, (state, created) in enumerate(made)}
    view = BoardView()
    view.update(rows)
    assert view.keys() == [r.key for r in sorted(rows.values(), key=sort_key)]
    view.set_filter(states)
    want = sorted((r for r in rows.values() if not states or r.state in states), key=sort_key)
    assert view.keys() == [r.key for r in want]


def test_visible_never_passes_controls() -> None:
    raw = "a\x1b[2Jb\x00c\x7fd\x9be\u202ef\u200bg\r\n"
    shown = visible(raw)
    assert all(c.isprintable() for c in shown)
    assert "␛[2J" in shown and "␀" in shown and "<U+202E>" in shown and "\\x9b" in shown
