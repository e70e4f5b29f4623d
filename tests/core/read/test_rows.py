"""core.read.rows: what one key's files say, read from real files, never raising for a bad
one; and the row a listing shows."""

from __future__ import annotations

import json
import os
from pathlib import Path

from corekit import FILES, mint, receive, sha, write_jobs
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.model.contract import MAX_LEASE_BYTES
from core.model.lifecycle import State
from core.model.quick_checks import LeaseFacts, ReceiptFacts
from core.read.folders import list_names
from core.read.rows import (
    JobRow,
    KeyFacts,
    parse_lease,
    parse_receipt,
    racy_after,
    read_facts,
    read_file,
    with_attempts,
)
from core.store.layout import Layout
from core.store.queue import claim, reject

OLD_NS = 10**18  # 2001: long settled


def facts(layout: Layout, key: str) -> tuple[KeyFacts, bool]:
    names = list_names(str(layout.gen))
    folders, receipt = names.where.get(key, ()), key in names.files["receipts"]
    return read_facts(str(layout.gen), key, folders, receipt=receipt, racy_ns=racy_after())


def settle(path: Path) -> None:
    os.utime(path, ns=(OLD_NS, OLD_NS))


def test_a_queued_job(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    settle(repo.queue / f"{key}.json")
    got, settled = facts(repo, key)
    assert settled and got.folders == ("queue",) and got.schema and got.invalid is None
    assert got.schema == "genjob.v2" and got.allowed_paths == ("src/app.py",)
    assert got.inputs == (("src/app.py", sha(FILES["src/app.py"])),), "a queued job keeps its inputs"
    assert (got.receipt, got.receipt_worker, got.modified) == (None, "", OLD_NS)
    reject(repo, key, "not now")
    got, _ = facts(repo, key)
    assert got.schema and got.inputs == (), "a closed job meets the tree no more"


def test_a_running_job_with_a_receipt_and_attempts(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo, "x", ["src/app.py"])
    receive(repo, job.key, {"src/app.py": b"new"}, signer)
    got, _ = facts(repo, job.key)
    assert got.folders == ("running",) and got.receipt == "ok" and got.receipt_problems == ()
    assert got.schema and got.inputs == (("src/app.py", job.inputs["src/app.py"]),)
    row = with_attempts(repo, JobRow(key=job.key, state=State.RECEIVED))
    assert row.attempts == 1 and row.worker


def test_a_rejected_record_gives_its_reason(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    reject(repo, key, "not now")
    got, _ = facts(repo, key)
    assert got.folders == ("rejected",) and got.rejection == "not now" and got.schema


def test_a_file_that_does_not_parse_makes_the_key_invalid_with_its_fault(repo: Layout) -> None:
    key = "0" * 32
    (repo.queue / f"{key}.json").write_bytes(b"{not json")
    got, settled = facts(repo, key)
    assert got.schema == ""
    assert got.invalid is not None and "malformed JSON" in got.invalid and str(repo.queue) in got.invalid
    assert not settled, "a file written just now may still be changing"


def test_a_file_name_that_is_not_a_key(repo: Layout) -> None:
    (repo.queue / "notakey.json").write_bytes(b"{}")
    got, _ = facts(repo, "notakey")
    assert got.invalid == "notakey.json: file name is not a job key"


def test_a_job_under_another_keys_name_goes_to_the_strict_reader(repo: Layout) -> None:
    real = write_jobs(repo, 1)[0]
    wrong = "1" * 32
    os.rename(repo.queue / f"{real}.json", repo.queue / f"{wrong}.json")
    got, _ = facts(repo, wrong)
    assert got.invalid is not None and "file name does not match its key" in got.invalid


def test_read_says_what_became_of_a_file(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(b"{}")
    got = read_file(str(path), racy_after())
    assert (got.data, got.settled) == (b"{}", False)
    settle(path)
    assert read_file(str(path), racy_after()) == (b"{}", path.stat().st_ino, OLD_NS, True)
    assert read_file(str(tmp_path / "gone"), racy_after()).data is None
    os.mkfifo(tmp_path / "fifo")
    data = read_file(str(tmp_path / "fifo"), racy_after()).data
    assert isinstance(data, str) and "cannot read" in data


def test_receipts_and_leases_parse_into_their_records(repo: Layout) -> None:
    receipt = {
        "schema": "genjob.v2",
        "job_digest": "d" * 64,
        "idempotency_key": "d" * 32,
        "status": "aborted",
        "outputs": {},
        "worker_id": "w1",
    }
    assert parse_receipt(json.dumps(receipt).encode(), "r") == ReceiptFacts(
        "aborted", "w1", "d" * 32, "d" * 64
    )
    fault = parse_receipt(json.dumps({**receipt, "status": "done"}).encode(), "r.json")
    assert isinstance(fault, str) and fault.startswith("r.json: status")
    key = write_jobs(repo, 1)[0]
    claim(repo, "w1", key)
    data = read_file(str(repo.lease(key)), limit=MAX_LEASE_BYTES).data
    assert isinstance(data, bytes)
    lease = parse_lease(data, "l")
    assert isinstance(lease, LeaseFacts) and lease.worker == "w1" and lease.pid == os.getpid()
    assert isinstance(parse_lease(b"[]", "l.lease"), str)
    assert read_file(str(repo.running / "none.lease")).data is None


def test_a_row_as_json() -> None:
    row = JobRow(
        key="a" * 32,
        state=State.RUNNING,
        schema="genjob.v2",
        digest="d" * 64,
        instruction="do",
        allowed_paths=("a.py",),
        created_at=1.5,
        attempts=2,
        folders=("running",),
    )
    got = json.loads(json.dumps(row.to_dict()))
    assert got["state"] == "RUNNING" and got["worker"] is None and got["allowed_paths"] == ["a.py"]
    assert set(got) == set(JobRow._fields)
