"""Shortcuts through CPython internals, each kept because a benchmark shows it matters.

Everything here does what a plain, public spelling does, only faster. Each says which
benchmark of `tests/bench/run.py` it serves and what it saved when last measured, at
100,000 jobs on a 2-core machine (CPU time, best of three). Others were measured and
dropped as saving nothing measurable: calling the JSON decoder's C scanner directly, and
making rows with `tuple.__new__` instead of the NamedTuple's `_make`.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Callable, Iterable, Iterator


def canonical_chunks() -> Callable[[object, int], Iterable[str]]:
    """A function giving the pieces of canonical JSON text, as `json.dumps(obj,
    sort_keys=True, separators=(",", ":"))` makes it.

    `scan`: every job document's digest is checked by hashing its canonical form; a cold
    scan takes 4.8 s of CPU with this, 5.2 s with `json.dumps`. `json.dumps` builds a new
    encoder on every call; this one, built once from the C encoder factory, skips that and
    the cycle check (a parsed document has no cycles).
    """
    make = json.encoder.c_make_encoder  # type: ignore[attr-defined]
    if make is None:
        encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"), check_circular=False)
        return lambda obj, _: (encoder.encode(obj),)
    return make(None, None, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, True)  # type: ignore[no-any-return]


@contextlib.contextmanager
def collector_paused(keep: bool = False) -> Iterator[None]:
    """Keep the cyclic garbage collector out while a large acyclic structure is built:
    it would walk the growing heap again and again. The collector is left as it was found.

    `scan_warm`: the index loads in 0.31 s with this, 0.40 s without.

    What was built is then moved to the oldest generation (`gc.freeze` and `gc.unfreeze`
    splice lists, visiting nothing): left young, the next young collections would walk
    all of it, twice. `scan_warm`: the scan after the load took 0.50 s with this,
    0.55 s without.

    With `keep`, for a structure that lives as long as the process, it is left frozen
    (as the CLI and the board freeze what they load for good): no collection walks it
    again, the last one at exit included. What was garbage before is collected first, so
    that none of it is frozen, unless the process froze objects itself: it keeps its own
    heap, and a collection would walk all it has built since (a board's widgets, as it
    starts). `scan_warm`: the process exits 0.05 s sooner.
    """
    was = gc.isenabled()
    frozen = gc.get_freeze_count() > 0  # asked once: it counts every frozen object
    if keep and not frozen:
        gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if keep:
            gc.freeze()
        elif not frozen:  # else someone froze objects on purpose: leave them
            gc.freeze()
            gc.unfreeze()
        if was:
            gc.enable()
