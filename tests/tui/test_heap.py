"""tui.services.heap: memory freed after a big piece of work goes back to the system."""

from __future__ import annotations

import platform

import pytest

from tui.services.heap import release_free_memory

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")


def resident_kib() -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))


def test_freed_heap_pages_are_handed_back() -> None:
    # Blocks below glibc's mmap threshold come from the heap; the last one, kept, pins
    # the top of the heap so that freeing the others gives nothing back by itself.
    blocks = [bytearray(b"x" * 60_000) for _ in range(800)]
    kept = blocks[-1]
    before = resident_kib()
    del blocks
    held = resident_kib()
    assert held > before - 10_000, "glibc returned the pages without being asked"
    assert release_free_memory()
    assert resident_kib() < held - 30_000
    assert kept[:1] == b"x"
