"""Handing freed heap memory back to the operating system after a large one-off piece of work.

Process-wide tuning: the board calls it after a full scan; no library module does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    import ctypes  # on first use, after the board's first frame

    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to call
        return None


def release_free_memory() -> bool:
    """Give the heap's free pages back to the system; True if glibc released any.

    A full scan of 100,000 jobs builds and drops tables of several megabytes each (the
    dictionaries and lists it grows as it goes). glibc keeps freed memory inside the
    process unless it sits at the top of the heap, so a board left open all day would
    go on holding what its first scan needed for a moment.
    """
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
