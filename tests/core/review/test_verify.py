"""Receipt verification: every check, and what makes each one fail."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from corekit import mint, receive, set_config, sha, write_receipt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.model.models import Job
from core.model.standing import FAILED, PASSED, SKIPPED
from core.review.verify import Verification, verify
from core.store.config import load_config
from core.store.layout import Layout

NEW = b"def main():\n    return 2\n"
STEPS = [
    "receipt",
    "schema",
    "key",
    "digest",
    "status",
    "paths",
    "present",
    "regular",
    "size",
    "hashes",
    "signature",
    "base",
]


@pytest.fixture
def received(repo: Layout, signer: Ed25519PrivateKey) -> Job:
    job = mint(repo, paths=["src/app.py", "src/util.py"], new=["src/new.py"])
    assert receive(repo, job.key, {"src/app.py": NEW, "src/new.py": b"x = 1\n"}, signer).won
    return job


def run(layout: Layout, job: Job) -> Verification:
    return verify(layout, job, load_config(layout.config))


def policy_off(layout: Layout) -> None:
    text = layout.config.read_text()
    set_config(layout, text.replace("require_signature = true", "require_signature = false"))


def statuses(v: Verification) -> dict[str, str]:
    return {c.name: c.status for c in v.checks}


def failed(v: Verification) -> dict[str, str]:
    return {c.name: c.detail for c in v.checks if c.status == FAILED}


def receipt_doc(job: Job, **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema": job.schema_name,
        "job_digest": job.digest,
        "idempotency_key": job.key,
        "status": "ok",
        "outputs": {"src/app.py": sha(NEW)},
        "worker_id": "w1",
    }
    doc.update(changes)
    return doc


def test_a_good_receipt_passes_every_check_in_order(repo: Layout, received: Job) -> None:
    v = run(repo, received)
    assert [c.name for c in v.checks] == STEPS
    assert all(c.status == PASSED for c in v.checks), failed(v)
    assert v.ok and v.signer is not None and v.signature_required
    assert v.to_dict()["ok"] is True


def test_no_receipt_yet(repo: Layout) -> None:
    job = mint(repo)
    v = run(repo, job)
    assert [c.name for c in v.checks] == STEPS
    assert statuses(v)["receipt"] == FAILED and "no receipt yet" in failed(v)["receipt"]
    assert {statuses(v)[s] for s in STEPS[1:-1]} == {SKIPPED}
    assert statuses(v)["base"] == PASSED
    assert not v.ok


def test_an_unparseable_receipt(repo: Layout, received: Job) -> None:
    repo.receipt(received.key).write_bytes(b'{"status": NaN}')
    v = run(repo, received)
    assert "NaN is not JSON" in failed(v)["receipt"]
    assert not v.ok


@pytest.mark.parametrize(
    ("changes", "check", "detail"),
    [
        ({"schema": "genjob.v1"}, "schema", "receipt genjob.v1, job genjob.v2"),
        ({"idempotency_key": "a" * 32}, "key", f"receipt is for {'a' * 32}"),
        ({"job_digest": "b" * 64}, "digest", "receipt names digest bbbbbbbbbbbbbbbb"),
        ({"status": "rejected"}, "status", "status is 'rejected'"),
        ({"outputs": {"../etc/passwd": sha(NEW)}}, "paths", "'..' is not allowed"),
        ({"outputs": {"/etc/passwd": sha(NEW)}}, "paths", "absolute path"),
        ({"outputs": {"README.md": sha(NEW)}}, "paths", "outside the job: README.md"),
        ({"outputs": {".git/config": sha(NEW)}}, "paths", "under .git/"),
        ({"outputs": {"src/util.py": sha(NEW)}}, "present", "missing or reached through a link: src/util.py"),
        ({"outputs": {"src/app.py": sha(b"other")}}, "hashes", "artifact drift at src/app.py"),
    ],
)
def test_a_receipt_that_does_not_match_fails_its_check(
    repo: Layout, received: Job, signer: Ed25519PrivateKey, changes: dict[str, Any], check: str, detail: str
) -> None:
    write_receipt(repo, received.key, receipt_doc(received, **changes), signer)
    v = run(repo, received)
    assert not v.ok
    assert list(failed(v)) == [check], failed(v)
    assert detail in failed(v)[check]


def test_drifted_output_bytes(repo: Layout, received: Job) -> None:
    (repo.out_dir(received.digest) / "src/app.py").write_bytes(b"tampered\n")
    v = run(repo, received)
    assert list(failed(v)) == ["hashes"]
    assert "artifact drift at src/app.py" in failed(v)["hashes"]


def test_an_output_replaced_by_a_symlink(repo: Layout, received: Job) -> None:
    out = repo.out_dir(received.digest) / "src/app.py"
    out.unlink()
    out.symlink_to(repo.root / "src/app.py")
    v = run(repo, received)
    assert list(failed(v)) == ["regular"]
    assert statuses(v)["size"] == SKIPPED and statuses(v)["hashes"] == SKIPPED


def test_an_output_behind_a_symlinked_folder(repo: Layout, received: Job, tmp_path: Path) -> None:
    out = repo.out_dir(received.digest)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(str(out / "src"), str(elsewhere))
    (out / "src").symlink_to(elsewhere)
    v = run(repo, received)
    assert list(failed(v)) == ["present"]
    assert "passes through the symlink" in failed(v)["present"]


def test_an_output_that_is_a_fifo_or_folder(repo: Layout, received: Job) -> None:
    out = repo.out_dir(received.digest) / "src/app.py"
    out.unlink()
    os.mkfifo(out)
    assert list(failed(run(repo, received))) == ["regular"]
    out.unlink()
    out.mkdir()
    assert list(failed(run(repo, received))) == ["regular"]


def test_over_size_outputs(repo: Layout, received: Job) -> None:
    text = repo.config.read_text().replace("max_file_bytes = 67108864", "max_file_bytes = 10")
    set_config(repo, text)
    v = run(repo, received)
    assert list(failed(v)) == ["size"]
    assert "over the limits: src/app.py" in failed(v)["size"]
    text = text.replace("max_file_bytes = 10", "max_file_bytes = 100").replace(
        "max_total_bytes = 536870912", "max_total_bytes = 20"
    )
    set_config(repo, text)
    assert "bytes in all" in failed(run(repo, received))["size"]
    set_config(
        repo,
        text.replace("max_total_bytes = 20", "max_total_bytes = 1000").replace(
            "max_files = 1000", "max_files = 1"
        ),
    )
    assert list(failed(run(repo, received))) == ["size"]


def test_an_unsigned_receipt_by_policy(repo: Layout, received: Job) -> None:
    repo.signature(received.key).unlink()
    v = run(repo, received)
    assert list(failed(v)) == ["signature"]
    assert "unsigned receipt; policy requires a trusted signature" in failed(v)["signature"]
    set_config(repo, repo.config.read_text().replace("require_signature = true", "require_signature = false"))
    v = run(repo, received)
    assert v.ok and not v.signature_required
    assert "not required by policy" in next(c.detail for c in v.checks if c.name == "signature")


def test_an_untrusted_or_forged_signature(repo: Layout, received: Job) -> None:
    rogue = Ed25519PrivateKey.generate()
    write_receipt(repo, received.key, receipt_doc(received, outputs={"src/app.py": sha(NEW)}), rogue)
    v = run(repo, received)
    assert "which is not a trusted key" in failed(v)["signature"]
    assert "genjob trust" in failed(v)["signature"]
    repo.signature(received.key).write_bytes(b"garbage")
    assert "malformed JSON" in failed(run(repo, received))["signature"]


def test_a_receipt_signed_then_edited(repo: Layout, received: Job) -> None:
    path = repo.receipt(received.key)
    path.write_bytes(path.read_bytes().replace(b'"worker_id":"w1"', b'"worker_id":"w9"'))
    v = run(repo, received)
    assert list(failed(v)) == ["signature"]
    assert "signature does not match the receipt" in failed(v)["signature"]


def test_a_signature_policy_off_still_reports_a_bad_signature(repo: Layout, received: Job) -> None:
    set_config(repo, repo.config.read_text().replace("require_signature = true", "require_signature = false"))
    repo.signature(received.key).write_bytes(b"garbage")
    v = run(repo, received)
    assert "policy does not require it" in failed(v)["signature"]
    assert not v.ok


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ("edit", "src/app.py: changed since the job was minted"),
        ("delete", "src/util.py: deleted since the job was minted"),
        ("create", "src/new.py: exists now, but the job creates it"),
        ("symlink", "src/app.py: is no longer a regular file"),
    ],
)
def test_a_drifted_base_is_stale_not_failed(repo: Layout, received: Job, change: str, detail: str) -> None:
    root = repo.root
    if change == "edit":
        (root / "src/app.py").write_text("edited meanwhile\n")
    elif change == "delete":
        (root / "src/util.py").unlink()
    elif change == "create":
        (root / "src/new.py").write_text("someone made it\n")
    else:
        (root / "src/app.py").unlink()
        (root / "src/app.py").symlink_to("util.py")
    v = run(repo, received)
    assert list(failed(v)) == ["base"]
    assert detail in failed(v)["base"]
    assert v.only_base_failed()


def test_a_symlinked_parent_in_the_tree_fails_the_base(repo: Layout, received: Job, tmp_path: Path) -> None:
    shutil.move(str(repo.root / "src"), str(tmp_path / "src"))
    (repo.root / "src").symlink_to(tmp_path / "src")
    v = run(repo, received)
    assert "passes through the symlink" in failed(v)["base"]
