"""The listing's index, `.gen/cache/listing.jsonl`: what the last full listing read, so
the next reads only the files replaced since.

Line 1 is the head: this machine's seal (`core.store.seal`) of the rest of the line, a
space, and a JSON object: the format, the `.gen/` and device it is of, the sha256 of line
2, and the policy read from the config with the stamps of the files it came from (so a
plain `genjob ls` need not load the config's models). Line 2 is a JSON array: the values
that recur (folder sets, schemas, paths, states, workers); the rows that hold whatever
the moment (of jobs whose row meets no lease, clock or candidates), each with the inodes
of its job file and receipt; the `KeyFacts` of the other jobs, whose rows are made again
each time; both as columns, a recurring value given by its place (columns decode several
times faster than an array per key); the leases read: each lease file's identity (inode,
size, mtime, ctime) and what it said; and the tree files the rows met, each identity
with the file's sha256.

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
from core.model.lifecycle import State
from core.model.quick_checks import LeaseFacts
from core.read.rows import JobRow, KeyFacts, Lease, TreeFile
from core.store.durable import atomic_write
from core.store.ownership import operator_owners, untrusted_because
from core.store.seal import seal, sealed_here

FORMAT = "genjob listing index 8"
NAME = "listing.jsonl"
# The fields of `KeyFacts` and `JobRow` whose values recur from key to key (all but these): their columns
# give places in the shared values.
UNSHARED = ("inode", "receipt_inode", "modified", "digest", "instruction", "created_at", "invalid", "key")
RECURRING = frozenset(KeyFacts._fields + JobRow._fields) - set(UNSHARED)


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
    known: dict[str, KeyFacts]  # of the jobs whose rows are made again each time
    leases: dict[str, Lease]  # of the keys whose lease file was read, while it stays that file
    rows: dict[str, JobRow]  # the rows that hold while their files and tree files do
    inodes: dict[str, int]  # of each kept row's job file
    receipt_inodes: dict[str, int]  # of each kept row's receipt, if it has one
    tree: dict[str, TreeFile]  # the tree files the rows met, by path


NO_INDEX = Index(None, [], {}, {}, {}, {}, {}, {})


def _decoded(names: tuple[str, ...], columns: list[list[Any]], shared: list[Any]) -> list[list[Any]]:
    """The columns of the fields `names` with each recurring value's place replaced by it."""
    out = []
    for name, column in zip(names, columns, strict=True):
        if name == "state":
            states = {at: State(shared[at]) for at in set(column)}
            column = list(map(states.__getitem__, column))
        elif name in RECURRING:
            column = list(map(shared.__getitem__, column))
        out.append(column)
    return out


def _records(make: Any, keys: list[str], columns: list[list[Any]]) -> dict[str, Any]:
    return dict(zip(keys, map(make, zip(*columns, strict=True)), strict=True))


def _load(body: Any) -> Index:
    """The index the body gives back, each shared value one object however many keys hold it."""
    values, (keys, inodes, receipt_inodes, *fields), (known_keys, *facts), leases, tree = body
    shared = [tuple(tuple(v) if type(v) is list else v for v in x) if type(x) is list else x for x in values]
    return Index(
        None,
        [],
        _records(KeyFacts._make, known_keys, _decoded(KeyFacts._fields, facts, shared)),
        {key: (tuple(v[:4]), LeaseFacts(*v[4:])) for key, v in leases.items()},
        _records(JobRow._make, keys, [keys, *_decoded(JobRow._fields[1:], fields, shared)]),
        dict(zip(keys, inodes, strict=True)),
        {key: inode for key, inode in zip(keys, receipt_inodes, strict=True) if inode},
        {path: (tuple(v[:4]), v[4]) for path, v in tree.items()},
    )


def _dump(index: Index) -> bytes:
    at: dict[str, int] = {}
    seen: dict[object, int] = {}  # each recurring value's place (no bool or float recurs, to pass for an int)

    def columns(records: dict[str, Any], fields: tuple[str, ...], *before: dict[str, Any]) -> list[Any]:
        """The keys, the `before` values of each, then a column per field of the records."""
        keys, records_ = list(records), list(records.values())
        out: list[Any] = [keys, *([b[key] for key in keys] for b in before)]
        for i, name in enumerate(fields):
            column = [record[i] for record in records_]
            if name in RECURRING:
                for value in dict.fromkeys(column):  # distinct values, in order
                    if value not in seen:
                        seen[value] = at.setdefault(json.dumps(value, separators=(",", ":")), len(at))
                column = list(map(seen.__getitem__, column))
            out.append(column)
        return out

    rows = {key: row[1:] for key, row in index.rows.items()}
    receipt_inodes = {key: index.receipt_inodes.get(key, 0) for key in rows}
    kept = columns(rows, JobRow._fields[1:], index.inodes, receipt_inodes)
    known = columns(index.known, KeyFacts._fields)
    leases = {key: [*identity, *facts] for key, (identity, facts) in index.leases.items()}
    tree = {path: [*identity, digest] for path, (identity, digest) in index.tree.items()}
    tail = json.dumps([kept, known, leases, tree], separators=(",", ":"))[1:]
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
            return NO_INDEX._replace(policy=policy, policy_stamps=head["stamps"])
        return _load(json.loads(body))._replace(policy=policy, policy_stamps=head["stamps"])
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
