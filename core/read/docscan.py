"""Quick checks of job, receipt and lease documents, for reading many of them at once.

`quick_job`, `quick_receipt` and `quick_lease` take a document already parsed by the
strict JSON reader and accept it exactly when the strict models (`core.model.models`,
`core.store.lease`) would; they return what a listing needs, or None, and then the caller asks
the strict model, whose error is the one to show. Both sides take the contract's
constants from `core.model.contract`. They use the standard library alone, so listing a large
`.gen/` neither imports pydantic nor pays for it per file.
"""

from __future__ import annotations

import hashlib
from typing import Any

from core.model.contract import (
    HEX64_RE,
    KEY_RE,
    LEASE_FIELDS,
    MAX_INSTRUCTION_CHARS,
    MAX_NAME_CHARS,
    MAX_PATHS,
    RECEIPT_FIELDS,
    RECEIPT_STATUSES,
    V1,
    V1_FIELDS,
    V2,
    V2_FIELDS,
    V2_REQUIRED,
)
from core.model.paths import check_relpath
from core.read.snapshot_records import JobSummary, LeaseFacts, ReceiptFacts
from core.read.speedups import canonical_chunks

_KEY_MATCH = KEY_RE.fullmatch
_HEX64_MATCH = HEX64_RE.fullmatch
_CANONICAL_CHUNKS = canonical_chunks()


def _canonical_sha(obj: object) -> str:
    return hashlib.sha256("".join(_CANONICAL_CHUNKS(obj, 0)).encode()).hexdigest()


def _key(v: object) -> bool:
    return type(v) is str and KEY_RE.fullmatch(v) is not None


def _hex64(v: object) -> bool:
    return type(v) is str and HEX64_RE.fullmatch(v) is not None


def _int(v: object) -> bool:
    return type(v) is int


def _number(v: object) -> bool:
    return type(v) is int or type(v) is float


def _text(v: object, low: int, high: int) -> bool:
    return type(v) is str and low <= len(v) <= high


# Paths that passed `check_relpath` (a pure check): the same paths recur in many jobs.
_GOOD_PATHS: set[str] = set()
_GOOD_PATHS_MAX = 65536


def _paths_ok(paths: object) -> bool:
    if type(paths) is not list or not 1 <= len(paths) <= MAX_PATHS or len(set(map(str, paths))) != len(paths):
        return False
    for p in paths:
        if type(p) is not str:
            return False
        if p in _GOOD_PATHS:
            continue
        try:
            check_relpath(p)
        except ValueError:
            return False
        if len(_GOOD_PATHS) >= _GOOD_PATHS_MAX:
            _GOOD_PATHS.clear()
        _GOOD_PATHS.add(p)
    return True


def quick_job(obj: Any) -> JobSummary | None:
    """The listing summary of a valid job document, or None when the strict model must decide."""
    if type(obj) is not dict:
        return None
    schema = obj.get("schema")
    fields = obj.keys()
    if schema == V2:
        if not (V2_REQUIRED <= fields <= V2_FIELDS):
            return None
        replay_of = obj.get("replay_of")
        if replay_of is not None and not _key(replay_of):
            return None
    elif schema == V1:
        if fields != V1_FIELDS or not _text(obj["job_id"], 1, MAX_NAME_CHARS) or not _int(obj["attempt"]):
            return None
    else:
        return None
    paths, inputs, digest, key = obj["allowed_paths"], obj["inputs"], obj["digest"], obj["idempotency_key"]
    instruction, created = obj["instruction"], obj["created_at"]
    # The helpers above, written out: this runs once for every job file a listing reads.
    if not (
        type(key) is str
        and _KEY_MATCH(key)
        and type(digest) is str
        and _HEX64_MATCH(digest)
        and type(instruction) is str
        and 1 <= len(instruction) <= MAX_INSTRUCTION_CHARS
        and type(created) is int
        and _paths_ok(paths)
        and type(inputs) is dict
        and inputs.keys() == set(paths)
    ):
        return None
    for h in inputs.values():
        if not ((type(h) is str and _HEX64_MATCH(h)) or (h is None and schema == V2)):
            return None
    if schema == V2:
        body = {"schema": V2, "instruction": instruction, "allowed_paths": sorted(paths), "inputs": inputs}
        if replay_of is not None:
            body["replay_of"] = replay_of
        if _canonical_sha(body) != digest or key != digest[:32]:
            return None
    else:
        if _canonical_sha({k: v for k, v in obj.items() if k != "digest"}) != digest:
            return None
        if _canonical_sha({"instruction": instruction, "inputs": inputs})[:32] != key:
            return None
    return JobSummary(
        schema, digest, instruction, tuple(paths), tuple(sorted(inputs.items())), float(created)
    )


def quick_receipt(obj: Any) -> ReceiptFacts | None:
    """What a listing keeps of a valid receipt, or None."""
    if type(obj) is not dict or obj.keys() != RECEIPT_FIELDS:
        return None
    outputs = obj["outputs"]
    if not (
        obj["schema"] in (V1, V2)
        and type(obj["schema"]) is str
        and _hex64(obj["job_digest"])
        and _key(obj["idempotency_key"])
        and obj["status"] in RECEIPT_STATUSES
        and type(obj["status"]) is str
        and _text(obj["worker_id"], 1, MAX_NAME_CHARS)
        and type(outputs) is dict
        and all(_hex64(h) for h in outputs.values())
    ):
        return None
    return ReceiptFacts(obj["status"], obj["worker_id"], obj["idempotency_key"], obj["job_digest"])


def quick_lease(obj: Any) -> LeaseFacts | None:
    """What a listing keeps of a valid lease, or None."""
    if type(obj) is not dict or obj.keys() != LEASE_FIELDS:
        return None
    if not (
        _text(obj["worker"], 1, MAX_NAME_CHARS)
        and type(obj["host"]) is str
        and _int(obj["pid"])
        and _int(obj["token"])
        and obj["token"] >= 1
        and _number(obj["claimed_at"])
        and _number(obj["heartbeat"])
        and _number(obj["ttl"])
        and obj["ttl"] > 0
    ):
        return None
    return LeaseFacts(obj["worker"], obj["host"], obj["pid"], float(obj["heartbeat"]), float(obj["ttl"]))
