"""The quick document checks accept exactly what the strict models accept."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.errors import BadInput
from core.model.models import job_from_obj, receipt_from_obj
from core.model.quick_checks import quick_job, quick_lease, quick_receipt, summary_of
from core.store.lease import Lease

ABC = hashlib.sha256(b"abc").hexdigest()


def canonical_sha(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def v1_doc() -> dict[str, Any]:
    inputs = {"src/a.py": ABC, "b.py": "0" * 64}
    doc: dict[str, Any] = {
        "schema": "genjob.v1",
        "job_id": "0c5e7a1e-0000-4000-8000-000000000000",
        "idempotency_key": canonical_sha({"instruction": "Do it.", "inputs": inputs})[:32],
        "created_at": 1_767_225_600,
        "instruction": "Do it.",
        "allowed_paths": ["src/a.py", "b.py"],
        "inputs": inputs,
        "attempt": 1,
    }
    return {**doc, "digest": canonical_sha(doc)}


def v2_doc(replay: bool = False) -> dict[str, Any]:
    meaning: dict[str, Any] = {
        "schema": "genjob.v2",
        "instruction": "Do it.",
        "allowed_paths": ["b.py", "src/a.py"],
        "inputs": {"b.py": None, "src/a.py": ABC},
    }
    if replay:
        meaning["replay_of"] = "f" * 32
    digest = canonical_sha(meaning)
    return {**meaning, "idempotency_key": digest[:32], "created_at": 1_767_225_600, "digest": digest}


def reseal(doc: dict[str, Any]) -> None:
    """Recompute digest and key from whatever the document now says, as a forger would."""
    try:
        if doc.get("schema") == "genjob.v2":
            body = {k: doc.get(k) for k in ("schema", "instruction", "inputs")}
            body["allowed_paths"] = sorted(doc["allowed_paths"])
            if doc.get("replay_of") is not None:
                body["replay_of"] = doc["replay_of"]
            doc["digest"] = canonical_sha(body)
            doc["idempotency_key"] = doc["digest"][:32]
        else:
            doc["idempotency_key"] = canonical_sha(
                {"instruction": doc["instruction"], "inputs": doc["inputs"]}
            )[:32]
            doc["digest"] = canonical_sha({k: v for k, v in doc.items() if k != "digest"})
    except (KeyError, TypeError):
        pass


ODD_VALUES: list[Any] = [None, True, False, 0, 1, -1, 2**40, 1.0, 1.5, "", "x", "a" * 201, "src/a.py"]
ODD_VALUES += ["../x", ".gen/x", [], {}, ["x"], [1], ABC, "F" * 64, "f" * 32, "g" * 32, "0" * 64 + "\n"]
ODD_VALUES += [{"src/a.py": ABC}, ["src/a.py", "src/a.py"]]
ODD = st.sampled_from(ODD_VALUES).map(copy.deepcopy)  # drawn values are mutated: never share them


@st.composite
def mutated_jobs(draw: st.DrawFn) -> dict[str, Any]:
    doc = draw(st.sampled_from([v1_doc(), v2_doc(), v2_doc(replay=True)]))
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["drop", "add", "set", "input", "path"]))
        if kind == "drop" and doc:
            doc.pop(draw(st.sampled_from(sorted(doc))))
        elif kind == "add":
            doc[draw(st.sampled_from(["extra", "attempt", "job_id", "replay_of", "schema_", "digest"]))] = (
                draw(ODD)
            )
        elif kind == "set" and doc:
            doc[draw(st.sampled_from(sorted(doc)))] = draw(ODD)
        elif kind == "input" and isinstance(doc.get("inputs"), dict) and doc["inputs"]:
            doc["inputs"][draw(st.sampled_from(sorted(doc["inputs"])))] = draw(ODD)
        elif kind == "path" and isinstance(doc.get("allowed_paths"), list) and doc["allowed_paths"]:
            doc["allowed_paths"][draw(st.integers(0, len(doc["allowed_paths"]) - 1))] = draw(ODD)
        if draw(st.booleans()):
            reseal(doc)
    return doc


def strict_job(doc: Any) -> tuple[object, ...] | None:
    try:
        job = job_from_obj(doc, "x")
    except BadInput:
        return None
    return summary_of(job)  # what the snapshot keeps of a job the strict reader took


@settings(max_examples=400)
@given(mutated_jobs())
@example(v1_doc())
@example(v2_doc())
@example(v2_doc(replay=True))
@example({**v2_doc(), "replay_of": None})
def test_quick_job_agrees_with_the_models(doc: dict[str, Any]) -> None:
    assert quick_job(doc) == strict_job(doc)


def test_quick_job_accepts_ordinary_documents() -> None:
    for doc in (v1_doc(), v2_doc(), v2_doc(replay=True)):
        assert quick_job(doc) is not None


def receipt_doc() -> dict[str, Any]:
    return {
        "schema": "genjob.v2",
        "job_digest": ABC,
        "idempotency_key": ABC[:32],
        "status": "ok",
        "outputs": {"src/a.py": ABC},
        "worker_id": "w1",
    }


@settings(max_examples=300)
@given(st.sampled_from(sorted(receipt_doc())), ODD, st.booleans())
@example("status", "done", False)
@example("outputs", {}, False)
def test_quick_receipt_agrees_with_the_model(field: str, value: Any, drop: bool) -> None:
    doc = receipt_doc()
    if drop:
        doc.pop(field)
    else:
        doc[field] = value
    try:
        rec = receipt_from_obj(doc, "x")
        strict = (rec.status, rec.worker_id, rec.idempotency_key, rec.job_digest)
    except BadInput:
        strict = None
    assert quick_receipt(doc) == strict


def lease_doc() -> dict[str, Any]:
    return {"worker": "w1", "host": "h", "pid": 42, "token": 1, "claimed_at": 1.5, "heartbeat": 2, "ttl": 120}


@settings(max_examples=300)
@given(st.sampled_from(sorted(lease_doc())), ODD, st.booleans())
@example("token", 0, False)
@example("ttl", 0, False)
@example("ttl", -1.5, False)
def test_quick_lease_agrees_with_the_model(field: str, value: Any, drop: bool) -> None:
    doc = lease_doc()
    if drop:
        doc.pop(field)
    else:
        doc[field] = value
    try:
        lease = Lease.model_validate(doc)
        strict = (lease.worker, lease.host, lease.pid, lease.heartbeat, lease.ttl)
    except ValueError:
        strict = None
    assert quick_lease(doc) == strict


@pytest.mark.parametrize("value", [[], "x", 1, None])
def test_not_an_object(value: object) -> None:
    assert quick_job(value) is None and quick_receipt(value) is None and quick_lease(value) is None
