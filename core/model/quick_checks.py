"""Quick checks of job, receipt and lease documents: standard library only, so a listing
never loads pydantic. Each takes a document the strict JSON reader parsed and accepts it
exactly when the strict model (`core.model.models`, `core.store.lease`) would, from the
same constants (`core.model.contract`); else it gives None and the caller asks the model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, NamedTuple

from core.model import contract as c
from core.model.paths import check_relpath


class JobSummary(NamedTuple):
    """What a listing keeps of a valid job document."""

    schema: str
    digest: str
    instruction: str
    allowed_paths: tuple[str, ...]
    inputs: tuple[tuple[str, str | None], ...]  # (path, input hash or None), sorted by path
    created_at: float


class ReceiptFacts(NamedTuple):
    status: str  # a `ReceiptStatus` word, as plain text
    worker_id: str
    idempotency_key: str
    job_digest: str


class LeaseFacts(NamedTuple):
    worker: str
    host: str
    pid: int
    heartbeat: float
    ttl: float


def summary_of(job: Any) -> JobSummary:
    """The summary of a job the strict model accepted (`core.model.models.Job`)."""
    paths, inputs = tuple(job.allowed_paths), tuple(sorted(job.inputs.items()))
    return JobSummary(job.schema_name, job.digest, job.instruction, paths, inputs, float(job.created_at))


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))  # as `core.model.canonical` writes
_GOOD_PATHS: set[str] = set()  # paths `check_relpath` passed: the same few recur in many jobs


def _sha(obj: object) -> str:
    return hashlib.sha256(_CANONICAL.encode(obj).encode()).hexdigest()


def _key(v: object) -> bool:
    return type(v) is str and c.KEY_RE.fullmatch(v) is not None


def _hex64(v: object) -> bool:
    return type(v) is str and c.HEX64_RE.fullmatch(v) is not None


def _name(v: object) -> bool:
    return type(v) is str and 1 <= len(v) <= c.MAX_NAME_CHARS


def _number(v: object) -> bool:
    return type(v) is int or type(v) is float


def _fits(obj: Any, fields: dict[str, Callable[[Any], bool]]) -> bool:
    """Whether `obj` has exactly these fields, each passing its check."""
    return type(obj) is dict and obj.keys() == fields.keys() and all(ok(obj[k]) for k, ok in fields.items())


RECEIPT: dict[str, Callable[[Any], bool]] = {
    "schema": lambda v: type(v) is str and v in c.SCHEMAS,
    "job_digest": _hex64,
    "idempotency_key": _key,
    "status": lambda v: type(v) is str and v in c.RECEIPT_STATUSES,
    "outputs": lambda v: type(v) is dict and all(map(_hex64, v.values())),
    "worker_id": _name,
}
LEASE: dict[str, Callable[[Any], bool]] = {
    "worker": _name,
    "host": lambda v: type(v) is str,
    "pid": lambda v: type(v) is int,
    "token": lambda v: type(v) is int and v >= 1,
    "claimed_at": _number,
    "heartbeat": _number,
    "ttl": lambda v: _number(v) and v > 0,
}


def _paths_ok(paths: object) -> bool:
    if (
        type(paths) is not list
        or not 1 <= len(paths) <= c.MAX_PATHS
        or not all(type(p) is str for p in paths)
    ):
        return False
    if len(set(paths)) < len(paths):
        return False
    if len(_GOOD_PATHS) > 65536:
        _GOOD_PATHS.clear()
    try:
        _GOOD_PATHS.update(p for p in paths if p in _GOOD_PATHS or check_relpath(p))
    except ValueError:
        return False
    return True


def _schema_ok(obj: dict[str, Any]) -> bool:
    """The schema's own fields: v2's optional `replay_of`, v1's `job_id` and `attempt`."""
    if obj.get("schema") == c.V2:
        replay_of = obj.get("replay_of")
        return c.V2_REQUIRED <= obj.keys() <= c.V2_FIELDS and (replay_of is None or _key(replay_of))
    v1 = obj.get("schema") == c.V1 and obj.keys() == c.V1_FIELDS
    return v1 and _name(obj["job_id"]) and type(obj["attempt"]) is int


def _sealed(obj: dict[str, Any]) -> bool:
    """Whether digest and key are the ones the document's content makes."""
    digest, key, meaning = obj["digest"], obj["idempotency_key"], {"inputs": obj["inputs"]}
    if obj["schema"] == c.V1:
        body = {k: v for k, v in obj.items() if k != "digest"}
        return bool(_sha(body) == digest and _sha({**meaning, "instruction": obj["instruction"]})[:32] == key)
    meaning.update(schema=c.V2, instruction=obj["instruction"], allowed_paths=sorted(obj["allowed_paths"]))
    if obj.get("replay_of") is not None:
        meaning["replay_of"] = obj["replay_of"]
    return bool(_sha(meaning) == digest and key == digest[:32])


def quick_job(obj: Any) -> JobSummary | None:
    """The listing summary of a valid job document, or None when the strict model must decide."""
    if type(obj) is not dict or not _schema_ok(obj):
        return None
    paths, inputs, text, v2 = obj["allowed_paths"], obj["inputs"], obj["instruction"], obj["schema"] == c.V2
    if not (
        _key(obj["idempotency_key"])
        and _hex64(obj["digest"])
        and type(text) is str
        and 1 <= len(text) <= c.MAX_INSTRUCTION_CHARS
        and type(obj["created_at"]) is int
        and _paths_ok(paths)
        and type(inputs) is dict
        and inputs.keys() == set(paths)
        and all(_hex64(h) or (h is None and v2) for h in inputs.values())
        and _sealed(obj)
    ):
        return None
    kept = tuple(sorted(inputs.items()))
    return JobSummary(obj["schema"], obj["digest"], text, tuple(paths), kept, float(obj["created_at"]))


def quick_receipt(obj: Any) -> ReceiptFacts | None:
    """What a listing keeps of a valid receipt, or None."""
    if not _fits(obj, RECEIPT):
        return None
    return ReceiptFacts(obj["status"], obj["worker_id"], obj["idempotency_key"], obj["job_digest"])


def quick_lease(obj: Any) -> LeaseFacts | None:
    """What a listing keeps of a valid lease, or None."""
    if not _fits(obj, LEASE):
        return None
    return LeaseFacts(obj["worker"], obj["host"], obj["pid"], float(obj["heartbeat"]), float(obj["ttl"]))
