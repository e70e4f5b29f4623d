"""Canonical JSON, sha256 helpers and a strict JSON reader.

Canonical JSON is the seed's: ``json.dumps(obj, sort_keys=True, separators=(",", ":"))``
encoded as UTF-8 (with the default ``ensure_ascii=True``, so the bytes are ASCII).

Python's own parser keeps the last of duplicate keys, accepts NaN and Infinity, recurses
without bound and converts integers of any length; `loads_strict` refuses each of them.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from core.errors import BadInput, TooLarge
from core.remote import rules

MAX_JSON_BYTES = 4 * 1024 * 1024
_HASH_CHUNK = 1024 * 1024


def canonical(obj: object) -> bytes:
    """The canonical bytes of a JSON value, as the v1 contract defines them."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _open_regular(path: Path | str) -> tuple[int, os.stat_result]:
    """Open a regular file for reading (no link at the last component, never blocking).

    Without ``O_NONBLOCK`` opening a FIFO waits for a writer forever; a FIFO or device is
    refused with an OSError instead of being read. Returns the descriptor and its stat.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return fd, st


def sha256_file(path: Path) -> str:
    """Hash a regular file without following a symlink at its last component."""
    fd, _ = _open_regular(path)
    try:
        h = hashlib.sha256()
        while chunk := os.read(fd, _HASH_CHUNK):
            h.update(chunk)
        return h.hexdigest()
    finally:
        os.close(fd)


def loads_strict(data: bytes, source: str, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Parse JSON bytes by the one strict rule (`core.remote.rules.loads_strict`), or raise
    `BadInput` naming `source` and the fault."""
    if len(data) > max_bytes:
        raise TooLarge(f"{source}: {len(data)} bytes is over the {max_bytes}-byte limit")
    try:
        return rules.loads_strict(data)
    except ValueError as exc:
        raise BadInput(f"{source}: {exc}") from None


def read_json(path: Path, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """Read and strictly parse one JSON file (no symlink at the last component)."""
    return loads_strict(read_bytes(path, max_bytes), str(path), max_bytes)


def read_bytes(path: Path | str, max_bytes: int = MAX_JSON_BYTES, source: str | None = None) -> bytes:
    """Read a small regular file, refusing links, FIFOs, devices and anything over `max_bytes`.

    Faults are reported as `BadInput` naming `source` (default: `path`).
    """
    return read_with_stat(path, max_bytes, source)[0]


def read_with_stat(
    path: Path | str, max_bytes: int = MAX_JSON_BYTES, source: str | None = None
) -> tuple[bytes, os.stat_result]:
    """`read_bytes`, and the stat of the file that was read (its identity: inode, size, mtime)."""
    try:
        fd, st = _open_regular(path)
    except OSError as exc:
        raise BadInput(f"{source or path}: cannot read ({exc.strerror})") from None
    try:
        # Sized by fstat, so a small file costs a small buffer. Exactly the size fstat
        # gave is the whole file as it was then; more (it grew) or less (a short read)
        # and reading goes on to the end.
        data = os.read(fd, min(st.st_size, max_bytes) + 1)
        if len(data) != st.st_size:
            while len(data) <= max_bytes and (
                more := os.read(fd, min(max_bytes + 1 - len(data), _HASH_CHUNK))
            ):
                data += more
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise TooLarge(f"{source or path}: over the {max_bytes}-byte limit")
    return data, st
