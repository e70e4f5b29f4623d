"""The rules for output shown live: `LineCap` cuts every line at its cap as it arrives,
whatever the chunks, and keeps nothing of what it cuts."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from core.remote.rules import LineCap, cut_lines


def cut_whole(text: str, limit: int) -> str:
    """What a cut of the whole text at once must give: each line cut at `limit`, marked."""
    mark = f" … [line cut at {limit} characters]"
    return "\n".join(line if len(line) <= limit else line[:limit] + mark for line in text.split("\n"))


@given(
    text=st.text(alphabet="ab\n", max_size=60),
    limit=st.integers(1, 8),
    cuts=st.lists(st.integers(0, 60), max_size=6),
)
def test_a_line_is_cut_the_same_however_the_stream_is_split(text: str, limit: int, cuts: list[int]) -> None:
    edges = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    cap = LineCap(limit)
    shown = "".join(cap.feed(text[a:b]) for a, b in itertools.pairwise(edges))
    assert shown == cut_whole(text, limit)
    assert cap.column <= limit


def test_what_passes_the_cap_is_dropped_as_it_arrives() -> None:
    cap = LineCap(10)
    assert cap.feed("x" * 8) == "x" * 8
    assert cap.feed("x" * (1 << 20)) == "xx … [line cut at 10 characters]"
    assert cap.feed("x" * (1 << 20)) == ""
    assert (cap.column, cap.cutting) == (10, True)
    assert cap.feed("y\nnext") == "\nnext"


def test_cut_lines_cuts_a_whole_text() -> None:
    assert cut_lines("short\n" + "z" * 30 + "\nend", 6) == "short\nzzzzzz … [line cut at 6 characters]\nend"
