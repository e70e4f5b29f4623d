"""Seals: what tells a file genjob wrote on this machine from one that arrived with a repository.

Some files under `.gen/` are claims that policy acts on (a check record says "passed").
A repository can carry such files, and git writes them as the operator, so neither their
owner nor their mode says who made them. genjob seals each one it writes with an
HMAC-SHA256 under a random key kept in the operator's config folder, readable by them
alone; a file whose seal does not verify was not written here and is not believed. The
key never leaves this machine: a shared queue's other machines cannot vouch for it, and
their records are simply made again here.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from core.errors import BadInput
from core.store.durable import create_exclusive
from core.store.layout import config_folder, user_config_dir
from core.store.ownership import operator_owners, require_trusted

KEY_BYTES = 32


def _key_path() -> str:
    return str(user_config_dir() / "seal.key")


@functools.cache
def _key(path: str) -> bytes:
    """The sealing key at `path`, made on first use (readable by the operator alone)."""
    folder = str(config_folder())
    # Whole or not at all: a reader racing the first use never sees a key half written.
    create_exclusive(Path(path), secrets.token_bytes(KEY_BYTES), mode=0o600)
    require_trusted(Path(path), Path(folder), operator_owners(), "a sealing key")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        data = os.read(fd, KEY_BYTES + 1)
        mode = os.fstat(fd).st_mode
    finally:
        os.close(fd)
    if len(data) != KEY_BYTES or mode & 0o077:
        raise BadInput(f"{path}: not a genjob sealing key (32 bytes, mode 0600); remove it to make a new one")
    return data


def seal(purpose: str, data: bytes) -> str:
    """The seal of `data` for `purpose` (which keeps one kind of file's seal from passing
    for another's)."""
    return hmac.new(_key(_key_path()), purpose.encode() + b"\0" + data, hashlib.sha256).hexdigest()


def sealed_here(purpose: str, data: bytes, tag: object) -> bool:
    """Whether `tag` is this machine's seal of `data` for `purpose`."""
    return isinstance(tag, str) and hmac.compare_digest(seal(purpose, data), tag)
