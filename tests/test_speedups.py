"""core.speedups: each shortcut does exactly what the plain spelling it replaces does."""

from __future__ import annotations

import gc
import json
from typing import NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.speedups import canonical_chunks, collector_paused, row_maker, scanner_of

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_canonical_chunks_are_the_canonical_text(value: object) -> None:
    chunks = canonical_chunks()
    assert "".join(chunks(value, 0)) == json.dumps(value, sort_keys=True, separators=(",", ":"))


@given(JSON, st.sampled_from(["", " ", "\n\t "]))
def test_the_scanner_parses_as_decode_does(value: object, space: str) -> None:
    decoder = json.JSONDecoder()
    text = space + json.dumps(value) + space
    parsed, end = scanner_of(decoder)(text)
    assert parsed == decoder.decode(text) and end == len(text)


@pytest.mark.parametrize("text", ["", "   ", "[1,", '{"a" 1}', "nul"])
def test_the_scanner_refuses_what_decode_refuses(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.JSONDecoder().decode(text)
    with pytest.raises(json.JSONDecodeError):
        scanner_of(json.JSONDecoder())(text)


def test_the_scanner_reports_where_a_value_ends() -> None:
    assert scanner_of(json.JSONDecoder())('[1] "more"') == ([1], 4)


class Point(NamedTuple):
    x: int
    y: str


def test_a_row_maker_makes_the_named_tuple() -> None:
    made = row_maker(Point)((1, "a"))
    assert made == Point(1, "a") and type(made) is Point and made.y == "a"


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_and_left_as_it_was_found(enabled: bool) -> None:
    (gc.enable if enabled else gc.disable)()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
        with pytest.raises(KeyError), collector_paused():
            raise KeyError("a failure inside")
        assert gc.isenabled() is enabled
    finally:
        gc.enable()
