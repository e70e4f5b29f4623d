"""What applying a receipt would change in one file: added and removed lines, and whether
the bytes are still the ones the worker signed.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from core.errors import BadInput, TooLarge
from core.model.canonical import read_bytes, sha256_bytes

MAX_DIFF_BYTES = 2 * 1024 * 1024


class DiffStatus(StrEnum):
    """What applying an output would do to its path, as far as a diff can say."""

    MODIFIED = "modified"
    NEW = "new"
    UNCHANGED = "unchanged"
    BINARY = "binary"  # it changes, and one side is not text
    TOO_LARGE = "too large"  # a side is over MAX_DIFF_BYTES, or the tree's does not read
    MISSING = "missing"  # the output is not there to read


@dataclass(frozen=True)
class FileDiff:
    path: str
    status: DiffStatus
    added: int
    removed: int
    text: str  # a unified diff, empty when there is none to show
    # Whether the output's bytes hash to what the receipt says (False: they changed after
    # the worker signed, so this diff is not what it signed); None when not compared.
    signed: bool | None = None
    # What a reader must know beside it: for an applied job's change, that the tree has
    # moved on since, or which side's bytes are no longer kept (`core.review.applied_diff`).
    note: str | None = None


def _text(data: bytes) -> list[str] | None:
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def file_diff(root: Path, out_dir: Path, rel: str, expected: str | None = None) -> FileDiff:
    """The diff that applying `out_dir/rel` would make to `root/rel`; with `expected` (the
    receipt's hash of the output) it also says whether the bytes are the ones signed."""
    new_path, old_path = out_dir / rel, root / rel
    try:
        new = read_bytes(new_path, MAX_DIFF_BYTES)
    except TooLarge:
        return FileDiff(rel, DiffStatus.TOO_LARGE, 0, 0, "")
    except BadInput:
        return FileDiff(rel, DiffStatus.MISSING, 0, 0, "")
    signed = None if expected is None else sha256_bytes(new) == expected
    return _diff(rel, old_path, new, signed)


def _diff(rel: str, old_path: Path, new: bytes, signed: bool | None) -> FileDiff:
    try:
        old = read_bytes(old_path, MAX_DIFF_BYTES) if old_path.exists() else None
    except BadInput:
        return FileDiff(rel, DiffStatus.TOO_LARGE, 0, 0, "", signed)
    return diff_bytes(rel, old, new, signed)


def diff_bytes(rel: str, old: bytes | None, new: bytes, signed: bool | None = None) -> FileDiff:
    """The diff from `old` (None: the file did not exist) to `new` at `rel`."""
    created, old = old is None, old or b""
    if old == new:
        return FileDiff(rel, DiffStatus.UNCHANGED, 0, 0, "", signed)
    a, b = _text(old), _text(new)
    if a is None or b is None:
        return FileDiff(rel, DiffStatus.BINARY, 0, 0, "", signed)
    lines = list(difflib.unified_diff(a, b, f"a/{rel}", f"b/{rel}"))
    added = sum(1 for ln in lines if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in lines if ln.startswith("-") and not ln.startswith("---"))
    text = "".join(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines)
    status = DiffStatus.NEW if created else DiffStatus.MODIFIED
    return FileDiff(rel, status, added, removed, text, signed)
