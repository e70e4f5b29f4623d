"""The receipt store: the first receipt wins, a late one is kept aside, never over it."""

from __future__ import annotations

import json
import os

import pytest
from corekit import mint, sha, stage_outputs
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import BadInput
from core.store.events import attempts
from core.store.layout import Layout
from core.store.queue import claim, requeue
from core.store.receipts import commit_receipt, load_receipt, make_receipt


def test_a_winning_receipt_publishes_outputs_signature_and_receipt(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    job = mint(repo)
    c = claim(repo, "w1")
    rec = make_receipt(job, "ok", {"src/app.py": sha(b"new\n")}, "w1")
    staged = stage_outputs(repo, {"src/app.py": b"new\n"})
    res = commit_receipt(repo, job, rec, c.lease.token, "w1", staged, signer)
    assert res.won and res.path == repo.receipt(job.key)
    assert repo.receipt(job.key).read_bytes() == rec.canonical_bytes()
    assert json.loads(repo.receipt(job.key).read_bytes()) == {
        "schema": "genjob.v2",
        "job_digest": job.digest,
        "idempotency_key": job.key,
        "status": "ok",
        "outputs": {"src/app.py": sha(b"new\n")},
        "worker_id": "w1",
    }
    assert (repo.out_dir(job.digest) / "src/app.py").read_bytes() == b"new\n"
    assert not staged.exists()
    assert repo.signature(job.key).exists()
    assert not repo.lease(job.key).exists()
    assert load_receipt(repo, job.key) == rec
    finished = attempts(repo, job.key)[-1]
    assert finished["event"] == "finished" and finished["signed"] is True


def test_an_unsigned_receipt_has_no_signature_file(repo: Layout) -> None:
    job = mint(repo)
    c = claim(repo, "w1")
    rec = make_receipt(job, "aborted", {}, "w1")
    assert commit_receipt(repo, job, rec, c.lease.token, "w1", None, None).won
    assert not repo.signature(job.key).exists()
    assert load_receipt(repo, job.key) == rec


def test_a_late_receipt_is_kept_aside(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo)
    first = claim(repo, "w1")
    requeue(repo, job.key, force=True)
    second = claim(repo, "w2")
    late = make_receipt(job, "ok", {"src/app.py": sha(b"late\n")}, "w1")
    staged = stage_outputs(repo, {"src/app.py": b"late\n"})
    res = commit_receipt(repo, job, late, first.lease.token, "w1", staged, signer)
    assert not res.won
    assert res.path == repo.log_dir(job.key) / f"late-receipt-attempt-{first.lease.token}.json"
    assert res.path.read_bytes() == late.canonical_bytes()
    assert res.path.with_suffix(".sig").exists()
    assert (repo.log_dir(job.key) / "late-out-attempt-1" / "src/app.py").read_bytes() == b"late\n"
    assert not repo.receipt(job.key).exists()
    assert not repo.out_dir(job.digest).exists()
    assert repo.lease(job.key).exists(), "the current holder's lease is untouched"
    on_time = make_receipt(job, "ok", {"src/app.py": sha(b"on time\n")}, "w2")
    staged = stage_outputs(repo, {"src/app.py": b"on time\n"})
    assert commit_receipt(repo, job, on_time, second.lease.token, "w2", staged, signer).won


def test_the_first_receipt_wins(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo)
    c = claim(repo, "w1")
    ok = make_receipt(job, "ok", {}, "w1")
    assert commit_receipt(repo, job, ok, c.lease.token, "w1", None, signer).won
    again = make_receipt(job, "rejected", {}, "w1")
    res = commit_receipt(repo, job, again, c.lease.token, "w1", None, signer)
    assert not res.won
    assert load_receipt(repo, job.key) == ok


def test_outputs_of_an_earlier_attempt_are_set_aside(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo)
    claim(repo, "w1")
    old = repo.out_dir(job.digest) / "src"
    old.mkdir(parents=True)
    (old / "app.py").write_bytes(b"stale bytes\n")
    requeue(repo, job.key, force=True)
    c = claim(repo, "w2")
    rec = make_receipt(job, "ok", {"src/app.py": sha(b"new\n")}, "w2")
    assert commit_receipt(
        repo, job, rec, c.lease.token, "w2", stage_outputs(repo, {"src/app.py": b"new\n"}), signer
    ).won
    assert (repo.out_dir(job.digest) / "src/app.py").read_bytes() == b"new\n"
    aside = [n for n in os.listdir(repo.log_dir(job.key)) if n.startswith("out-before-2")]
    assert len(aside) == 1


def test_load_receipt(repo: Layout) -> None:
    job = mint(repo)
    assert load_receipt(repo, job.key) is None
    repo.receipt(job.key).write_bytes(b'{"schema": "genjob.v2", "schema": "genjob.v1"}')
    with pytest.raises(BadInput, match="duplicate key 'schema'"):
        load_receipt(repo, job.key)
