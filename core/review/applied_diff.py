"""What an applied job changed, shown after the fact: each target of its apply record,
from the bytes it replaced to the bytes it wrote.

The record names each path with its before hash (the job's input; None for a new file)
and after hash (the output). The bytes come from wherever they are still kept, each
checked against its hash before it is shown: the before from the originals an apply
keeps in `.gen/journal/<key>/` while it runs, else the input blobs kept at mint
(`core.store.blobs`); the after from `.gen/out/<digest>/`, else the tree while it still
holds them. A tree that has moved on since is said so, and the change is still shown.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

from core.errors import BadInput
from core.model.canonical import sha256_bytes, sha256_file
from core.model.models import Job
from core.model.paths import regular_file_inside
from core.review.diff import MAX_DIFF_BYTES, DiffStatus, FileDiff, diff_bytes
from core.store.blobs import read_blob, read_tree_file
from core.store.layout import Layout
from core.store.tree import closing, open_dir

_SHA256 = re.compile(r"[0-9a-f]{64}")


def applied_diffs(layout: Layout, job: Job, record: dict[str, Any] | None) -> list[FileDiff]:
    """The change the apply `record` of `job` made, file by file (the targets it names
    that are the job's paths at the job's input hashes; nothing else of it is believed)."""
    targets = _targets(job, record)
    return [
        _target_diff(layout, job, i, rel, before, after) for i, (rel, before, after) in enumerate(targets)
    ]


def _targets(job: Job, record: dict[str, Any] | None) -> list[tuple[str, str | None, str]]:
    applied = (record or {}).get("apply")
    entries = applied.get("targets") if isinstance(applied, dict) else None
    found: list[tuple[str, str | None, str]] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        rel, before, after = entry.get("path"), entry.get("before"), entry.get("after")
        if not isinstance(rel, str) or rel not in job.allowed_paths or before != job.input_digest(rel):
            continue
        if isinstance(after, str) and _SHA256.fullmatch(after):
            found.append((rel, before, after))
    return found


def _target_diff(layout: Layout, job: Job, index: int, rel: str, before: str | None, after: str) -> FileDiff:
    old = b"" if before is None else _before_bytes(layout, job.key, index, before)
    new = _kept(layout.out_dir(job.digest), rel, after)
    now = _tree_hash(layout, rel)
    if new is None and now == after:
        new = _kept(layout.root, rel, after)
    if old is None or new is None:
        gone = [side for side, data in (("it replaced", old), ("it wrote", new)) if data is None]
        note = f"the bytes {' and '.join(gone)} are no longer kept; the apply record names their hashes"
        return FileDiff(rel, DiffStatus.MISSING, 0, 0, "", note=note)
    diff = diff_bytes(rel, None if before is None else old, new)
    if now != after:
        moved = "is gone" if now is None else "holds other bytes"
        return FileDiff(
            diff.path,
            diff.status,
            diff.added,
            diff.removed,
            diff.text,
            note=f"the tree has moved on since: {rel} {moved} now; this is what the job changed",
        )
    return diff


def _before_bytes(layout: Layout, key: str, index: int, digest: str) -> bytes | None:
    """The bytes a target held before its apply: its kept original, else the input blob."""
    kept = _kept(layout.journal / key, str(index), digest)
    if kept is not None:
        return kept
    with contextlib.suppress(BadInput, OSError):
        return read_blob(layout, digest, MAX_DIFF_BYTES)
    return None


def _kept(folder: Path, rel: str, digest: str) -> bytes | None:
    """`folder/rel`'s bytes (read through no link) when they hash to `digest`; else None."""
    try:
        fd = open_dir(folder)
    except (BadInput, OSError):
        return None
    with closing(fd):
        data = read_tree_file(fd, rel, MAX_DIFF_BYTES)
    return data if data is not None and sha256_bytes(data) == digest else None


def _tree_hash(layout: Layout, rel: str) -> str | None:
    """The hash of the tree's file at `rel` now; None when it is absent or not a regular file."""
    try:
        found = regular_file_inside(layout.root, rel) is not None
        return sha256_file(layout.root / rel) if found else None
    except (BadInput, OSError):
        return None
