"""The listing's index, `.gen/cache/listing.jsonl`: what the last full listing read, so
the next reads only the files replaced since.

Line 1 is the head: this machine's seal (`core.store.seal`) of the rest of the line, a
space, and a JSON object: the format, the `.gen/` and device it is of, the sha256 of line
2, and the policy read from the config with the stamps of the files it came from (so a
plain `genjob ls` need not load the config's models). Line 2 is a JSON array: the values
that recur (folder sets, schemas, paths, statuses, workers); the columns of the keys and of
each field of their `KeyFacts` (the inodes of the files read among them), a recurring
value given by its place (columns decode several times faster than an array per
key); the leases read: each key's lease file's identity (inode, size, mtime, ctime) and
what it said.

It saves work and decides nothing: nothing that verifies or applies a job reads it. It is
read only when it is the operator's own (it and its folders up to `.gen/` owned by this
user, writable by no one else) and sealed here; one that is missing, cut, damaged,
foreign or of another format is no index; an entry whose files were replaced is not used.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, NamedTuple

from core.errors import GenjobError
from core.model.quick_checks import LeaseFacts
from core.read.rows import KeyFacts, Lease
from core.store.durable import atomic_write
from core.store.ownership import operator_owners, untrusted_because
from core.store.seal import seal, sealed_here

FORMAT = "genjob listing index 7"
NAME = "listing.jsonl"
# The fields of `KeyFacts` whose values recur from key to key (all but these): their columns
# give places in the shared values.
UNSHARED = ("inode", "receipt_inode", "modified", "digest", "instruction", "created_at", "invalid")
RECURRING = frozenset(KeyFacts._fields) - set(UNSHARED)


class Policy(NamedTuple):
    """What the config says that a listing shows."""

    signature_required: bool
    config_error: str | None
    unsandboxed_checks: tuple[str, ...]  # the checks configured with sandbox = "none"
    config_held: str | None  # what the config would run and may not yet
    protected_paths: tuple[str, ...]


class Index(NamedTuple):
    policy: Policy | None
    policy_stamps: list[int]  # of the files the policy was read from, as they were then
    known: dict[str, KeyFacts]
    leases: dict[str, Lease]  # of the keys whose lease file was read, while it stays that file


def _load(body: Any) -> dict[str, KeyFacts]:
    """The facts the columns give back, each shared value one object however many keys hold it."""
    values, (keys, *fields), _ = body
    shared = [tuple(tuple(v) if type(v) is list else v for v in x) if type(x) is list else x for x in values]
    fields = [
        list(map(shared.__getitem__, column)) if name in RECURRING else column
        for name, column in zip(KeyFacts._fields, fields, strict=True)
    ]
    return dict(zip(keys, map(KeyFacts._make, zip(*fields, strict=True)), strict=True))


def _dump(index: Index) -> bytes:
    at: dict[str, int] = {}

    def ref(value: object) -> int:
        return at.setdefault(json.dumps(value, separators=(",", ":")), len(at))

    recurring = [name in RECURRING for name in KeyFacts._fields]
    rows = [
        (key, *(ref(v) if shared else v for v, shared in zip(f, recurring, strict=True)))
        for key, f in index.known.items()
    ]
    columns = [list(column) for column in zip(*rows, strict=True)] if rows else [[]] * (1 + len(recurring))
    leases = {key: [*identity, *facts] for key, (identity, facts) in index.leases.items()}
    tail = json.dumps([columns, leases], separators=(",", ":"))[1:]
    return f"[[{','.join(at)}],{tail}".encode()


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)


def read_index(path: Path, gen: str, *, facts: bool = True) -> Index | None:
    """The index at `path` if it is whole, this `.gen/`'s and sealed here, else None; with
    `facts` False only its head (the policy)."""
    if untrusted_because(path, Path(gen), operator_owners()) is not None:
        return None
    try:
        with open(path, "rb", opener=_no_follow) as fh:
            tag, _, head_bytes = fh.readline().rstrip(b"\n").partition(b" ")
            if not sealed_here(FORMAT, head_bytes, tag.decode()):  # a FIFO reads as empty: not sealed
                return None
            head = json.loads(head_bytes)
            if (head["format"], head["gen"], head["device"]) != (FORMAT, gen, os.stat(gen).st_dev):
                return None
            body = fh.read() if facts else b""
        if facts and hashlib.sha256(body).hexdigest() != head["body"]:
            return None
        policy = None
        if head["policy"] is not None:
            required, fault, unsandboxed, held, protected = head["policy"]
            policy = Policy(required, fault, tuple(unsandboxed), held, tuple(protected))
        if not facts:
            return Index(policy, head["stamps"], {}, {})
        decoded = json.loads(body)
        leases = {key: (tuple(v[:4]), LeaseFacts(*v[4:])) for key, v in decoded[2].items()}
        return Index(policy, head["stamps"], _load(decoded), leases)
    except (OSError, ValueError, TypeError, KeyError, IndexError, GenjobError):
        return None


def write_index(path: Path, gen: str, index: Index) -> None:
    """Replace the index at `path` (its folder made already)."""
    body = _dump(index)
    head = {
        "format": FORMAT,
        "gen": gen,
        "device": os.stat(gen).st_dev,
        "body": hashlib.sha256(body).hexdigest(),
    }
    head_bytes = json.dumps({**head, "policy": index.policy, "stamps": index.policy_stamps}).encode()
    atomic_write(path, [seal(FORMAT, head_bytes).encode(), b" ", head_bytes, b"\n", body], durable=False)
