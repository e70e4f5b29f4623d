"""Everything known about one job (`core.read.inspect_job`), as `genjob show` and the board's
detail pane get it: read, verified and diffed, with every fault collected, never raised."""

from __future__ import annotations

import json

import pytest
from corekit import mint, receive, set_config
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import GenjobError
from core.model.lifecycle import State
from core.read.inspect_job import job_detail
from core.review.apply_job import apply_job
from core.store.layout import Layout
from core.store.queue import Claimer


def test_an_unknown_key_is_an_error_naming_the_queue(repo: Layout) -> None:
    with pytest.raises(GenjobError, match=f"{'0' * 32}: no such job in {repo.gen}"):
        job_detail(repo, "0" * 32)


def test_a_queued_job_has_its_document_and_minted_event_and_nothing_else(repo: Layout) -> None:
    job = mint(repo, "Queued.")
    detail = job_detail(repo, job.key)
    assert detail.row.state is State.QUEUED
    assert detail.located is not None and detail.located.folder == "queue"
    assert detail.document == job.document()
    assert [e["event"] for e in detail.timeline] == ["minted"]
    assert detail.lease is None and detail.lease_error is None
    assert detail.attempts == [] and detail.verification is None and detail.diffs == []
    assert detail.log_tail == "" and detail.errors == [] and detail.checks == []
    assert detail.cancel_requested_at is None
    assert detail.candidates == 0 and detail.chosen is None


def test_a_running_job_shows_its_lease_and_claim(repo: Layout) -> None:
    job = mint(repo)
    Claimer(repo, "w1").claim(job.key)
    detail = job_detail(repo, job.key)
    assert detail.row.state is State.RUNNING
    assert detail.lease is not None and detail.lease.worker == "w1"
    assert [a["event"] for a in detail.attempts] == ["claimed"]
    assert [e["event"] for e in detail.timeline] == ["minted", "claimed"]


def test_an_unreadable_lease_is_reported_not_raised(repo: Layout) -> None:
    job = mint(repo)
    Claimer(repo, "w1").claim(job.key)
    repo.lease(job.key).write_bytes(b"{not json")
    detail = job_detail(repo, job.key)
    assert detail.lease is None
    assert detail.lease_error is not None and str(repo.lease(job.key)) in detail.lease_error


def test_a_received_job_is_verified_and_diffed_against_the_tree(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    job = mint(repo, "Edit and add.", ["src/app.py"], ["src/new.py"])
    receive(repo, job.key, {"src/app.py": b"def main():\n    return 2\n", "src/new.py": b"x = 1\n"}, signer)
    detail = job_detail(repo, job.key)
    assert detail.row.state is State.RECEIVED
    assert detail.verification is not None and detail.verification.ok
    app, new = detail.diffs
    assert (app.path, app.status, app.added, app.removed, app.signed) == (
        "src/app.py",
        "modified",
        1,
        1,
        True,
    )
    assert "-    return 1\n+    return 2\n" in app.text
    assert app.text.startswith("--- a/src/app.py\n+++ b/src/app.py\n")
    assert (new.path, new.status, new.added, new.removed, new.signed) == ("src/new.py", "new", 1, 0, True)
    assert detail.errors == []


def test_an_output_changed_after_signing_is_marked_unsigned(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"signed\n"}, signer)
    (repo.out_dir(job.digest) / "src/app.py").write_bytes(b"swapped\n")
    detail = job_detail(repo, job.key)
    [diff] = detail.diffs
    assert diff.signed is False and "+swapped\n" in diff.text
    assert detail.verification is not None and not detail.verification.ok


def test_an_applied_jobs_diffs_are_the_change_it_made(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"new\n"}, signer)
    apply_job(repo, job.key)
    detail = job_detail(repo, job.key)
    [diff] = detail.diffs
    assert detail.row.state is State.APPLIED and "+new\n" in diff.text and diff.note is None
    assert "applied" in [e["event"] for e in detail.timeline]


def test_a_bad_config_becomes_an_error_of_the_detail(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"new\n"}, signer)
    set_config(repo, "[policy]\nbogus = 1\n")
    detail = job_detail(repo, job.key)
    assert detail.errors == [f"{repo.config}: policy.bogus: unknown setting"]
    assert detail.verification is None and detail.diffs == []


def test_the_newest_log_is_its_tail(repo: Layout) -> None:
    job = mint(repo)
    logs = repo.log_dir(job.key)
    logs.mkdir(parents=True)
    (logs / "attempt-1.log").write_text("first run\n")
    assert job_detail(repo, job.key).log_tail == "first run\n"


def test_to_dict_is_json_with_every_part(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"new\n"}, signer)
    out = json.loads(json.dumps(job_detail(repo, job.key).to_dict()))
    assert out["key"] == job.key and out["state"] == "RECEIVED"
    assert out["document"]["digest"] == job.digest
    assert out["diffs"][0]["path"] == "src/app.py" and out["diffs"][0]["signed"] is True
    assert out["verification"]["ok"] is True
    for name in [
        "lease",
        "attempt_records",
        "timeline",
        "log_tail",
        "errors",
        "checks",
        "candidates",
        "chosen",
    ]:
        assert name in out
