"""core.read.preflight: what approve shows before apply, from the job's freshly read detail."""

from __future__ import annotations

import subprocess
from pathlib import Path

from corekit import mint, receive, set_config
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.read.inspect_job import job_detail
from core.read.preflight import preflight, receipt_verdict
from core.store.layout import Layout
from core.store.queue import Claimer, cancel_requested_at, request_cancel
from core.store.repo import init_repo, is_git_work_tree
from core.store.signing import fingerprint


def test_a_verified_receipt_in_a_git_repository(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"print('new')\n"}, signer)
    p = preflight(repo, job_detail(repo, job.key))
    assert p.verified and p.signature_ok and p.base_fresh and p.git
    assert p.commit_default is False
    assert [c.signed for c in p.changes] == [True]
    assert receipt_verdict(repo, job.key) is True


def test_the_config_sets_whether_approve_commits(repo: Layout, signer: Ed25519PrivateKey) -> None:
    set_config(repo, repo.config.read_text().replace("commit_on_approve = false", "commit_on_approve = true"))
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"x\n"}, signer)
    assert preflight(repo, job_detail(repo, job.key)).commit_default is True


def test_a_signature_by_an_unpinned_key_says_how_to_pin_it(repo: Layout, signer: Ed25519PrivateKey) -> None:
    stranger = Ed25519PrivateKey.generate()
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"x\n"}, stranger)
    p = preflight(repo, job_detail(repo, job.key))
    assert not p.verified and not p.signature_ok
    assert fingerprint(stranger.public_key()) in p.signature and "genjob trust" in p.signature
    assert receipt_verdict(repo, job.key) is False


def test_an_output_changed_after_signing_is_marked(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo, paths=("src/app.py", "README.md"))
    receive(repo, job.key, {"src/app.py": b"a\n", "README.md": b"b\n"}, signer)
    out = repo.out_dir(job.digest) / "src/app.py"
    out.write_bytes(b"not what was signed\n")
    detail = job_detail(repo, job.key)
    assert {d.path: d.signed for d in detail.diffs} == {"README.md": True, "src/app.py": False}
    assert {c.path: c.signed for c in preflight(repo, detail).changes} == {
        "README.md": True,
        "src/app.py": False,
    }


def test_a_repository_outside_git_cannot_commit(tmp_path: Path) -> None:
    layout, _ = init_repo(tmp_path / "plain")
    assert not is_git_work_tree(layout.root)
    subprocess.run(["git", "init", "-q", str(tmp_path / "git")], check=True)
    assert is_git_work_tree(tmp_path / "git")


def test_a_pending_cancel_is_dated_until_its_worker_honours_it(repo: Layout) -> None:
    job = mint(repo)
    assert cancel_requested_at(repo, job.key) is None
    Claimer(repo, "w", 30.0).claim(job.key)
    request_cancel(repo, job.key)
    at = cancel_requested_at(repo, job.key)
    assert at is not None
    assert job_detail(repo, job.key).cancel_requested_at == at
