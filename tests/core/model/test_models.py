"""Job and receipt documents: golden vectors for v1, digest properties for v2, loading rules."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from corekit import make_repo
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import BadInput
from core.model.models import (
    V1,
    V2,
    JobV1,
    JobV2,
    Receipt,
    ReceiptStatus,
    job_bytes,
    job_from_bytes,
    job_from_obj,
    receipt_from_bytes,
    receipt_from_obj,
)
from core.plan.mint import build_job
from core.store.layout import Layout

# sha256("abc") and sha256("") are the textbook vectors.
ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
INSTRUCTION = "Add a timeout to fetch_user and keep the public signature."
JOB_ID = "2f1c7e1e-5a3b-4f6d-9c2e-8b7a6d5c4e3f"
CREATED = 1767225600

# Derived by hand from the seed's rules: key = sha256(canonical({instruction, inputs}))[:32].
GOLDEN_KEY_MATERIAL = (
    '{"inputs":{"src/user.py":"' + ABC + '","tests/test_user.py":"' + EMPTY + '"},'
    '"instruction":"' + INSTRUCTION + '"}'
).encode()
GOLDEN_KEY = "f35c8a2b4692a8ccfaedf33641d7eb64"
# digest = sha256(canonical(every field but digest)): keys sorted, no whitespace.
GOLDEN_DIGEST_MATERIAL = (
    '{"allowed_paths":["src/user.py","tests/test_user.py"],"attempt":1,"created_at":1767225600,'
    '"idempotency_key":"' + GOLDEN_KEY + '","inputs":{"src/user.py":"' + ABC + '",'
    '"tests/test_user.py":"' + EMPTY + '"},"instruction":"' + INSTRUCTION + '",'
    '"job_id":"' + JOB_ID + '","schema":"genjob.v1"}'
).encode()
GOLDEN_DIGEST = "6151436e2b580b0965cb0f93f295fc9da96acd358842f47741b04c27e65c352d"
# The seed writes json.dumps(asdict(job) + digest, indent=2): fields in declaration order.
GOLDEN_FILE = (
    "{\n"
    '  "schema": "genjob.v1",\n'
    f'  "job_id": "{JOB_ID}",\n'
    f'  "idempotency_key": "{GOLDEN_KEY}",\n'
    f'  "created_at": {CREATED},\n'
    f'  "instruction": "{INSTRUCTION}",\n'
    '  "allowed_paths": [\n'
    '    "src/user.py",\n'
    '    "tests/test_user.py"\n'
    "  ],\n"
    '  "inputs": {\n'
    f'    "src/user.py": "{ABC}",\n'
    f'    "tests/test_user.py": "{EMPTY}"\n'
    "  },\n"
    '  "attempt": 1,\n'
    f'  "digest": "{GOLDEN_DIGEST}"\n'
    "}"
).encode()
# A v2 job with one new path: digest over {schema, instruction, sorted allowed_paths, inputs}.
GOLDEN_V2_MATERIAL = (
    '{"allowed_paths":["src/new.py","src/user.py"],"inputs":{"src/new.py":null,"src/user.py":"'
    + ABC
    + '"},"instruction":"'
    + INSTRUCTION
    + '","schema":"genjob.v2"}'
).encode()
GOLDEN_V2_DIGEST = "6175162c7d45d027a2efaf0511ee8c8cb8c45f37ef80629411e6b0e3d3798ec1"


def golden_v1_doc() -> dict[str, Any]:
    return {
        "schema": V1,
        "job_id": JOB_ID,
        "idempotency_key": GOLDEN_KEY,
        "created_at": CREATED,
        "instruction": INSTRUCTION,
        "allowed_paths": ["src/user.py", "tests/test_user.py"],
        "inputs": {"src/user.py": ABC, "tests/test_user.py": EMPTY},
        "attempt": 1,
        "digest": GOLDEN_DIGEST,
    }


def v2_doc(
    instruction: str,
    inputs: dict[str, str | None],
    created_at: int = CREATED,
    replay_of: str | None = None,
    order: list[str] | None = None,
) -> dict[str, Any]:
    """A v2 document built with hashlib and json alone."""
    meaning: dict[str, Any] = {
        "schema": V2,
        "instruction": instruction,
        "allowed_paths": sorted(inputs),
        "inputs": inputs,
    }
    if replay_of:
        meaning["replay_of"] = replay_of
    digest = hashlib.sha256(json.dumps(meaning, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    doc = {**meaning, "idempotency_key": digest[:32], "created_at": created_at, "digest": digest}
    if order is not None:
        doc["allowed_paths"] = order
    return doc


# -- golden vectors ----------------------------------------------------------------------


def test_golden_v1_vectors_hold_by_hand() -> None:
    assert hashlib.sha256(b"abc").hexdigest() == ABC
    assert hashlib.sha256(GOLDEN_KEY_MATERIAL).hexdigest()[:32] == GOLDEN_KEY
    assert hashlib.sha256(GOLDEN_DIGEST_MATERIAL).hexdigest() == GOLDEN_DIGEST
    assert hashlib.sha256(GOLDEN_V2_MATERIAL).hexdigest() == GOLDEN_V2_DIGEST


def test_golden_v1_job_loads_and_recomputes_exactly() -> None:
    job = job_from_obj(golden_v1_doc(), "golden")
    assert isinstance(job, JobV1)
    assert job.key == GOLDEN_KEY
    assert job.derived_key() == GOLDEN_KEY
    assert job.compute_digest() == GOLDEN_DIGEST
    assert json.dumps(job.digest_body(), sort_keys=True, separators=(",", ":")).encode() == (
        GOLDEN_DIGEST_MATERIAL
    )


def test_golden_v1_file_bytes_are_the_seeds_layout() -> None:
    job = job_from_obj(golden_v1_doc(), "golden")
    assert job_bytes(job) == GOLDEN_FILE
    assert job_from_bytes(GOLDEN_FILE, "golden.json") == job


def test_golden_v1_key_from_mint(tmp_path: Path) -> None:
    layout = make_repo(tmp_path / "r", {"src/user.py": b"abc", "tests/test_user.py": b""})
    job = build_job(layout, INSTRUCTION, ["src/user.py", "tests/test_user.py"], schema=V1)
    assert job.key == GOLDEN_KEY
    body = json.loads(job_bytes(job))
    assert list(body) == list(golden_v1_doc())
    digest = body.pop("digest")
    assert hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest() == (
        digest
    )


def test_golden_v1_non_ascii_instruction_is_escaped(tmp_path: Path) -> None:
    layout = make_repo(tmp_path / "r", {"a.py": b"abc"})
    job = build_job(layout, "Renomme « été »", ["a.py"], schema=V1)
    material = (
        '{"inputs":{"a.py":"' + ABC + '"},"instruction":"Renomme \\u00ab \\u00e9t\\u00e9 \\u00bb"}'
    ).encode()
    assert job.key == hashlib.sha256(material).hexdigest()[:32] == "739d8e177d9c4d3303cdc90c315e415a"


def test_golden_v2_from_mint(tmp_path: Path) -> None:
    layout = make_repo(tmp_path / "r", {"src/user.py": b"abc"})
    job = build_job(layout, INSTRUCTION, ["src/user.py"], ["src/new.py"])
    assert isinstance(job, JobV2)
    assert job.digest == GOLDEN_V2_DIGEST
    assert job.key == GOLDEN_V2_DIGEST[:32]
    assert job.inputs == {"src/new.py": None, "src/user.py": ABC}
    assert job.new_paths() == ["src/new.py"]


# -- v2 digest properties ----------------------------------------------------------------

paths_st = st.lists(
    # Built from parts (no empty, "." or ".." part), not filtered out of any text.
    st.lists(
        st.text(alphabet="abcdefg._", min_size=1, max_size=4).filter(lambda part: part not in (".", "..")),
        min_size=1,
        max_size=3,
    ).map("/".join),
    min_size=1,
    max_size=6,
    unique=True,
)
hashes_st = st.one_of(st.none(), st.sampled_from([ABC, EMPTY, "0" * 64]))


@st.composite
def v2_jobs(draw: st.DrawFn) -> tuple[str, dict[str, str | None]]:
    instruction = draw(st.text(min_size=1, max_size=40).filter(str.strip))
    paths = draw(paths_st)
    inputs = {p: draw(hashes_st) for p in paths}
    return instruction, inputs


@given(v2_jobs(), st.integers(0, 2**40), st.integers(0, 2**40), st.randoms())
def test_v2_digest_ignores_created_at_and_path_order(
    work: tuple[str, dict[str, str | None]], t1: int, t2: int, rnd: Any
) -> None:
    instruction, inputs = work
    order = sorted(inputs)
    rnd.shuffle(order)
    a = job_from_obj(v2_doc(instruction, inputs, t1), "a")
    b = job_from_obj(v2_doc(instruction, dict(reversed(list(inputs.items()))), t2, order=order), "b")
    assert a.digest == b.digest
    assert a.key == b.key == a.digest[:32]


@given(v2_jobs(), st.data())
def test_v2_digest_changes_with_every_meaningful_field(
    work: tuple[str, dict[str, str | None]], data: st.DataObject
) -> None:
    instruction, inputs = work
    base = job_from_obj(v2_doc(instruction, inputs), "base").digest
    changed_instruction = v2_doc(instruction + "!", inputs)
    path = data.draw(st.sampled_from(sorted(inputs)))
    other_hash = data.draw(hashes_st.filter(lambda h: h != inputs[path]))
    changed_input = v2_doc(instruction, {**inputs, path: other_hash})
    more_paths = v2_doc(instruction, {**inputs, "zz/extra.py": None})
    fewer = {p: h for p, h in inputs.items() if p != path}
    variants = [
        changed_instruction,
        changed_input,
        more_paths,
        v2_doc(instruction, inputs, replay_of="a" * 32),
    ]
    if fewer:
        variants.append(v2_doc(instruction, fewer))
    digests = {job_from_obj(doc, "v").digest for doc in variants}
    assert base not in digests
    assert len(digests) == len(variants)


def test_v2_mint_is_independent_of_time_and_path_order(repo: Layout) -> None:
    a = build_job(repo, "Tidy.", ["src/app.py", "src/util.py"], ["src/new.py"])
    b = build_job(repo, "Tidy.", ["src/util.py", "src/app.py"], ["src/new.py"])
    assert a.digest == b.digest and a.key == b.key
    assert a.allowed_paths == sorted(a.allowed_paths)


@pytest.fixture(scope="module")
def four_files(tmp_path_factory: pytest.TempPathFactory) -> Layout:
    files = {"README.md": b"r", "docs/guide.md": b"g", "src/app.py": b"a", "src/util.py": b"u"}
    return make_repo(tmp_path_factory.mktemp("models") / "repo", files, commit=False)


@settings(max_examples=25)
@given(order=st.permutations(["README.md", "docs/guide.md", "src/app.py", "src/util.py"]))
def test_v2_mint_digest_is_a_function_of_the_path_set(four_files: Layout, order: list[str]) -> None:
    reference = build_job(four_files, "Same work.", sorted(order))
    assert build_job(four_files, "Same work.", order).digest == reference.digest


# -- loading rules -----------------------------------------------------------------------


def _v1(**changes: Any) -> dict[str, Any]:
    doc = golden_v1_doc()
    doc.update(changes)
    return doc


@pytest.mark.parametrize(
    ("doc", "fault"),
    [
        ([], "a job document must be a JSON object"),
        (_v1(schema="genjob.v3"), "unknown schema 'genjob.v3'"),
        ({k: v for k, v in _v1().items() if k != "schema"}, "unknown schema None"),
        (_v1(extra=1), "extra: unknown field"),
        ({k: v for k, v in _v1().items() if k != "job_id"}, "job_id: missing field"),
        (_v1(attempt="1"), "attempt:"),
        (_v1(attempt=True), "attempt:"),
        (_v1(created_at=1.5), "created_at:"),
        (_v1(instruction=""), "instruction:"),
        (_v1(allowed_paths=[]), "allowed_paths is empty"),
        (_v1(allowed_paths=["src/user.py", "src/user.py"]), "lists a path twice"),
        (_v1(allowed_paths=["../x", "tests/test_user.py"]), "'..' is not allowed"),
        (_v1(allowed_paths=["/etc/passwd", "tests/test_user.py"]), "absolute path"),
        (_v1(allowed_paths=[".git/config", "tests/test_user.py"]), "under .git/"),
        (_v1(allowed_paths=["src/user.py", "other.py"]), "inputs must name exactly the allowed paths"),
        (_v1(inputs={"src/user.py": "XYZ", "tests/test_user.py": EMPTY}), "inputs.src/user.py"),
        (_v1(digest="0" * 64), "does not match the document"),
        (_v1(instruction="Something else."), "does not match the document"),
        (_v1(idempotency_key="0" * 32), "does not match the document"),
        (_v1(idempotency_key="ABC"), "idempotency_key"),
    ],
)
def test_bad_job_documents_are_refused_naming_source_and_fault(doc: Any, fault: str) -> None:
    with pytest.raises(BadInput) as err:
        job_from_obj(doc, "queue/x.json")
    assert str(err.value).startswith("queue/x.json: ")
    assert fault in str(err.value)


def test_v1_key_mismatch_with_a_consistent_digest_is_refused() -> None:
    doc = _v1(idempotency_key="0" * 32)
    body = {k: v for k, v in doc.items() if k != "digest"}
    doc["digest"] = hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    with pytest.raises(BadInput, match="idempotency_key does not match instruction and inputs"):
        job_from_obj(doc, "x")


def test_v1_inputs_cannot_be_null() -> None:
    with pytest.raises(BadInput, match="inputs"):
        job_from_obj(_v1(inputs={"src/user.py": None, "tests/test_user.py": EMPTY}), "x")


def test_v2_key_must_be_the_digest_prefix() -> None:
    doc = v2_doc("x", {"a.py": ABC})
    doc["idempotency_key"] = "f" * 32
    with pytest.raises(BadInput, match="idempotency_key"):
        job_from_obj(doc, "x")


def test_v2_unknown_field_and_attempt_are_refused() -> None:
    with pytest.raises(BadInput, match="attempt: unknown field"):
        job_from_obj({**v2_doc("x", {"a.py": ABC}), "attempt": 1}, "x")


def test_a_loaded_document_round_trips() -> None:
    for doc in (golden_v1_doc(), v2_doc("x", {"a.py": ABC, "b.py": None}, replay_of="c" * 32)):
        job = job_from_obj(doc, "x")
        assert job.document() == doc
        assert job_from_obj(json.loads(json.dumps(job.document())), "again") == job


# -- receipts ------------------------------------------------------------------------------


def receipt_doc(**changes: Any) -> dict[str, Any]:
    doc = {
        "schema": V1,
        "job_digest": GOLDEN_DIGEST,
        "idempotency_key": GOLDEN_KEY,
        "status": "ok",
        "outputs": {"src/user.py": ABC},
        "worker_id": "w1",
    }
    doc.update(changes)
    return doc


def test_receipt_has_exactly_the_seeds_six_fields() -> None:
    rec = receipt_from_obj(receipt_doc(), "r.json")
    assert set(rec.document()) == {
        "schema",
        "job_digest",
        "idempotency_key",
        "status",
        "outputs",
        "worker_id",
    }
    assert rec.canonical_bytes() == json.dumps(receipt_doc(), sort_keys=True, separators=(",", ":")).encode()
    assert receipt_from_bytes(json.dumps(receipt_doc()).encode(), "r.json") == rec


@pytest.mark.parametrize("status", list(ReceiptStatus))
def test_receipt_status_reads_as_the_enum_and_writes_the_bare_word(status: ReceiptStatus) -> None:
    rec = receipt_from_obj(receipt_doc(status=status.value), "r.json")
    assert rec.status is status
    assert json.loads(rec.canonical_bytes())["status"] == status.value
    assert f'"status":"{status.value}"'.encode() in rec.canonical_bytes()


@pytest.mark.parametrize("status", [b"ok", None, 1, "OK"])
def test_receipt_status_must_be_one_of_the_words(status: object) -> None:
    with pytest.raises(BadInput, match="status: Input should be 'ok', 'rejected' or 'aborted'"):
        receipt_from_obj(receipt_doc(status=status), "r.json")


@pytest.mark.parametrize(
    ("changes", "fault"),
    [
        ({"status": "done"}, "status:"),
        ({"schema": "genjob.v0"}, "schema:"),
        ({"job_digest": "x"}, "job_digest:"),
        ({"idempotency_key": GOLDEN_KEY.upper()}, "idempotency_key:"),
        ({"outputs": {"a": "nothex"}}, "outputs.a:"),
        ({"worker_id": ""}, "worker_id:"),
        ({"signature": "x"}, "signature: unknown field"),
    ],
)
def test_bad_receipts_are_refused(changes: dict[str, Any], fault: str) -> None:
    with pytest.raises(BadInput) as err:
        receipt_from_obj(receipt_doc(**changes), "receipts/k.json")
    assert str(err.value).startswith("receipts/k.json: ")
    assert fault in str(err.value)


def test_receipt_must_be_an_object() -> None:
    with pytest.raises(BadInput, match="a receipt must be a JSON object"):
        receipt_from_bytes(b"[]", "r")
    assert Receipt.model_validate(receipt_doc()).status == "ok"
