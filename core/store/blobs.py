"""Each job's input bytes, kept content-addressed from its mint: `.gen/blobs/<sha256>`.

A three-way merge needs the bytes a job was minted on long after the tree moved on
(`core.review.merge`); the job names them by their hash, so a blob is its own proof: it
counts only when its bytes hash to its name, and is read through no link. Blobs are the
operator's (0600 in a 0700 folder: they are copies of the repository's files), written
durably under a temp name and linked into place whole, never replaced.

A blob is collected (`collect`, run by `genjob recover`) once no job that could still be
merged uses it: none in `queue/` or `running/` (QUEUED, RUNNING, ORPHANED, RECEIVED,
STALE) names it as an input. A mint holds the blobs folder's lock shared from keeping its
inputs until its job is in `queue/` (`keeping`); collection holds it exclusively while it
lists the jobs and removes blobs, so a blob kept for a job being minted is never taken
for unused. Each blob goes by one unlink: a collection killed midway leaves the rest,
referenced or not, for the next one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from core.errors import BadInput
from core.model.canonical import read_bytes, sha256_bytes
from core.model.models import KEY_RE, Job, job_from_bytes
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


@contextlib.contextmanager
def keeping(layout: Layout, job: Job, limit: int = KEEP_LIMIT) -> Iterator[list[str]]:
    """Keep the bytes of each text input of `job` up to `limit` that the tree still holds
    at its input hash, and hold the blobs folder's lock shared until the block ends (the
    job is written into `queue/` in it); yields the hashes kept. An input that moved since
    it was hashed is not kept (a merge over it says so)."""
    if all(job.input_digest(rel) is None for rel in job.allowed_paths):
        yield []
        return
    blobs = _open_blobs(layout, create=True)
    assert blobs is not None
    with closing(blobs):
        fcntl.flock(blobs, fcntl.LOCK_SH)
        yield _keep_into(layout, blobs, job, limit)


def _keep_into(layout: Layout, blobs: int, job: Job, limit: int) -> list[str]:
    kept = []
    root = open_dir(layout.root)
    with closing(root):
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


@dataclass(frozen=True)
class Collected:
    """What a collection removed: how many blobs, and their bytes."""

    blobs: int
    freed: int


def mergeable_inputs(layout: Layout) -> set[str]:
    """The input hashes of every job that could still be merged: each job document in
    `queue/`, then in `running/`. In that order a claim's rename between the two listings
    is seen in one of them; a job goes back into `queue/` only under the state lock, which
    the caller holds. A document that does not load names nothing (it cannot be merged)."""
    used: set[str] = set()
    for folder in ("queue", "running"):
        try:
            names = os.listdir(layout.gen / folder)
        except FileNotFoundError:
            continue
        for name in names:
            key = name[: -len(".json")]
            if not name.endswith(".json") or not KEY_RE.fullmatch(key):
                continue
            path = layout.job_file(folder, key)
            try:
                job = job_from_bytes(read_bytes(path), str(path))
            except (BadInput, OSError):
                continue
            used.update(h for rel in job.allowed_paths if (h := job.input_digest(rel)) is not None)
    return used


def collect(layout: Layout) -> Collected:
    """Remove every blob no job that could still be merged uses (see the module); the
    caller holds the state lock and the writer lock (no merge is reading a base)."""
    blobs = _open_blobs(layout, create=False)
    if blobs is None:
        return Collected(0, 0)
    removed = freed = 0
    with closing(blobs):
        fcntl.flock(blobs, fcntl.LOCK_EX)  # no mint is between keeping its inputs and its job
        used = mergeable_inputs(layout)
        for name in sorted(os.listdir(blobs)):
            if not _SHA256.fullmatch(name) or name in used:
                continue
            with contextlib.suppress(FileNotFoundError):
                size = os.stat(name, dir_fd=blobs, follow_symlinks=False).st_size
                os.unlink(name, dir_fd=blobs)
                removed, freed = removed + 1, freed + size
        if removed:
            os.fsync(blobs)
    return Collected(removed, freed)
