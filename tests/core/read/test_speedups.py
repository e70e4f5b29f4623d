"""core.read.speedups: each shortcut does exactly what the plain spelling it replaces does."""

from __future__ import annotations

import gc
import json
import weakref

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.read.speedups import canonical_chunks, collector_paused

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_canonical_chunks_are_the_canonical_text(value: object) -> None:
    chunks = canonical_chunks()
    assert "".join(chunks(value, 0)) == json.dumps(value, sort_keys=True, separators=(",", ":"))


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


def test_what_is_kept_is_left_frozen_and_garbage_is_not() -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self

    gc.unfreeze()
    try:
        garbage = weakref.ref(Node())  # a cycle no one holds
        with collector_paused(keep=True):
            assert not gc.isenabled()
            kept = [[i] for i in range(10)]
        assert gc.isenabled() and garbage() is None
        assert gc.get_freeze_count() >= len(kept)
        assert gc.is_tracked(kept[0]) and not any(o is kept[0] for o in gc.get_objects())  # not walked
    finally:
        gc.unfreeze()
