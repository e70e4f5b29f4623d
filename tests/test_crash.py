"""SIGKILL before every filesystem mutation of mint, claim, requeue, receipt, reject and apply.

After each kill: no job is lost (every key is in a state folder, and a key in two is an
INCONSISTENT pair with its rule); `recover` leaves every key in exactly one folder, with no
temp files; running the operation again finishes it; apply leaves every target whole and,
after recover, the tree untouched or fully applied.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from corekit import FILES, dead_pid, receive, sha, stage_outputs, tree_files, write_jobs
from crashkit import every_crash
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.model.lifecycle import State
from core.model.models import job_bytes
from core.plan.mint import build_job
from core.read.snapshot import take_snapshot
from core.review.apply_job import apply_job
from core.review.recover import recover
from core.review.verify import verify
from core.store.config import load_config
from core.store.layout import Layout
from core.store.queue import Claimer, claim, enqueue, locate, reject, requeue
from core.store.receipts import commit_receipt, load_receipt, make_receipt

FOLDERS = ("queue", "running", "applied", "rejected")
NEW_FILES = {"src/app.py": b"def main():\n    return 2\n", "src/pkg/mod.py": b"VALUE = 1\n"}


def folders(layout: Layout, key: str) -> list[str]:
    return [f for f in FOLDERS if layout.job_file(f, key).exists()]


def temp_files(root: Path) -> list[str]:
    found = []
    for dirpath, _, names in os.walk(root):
        found += [os.path.join(dirpath, n) for n in names if n.startswith(".tmp-") or ".genjob-" in n]
    return found


def not_lost(layout: Layout, keys: list[str]) -> None:
    """Before recovery: every key somewhere, and a key in two folders shown with its rule."""
    rows = take_snapshot(layout, disk_cache=False).rows
    for key in keys:
        where = folders(layout, key)
        assert where, f"{key} was lost"
        if len(where) > 1:
            assert rows[key].state is State.INCONSISTENT
            assert any(p[:2] in ("R2", "R3", "R4") for p in rows[key].problems), rows[key].problems


def recovered(layout: Layout, keys: list[str]) -> dict[str, State]:
    """Run recover; then every key is in exactly one folder and nothing is left half-written."""
    recover(layout)
    for key in keys:
        assert len(folders(layout, key)) == 1, (key, folders(layout, key))
    assert temp_files(layout.gen) == []
    rows = take_snapshot(layout, disk_cache=False).rows
    states = {k: rows[k].state for k in keys}
    assert not {State.INCONSISTENT, State.INVALID} & set(states.values()), states
    return states


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return tmp_path / "work"


def test_mint_killed_anywhere(repo: Layout, work: Path) -> None:
    others = write_jobs(repo, 2)
    job = build_job(repo, "Minted under fire.", ["src/app.py", "src/util.py"])
    runs = 0
    for root, killed in every_crash(repo.root, work, lambda r: enqueue(Layout(r), job)):
        runs += 1
        layout = Layout(root)
        path = layout.job_file("queue", job.key)
        if path.exists():
            assert path.read_bytes() == job_bytes(job)
        not_lost(layout, others)
        states = recovered(layout, [*others, *([job.key] if path.exists() else [])])
        assert killed or states[job.key] is State.QUEUED
        again = enqueue(layout, job)
        assert again.created == (job.key not in states)
        assert folders(layout, job.key) == ["queue"]
    assert runs >= 3


def test_claim_killed_anywhere(repo: Layout, work: Path) -> None:
    keys = write_jobs(repo, 3)
    target = keys[1]
    original = (repo.queue / f"{target}.json").read_bytes()
    runs = 0
    for root, killed in every_crash(repo.root, work, lambda r: Claimer(Layout(r), "w1").claim(target)):
        runs += 1
        layout = Layout(root)
        [where] = folders(layout, target)
        assert layout.job_file(where, target).read_bytes() == original
        not_lost(layout, keys)
        states = recovered(layout, keys)
        assert states[target] in (State.QUEUED, State.RUNNING, State.ORPHANED)
        if where == "running":
            requeue(layout, target, force=True)
        assert claim(layout, "w2", target).job.digest == locate(layout, target).job.digest
        assert not killed or where in ("queue", "running")
    assert runs >= 3


def test_requeue_killed_anywhere(repo: Layout, work: Path) -> None:
    keys = write_jobs(repo, 2)
    target = keys[0]
    original = (repo.queue / f"{target}.json").read_bytes()
    claim(repo, "w1", target, pid=dead_pid())
    runs = 0
    for root, _ in every_crash(repo.root, work, lambda r: requeue(Layout(r), target)):
        runs += 1
        layout = Layout(root)
        [where] = folders(layout, target)
        assert layout.job_file(where, target).read_bytes() == original
        not_lost(layout, keys)
        states = recovered(layout, keys)
        if where == "running":
            assert states[target] is State.ORPHANED
            requeue(layout, target)
        assert folders(layout, target) == ["queue"]
        assert not layout.lease(target).exists()
        assert claim(layout, "w2", target).lease.token == 2
    assert runs >= 3


def test_receipt_killed_anywhere(repo: Layout, work: Path, signer: Ed25519PrivateKey) -> None:
    job = build_job(repo, "Receipt under fire.", ["src/app.py"])
    enqueue(repo, job)
    c = claim(repo, "w1", job.key)
    outputs = {"src/app.py": NEW_FILES["src/app.py"]}
    staged_name = stage_outputs(repo, outputs).name
    rec = make_receipt(job, "ok", {p: sha(b) for p, b in outputs.items()}, "w1")

    def commit(root: Path) -> object:
        layout = Layout(root)
        return commit_receipt(layout, job, rec, c.lease.token, "w1", layout.out / staged_name, signer)

    runs = 0
    for root, _ in every_crash(repo.root, work, commit):
        runs += 1
        layout = Layout(root)
        has_receipt = layout.receipt(job.key).exists()
        if has_receipt:
            assert load_receipt(layout, job.key) == rec
            assert verify(layout, job, load_config(layout.config)).ok, "a receipt appears only when whole"
        states = recovered(layout, [job.key])
        assert states[job.key] is (State.RECEIVED if has_receipt else State.RUNNING)
        if not has_receipt:
            requeue(layout, job.key, force=True)
            assert receive(layout, job.key, outputs, signer).won
        assert verify(layout, job, load_config(layout.config)).ok
    assert runs >= 5


def test_reject_killed_anywhere(repo: Layout, work: Path, signer: Ed25519PrivateKey) -> None:
    job = build_job(repo, "Rejected under fire.", ["src/app.py"])
    enqueue(repo, job)
    receive(repo, job.key, {"src/app.py": b"x"}, signer)
    runs = 0
    for root, _ in every_crash(repo.root, work, lambda r: reject(Layout(r), job.key, "no")):
        runs += 1
        layout = Layout(root)
        not_lost(layout, [job.key])
        states = recovered(layout, [job.key])
        if states[job.key] is State.RECEIVED:
            reject(layout, job.key, "no")
        assert folders(layout, job.key) == ["rejected"]
        assert layout.receipt(job.key).exists()
    assert runs >= 3


def test_apply_killed_anywhere(repo: Layout, work: Path, signer: Ed25519PrivateKey) -> None:
    job = build_job(repo, "Applied under fire.", ["src/app.py", "src/util.py"], ["src/pkg/mod.py"])
    enqueue(repo, job)
    receive(repo, job.key, NEW_FILES, signer)
    bystander = write_jobs(repo, 1)
    old_tree = tree_files(repo.root)
    new_tree = {**old_tree, **NEW_FILES}
    runs = 0
    for root, killed in every_crash(repo.root, work, lambda r: apply_job(Layout(r), job.key)):
        runs += 1
        layout = Layout(root)
        now = {p: b for p, b in tree_files(root).items() if ".genjob-" not in p}
        for rel in [*old_tree, *NEW_FILES]:
            assert now.get(rel) in (old_tree.get(rel), new_tree.get(rel)), f"{rel} is torn"
        not_lost(layout, [job.key, *bystander])
        states = recovered(layout, [job.key, *bystander])
        after = tree_files(root)
        assert after in (old_tree, new_tree), "the tree is neither untouched nor fully applied"
        assert states[job.key] is (State.APPLIED if after == new_tree else State.RECEIVED)
        assert killed or after == new_tree
        assert not apply_job(layout, job.key).already or after == new_tree
        assert tree_files(root) == new_tree
        assert apply_job(layout, job.key).already
        assert folders(layout, job.key) == ["applied"]
        assert os.listdir(layout.journal) == []
    assert runs >= 10
    assert FILES["src/util.py"] == new_tree["src/util.py"]
