"""Shortcuts through CPython internals, each kept because a benchmark shows it matters.

Everything here does what a plain, public spelling does, only faster; each says which
benchmark of `tests/bench/run.py` it serves and what it saved when last measured at
100,000 jobs. Nothing outside the listing engine and the JSON reader uses them.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T", bound=tuple[Any, ...])


def canonical_chunks() -> Callable[[object, int], Iterable[str]]:
    """A function giving the pieces of canonical JSON text, as `json.dumps(obj,
    sort_keys=True, separators=(",", ":"))` makes it. `scan`: every job document's
    digest is checked by hashing its canonical form.

    `json.dumps` builds a new encoder on every call; this one, built once from the C
    encoder factory, skips that and the cycle check (a parsed document has no cycles).
    """
    make = json.encoder.c_make_encoder  # type: ignore[attr-defined]
    if make is None:
        encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"), check_circular=False)
        return lambda obj, _: (encoder.encode(obj),)
    return make(None, None, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, True)  # type: ignore[no-any-return]


def scanner_of(decoder: json.JSONDecoder) -> Callable[[str], tuple[Any, int]]:
    """`decoder.decode` less its two Python layers: the C scanner it ends in, and the
    whitespace rule around it. Returns a function giving (value, the index past it and
    any whitespace after it). `scan`: every file the listing reads is parsed with it.
    """
    scan = decoder.scan_once  # type: ignore[attr-defined]
    space = json.decoder.WHITESPACE.match  # type: ignore[attr-defined]

    def parse(text: str) -> tuple[Any, int]:
        try:
            value, end = scan(text, space(text, 0).end())
        except StopIteration as err:
            raise json.JSONDecodeError("Expecting value", text, err.value) from None
        return value, space(text, end).end()

    return parse


def row_maker(cls: type[T]) -> Callable[[Iterable[Any]], T]:
    """`cls._make` for a NamedTuple, without its Python-level length check: the values
    come from code that builds them field by field, or from the index, whose columns are
    checked before rows are made. `scan_warm`: every finished row is made by it.
    """
    return partial(tuple.__new__, cls)  # type: ignore[return-value]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Keep the cyclic garbage collector out while a large acyclic structure is built:
    it would walk the growing heap again and again. `scan_warm`: the index loads in two
    thirds of the time. The collector is left as it was found.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
