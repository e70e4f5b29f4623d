"""The apply plane: verified, all-or-nothing, idempotent, and finished after a crash."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from corekit import FILES, git, mint, receive, sha, tree_files, tree_state
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import ApplyConflict, BadInput, Stale, VerificationFailed, WrongState
from core.model.canonical import canonical
from core.model.lifecycle import State
from core.model.models import Job
from core.plan.replay import replay
from core.read.snapshot import take_snapshot
from core.review.apply_job import apply_job
from core.store.layout import Layout
from core.store.queue import locate, reject

NEW_APP = b"def main():\n    return 2\n"
NEW_MOD = b"VALUE = 3\n"


@pytest.fixture
def received(repo: Layout, signer: Ed25519PrivateKey) -> Job:
    job = mint(repo, "Return two.", paths=["src/app.py", "src/util.py"], new=["src/pkg/mod.py"])
    outputs = {"src/app.py": NEW_APP, "src/util.py": FILES["src/util.py"], "src/pkg/mod.py": NEW_MOD}
    assert receive(repo, job.key, outputs, signer).won
    return job


def open_journal(layout: Layout, job: Job) -> dict[str, object]:
    """The journal apply writes before touching the tree, as a crash would leave it."""
    targets = [
        {"path": "src/app.py", "before": sha(FILES["src/app.py"]), "after": sha(NEW_APP)},
        {"path": "src/pkg/mod.py", "before": None, "after": sha(NEW_MOD)},
        {"path": "src/util.py", "before": sha(FILES["src/util.py"]), "after": sha(FILES["src/util.py"])},
    ]
    journal = {
        "key": job.key,
        "digest": job.digest,
        "targets": targets,
        "started_at": 0.0,
        "by": "tests",
        "signer": None,
        "signature_required": True,
    }
    layout.journal_file(job.key).write_bytes(canonical(journal))
    return journal


def test_apply_writes_every_output_and_records_it(repo: Layout, received: Job) -> None:
    res = apply_job(repo, received.key)
    assert not res.already
    assert sorted(res.changed) == ["src/app.py", "src/pkg/mod.py"]
    assert (repo.root / "src/app.py").read_bytes() == NEW_APP
    assert (repo.root / "src/pkg/mod.py").read_bytes() == NEW_MOD
    loc = locate(repo, received.key)
    assert loc.folder == "applied" and loc.also_in == ()
    assert loc.record is not None
    record = loc.record["apply"]
    assert res.verification is not None and record["signer"] == res.verification.signer
    assert {t["path"]: (t["before"], t["after"]) for t in record["targets"]}["src/pkg/mod.py"] == (
        None,
        sha(NEW_MOD),
    )
    assert not repo.lease(received.key).exists()
    assert os.listdir(repo.journal) == []
    assert not [p for p in tree_files(repo.root) if ".genjob-" in p]


def test_apply_twice_is_a_no_op(repo: Layout, received: Job) -> None:
    apply_job(repo, received.key)
    before = tree_state(repo.root)
    again = apply_job(repo, received.key)
    assert again.already and again.changed == []
    after = tree_state(repo.root)
    assert after == before


def test_a_failed_verification_changes_nothing(repo: Layout, received: Job) -> None:
    (repo.out_dir(received.digest) / "src/app.py").write_bytes(b"tampered\n")
    before = tree_state(repo.root)
    with pytest.raises(VerificationFailed) as err:
        apply_job(repo, received.key)
    assert err.value.exit_code == 2
    assert str(err.value).startswith(f"{repo.receipt(received.key)}: does not verify; hashes: artifact drift")
    assert tree_state(repo.root) == before


def test_a_stale_base_is_refused_and_the_job_can_be_replayed(repo: Layout, received: Job) -> None:
    (repo.root / "src/util.py").write_text("changed meanwhile\n")
    before = tree_files(repo.root)
    with pytest.raises(Stale, match=r"src/util\.py: changed since the job was minted") as err:
        apply_job(repo, received.key)
    assert f"genjob replay {received.key}" in str(err.value)
    assert tree_files(repo.root) == before
    assert os.listdir(repo.journal) == []
    assert take_snapshot(repo, disk_cache=False).rows[received.key].state is State.STALE
    assert replay(repo, received.key).created


def test_only_a_job_with_a_receipt_can_be_applied(repo: Layout) -> None:
    job = mint(repo)
    with pytest.raises(WrongState, match="is QUEUED; only a job with a receipt can be applied"):
        apply_job(repo, job.key)


def test_apply_keeps_the_targets_mode(repo: Layout, signer: Ed25519PrivateKey) -> None:
    os.chmod(repo.root / "src/app.py", 0o755)
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": NEW_APP}, signer)
    apply_job(repo, job.key)
    assert stat.S_IMODE(os.stat(repo.root / "src/app.py").st_mode) == 0o755


def test_an_interrupted_apply_is_rolled_forward(repo: Layout, received: Job) -> None:
    open_journal(repo, received)
    (repo.root / "src/app.py").write_bytes(NEW_APP)
    (repo.root / "src" / ".app.py.genjob-leftover.tmp").write_bytes(b"half")
    res = apply_job(repo, received.key)
    assert sorted(res.changed) == ["src/app.py", "src/pkg/mod.py"]
    assert (repo.root / "src/pkg/mod.py").read_bytes() == NEW_MOD
    assert locate(repo, received.key).folder == "applied"
    assert not repo.journal_file(received.key).exists()


def test_an_interrupted_apply_rolls_back_when_a_target_changed_under_it(repo: Layout, received: Job) -> None:
    open_journal(repo, received)
    (repo.root / "src/app.py").write_bytes(b"a third version\n")
    before = tree_files(repo.root)
    with pytest.raises(ApplyConflict, match=r"src/app\.py: changed \(.*\) during the apply") as err:
        apply_job(repo, received.key)
    assert f"genjob replay {received.key}" in str(err.value)
    assert tree_files(repo.root) == before
    assert os.listdir(repo.journal) == []
    assert take_snapshot(repo, disk_cache=False).rows[received.key].state is State.STALE


def test_a_journal_left_after_the_apply_record_is_closed(repo: Layout, received: Job) -> None:
    apply_job(repo, received.key)
    journal = open_journal(repo, received)
    running_copy = locate(repo, received.key).job
    (repo.running / f"{received.key}.json").write_bytes(json.dumps(running_copy.document()).encode())
    res = apply_job(repo, received.key)
    assert res.already
    assert not repo.journal_file(received.key).exists()
    assert not (repo.running / f"{received.key}.json").exists()
    assert journal["key"] == received.key


def test_reject_waits_for_an_interrupted_apply(repo: Layout, received: Job) -> None:
    open_journal(repo, received)
    with pytest.raises(WrongState, match="an apply was interrupted"):
        reject(repo, received.key, "no")
    assert locate(repo, received.key).folder == "running"


def test_a_symlinked_parent_appearing_mid_apply_is_refused(
    repo: Layout, received: Job, tmp_path: Path
) -> None:
    open_journal(repo, received)
    outside = tmp_path / "outside"
    shutil.copytree(repo.root / "src", outside)
    shutil.rmtree(repo.root / "src")
    (repo.root / "src").symlink_to(outside)
    with pytest.raises(BadInput, match="src is a symlink, not a folder"):
        apply_job(repo, received.key)
    assert (outside / "app.py").read_bytes() == FILES["src/app.py"]
    assert not (outside / "pkg").exists()


def test_apply_commit_has_a_genjob_key_trailer(repo: Layout, received: Job) -> None:
    res = apply_job(repo, received.key, commit=True)
    assert res.commit is not None
    message = git(repo.root, "log", "-1", "--format=%B")
    assert message.startswith("Return two.\n")
    assert f"Genjob-Key: {received.key}" in message
    assert (
        git(repo.root, "log", "-1", "--format=%(trailers:key=Genjob-Key,valueonly)").strip() == received.key
    )
    files = git(repo.root, "show", "--name-only", "--format=", "HEAD").split()
    assert sorted(files) == ["src/app.py", "src/pkg/mod.py"]
    assert git(repo.root, "status", "--porcelain").strip() == ""
