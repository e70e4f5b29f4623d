"""Each job's input bytes, kept content-addressed from its mint: `.gen/blobs/<sha256>`.

A three-way merge needs the bytes a job was minted on long after the tree moved on
(`core.review.merge`); the job names them by their hash, so a blob is its own proof: it
counts only when its bytes hash to its name, and is read through no link. Blobs are the
operator's (0600 in a 0700 folder: they are copies of the repository's files), written
durably under a temp name and linked into place whole, never replaced.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from core.errors import BadInput
from core.model.canonical import sha256_bytes
from core.model.models import Job
from core.remote.rules import DEFAULT_LIMITS
from core.store.durable import create_exclusive_at
from core.store.layout import Layout
from core.store.tree import closing, open_dir, open_folder, open_regular, read_fd

_SHA256 = re.compile(r"[0-9a-f]{64}")
# What is kept: a text input (no NUL in its first 8,000 bytes, git's own test for binary)
# up to this size. A larger or binary file is not merged line by line anyway, and keeping
# it would make every mint over it copy it.
KEEP_LIMIT = 4 << 20
_BINARY_PROBE = 8000
BLOB_FILE_MODE = 0o600
BLOB_DIR_MODE = 0o700


def blobs_dir(layout: Layout) -> Path:
    return layout.gen / "blobs"


def _open_blobs(layout: Layout, create: bool) -> int | None:
    """`.gen/blobs/`, opened through no link (made owner-only when `create`); None if absent."""
    gen = open_dir(layout.gen)
    with closing(gen):
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir("blobs", BLOB_DIR_MODE, dir_fd=gen)
        try:
            return open_folder(gen, ["blobs"], str(blobs_dir(layout)))
        except FileNotFoundError:
            return None


def read_tree_file(root: int, rel: str, limit: int) -> bytes | None:
    """The tree's bytes at `rel`, through descriptors; None when absent, not a regular
    file, or larger than `limit`."""
    parts = rel.split("/")
    try:
        parent = open_folder(root, parts[:-1], rel)
    except (FileNotFoundError, BadInput):
        return None
    with closing(parent):
        try:
            opened = open_regular(parent, parts[-1], rel)
        except BadInput:
            return None
    if opened is None:
        return None
    fd, st = opened
    with closing(fd):
        if st.st_size > limit:
            return None
        try:
            return read_fd(fd, limit, rel)
        except BadInput:
            return None


def keep_inputs(layout: Layout, job: Job, limit: int = KEEP_LIMIT) -> list[str]:
    """Keep the bytes of each text input of `job` up to `limit` that the tree still holds
    at its input hash; the hashes kept. An input that moved since it was hashed is not
    kept (a merge over it says so)."""
    wanted = {h for rel in job.allowed_paths if (h := job.input_digest(rel)) is not None}
    if not wanted:
        return []
    blobs = _open_blobs(layout, create=True)
    assert blobs is not None
    kept = []
    root = open_dir(layout.root)
    with closing(root), closing(blobs):
        for rel in job.allowed_paths:
            digest = job.input_digest(rel)
            if digest is None:
                continue
            data = read_tree_file(root, rel, limit)
            if data is None or b"\0" in data[:_BINARY_PROBE] or sha256_bytes(data) != digest:
                continue
            where = blobs_dir(layout) / digest
            create_exclusive_at(blobs, digest, data, where, BLOB_FILE_MODE)
            kept.append(digest)
    return kept


def read_blob(layout: Layout, digest: str, limit: int = DEFAULT_LIMITS.max_file_bytes) -> bytes | None:
    """The kept bytes named `digest`, when they hash to it; None when none are kept.

    A blob whose bytes do not hash to its name is a BadInput naming it."""
    if not _SHA256.fullmatch(digest):
        raise BadInput(f"{digest!r}: not a sha256")
    blobs = _open_blobs(layout, create=False)
    if blobs is None:
        return None
    where = str(blobs_dir(layout) / digest)
    with closing(blobs):
        opened = open_regular(blobs, digest, where)
    if opened is None:
        return None
    fd, _ = opened
    with closing(fd):
        data = read_fd(fd, limit, where)
    if sha256_bytes(data) != digest:
        raise BadInput(f"{where}: its bytes do not hash to its name; it is not used")
    return data
