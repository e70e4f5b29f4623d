"""Merge instead of fight: a STALE receipt three-way merged over the tree, or refused whole."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from corekit import cli, git, receive, sha, tree_files, tree_state
from crashkit import every_crash
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import BadInput, Stale, VerificationFailed, WrongState
from core.model.canonical import canonical
from core.model.lifecycle import State
from core.plan.mint import build_job
from core.read.snapshot import take_snapshot
from core.review.apply_job import apply_job
from core.review.merge import MergeConflict, apply_merged
from core.review.recover import recover
from core.store.blobs import blobs_dir
from core.store.layout import Layout
from core.store.queue import enqueue, locate

LINES = b"".join(f"line {i}\n".encode() for i in range(1, 11))
TOP = LINES.replace(b"line 1\n", b"line one\n")
BOTTOM = LINES.replace(b"line 10\n", b"line ten\n")
BOTH = TOP.replace(b"line 10\n", b"line ten\n")
CLASH = LINES.replace(b"line 1\n", b"line uno\n")


@pytest.fixture
def lines(repo: Layout) -> Layout:
    (repo.root / "src/lines.py").write_bytes(LINES)
    git(repo.root, "add", "src/lines.py")
    git(repo.root, "commit", "-q", "-m", "lines")
    return repo


def job_over(layout: Layout, instruction: str, paths: list[str] | None = None) -> str:
    job = build_job(layout, instruction, paths or ["src/lines.py"])
    enqueue(layout, job)
    return job.key


def stale_pair(layout: Layout, signer: Ed25519PrivateKey, second: bytes = BOTTOM) -> tuple[str, str]:
    """Two jobs minted on the same file; the first applied, so the second's receipt is STALE."""
    first, other = job_over(layout, "Top."), job_over(layout, "Bottom.")
    assert receive(layout, first, {"src/lines.py": TOP}, signer).won
    assert receive(layout, other, {"src/lines.py": second}, signer).won
    apply_job(layout, first)
    return first, other


def state(layout: Layout, key: str) -> State:
    return take_snapshot(layout, disk_cache=False).rows[key].state


def test_a_stale_receipt_merges_clean_over_the_tree(lines: Layout, signer: Ed25519PrivateKey) -> None:
    _, other = stale_pair(lines, signer)
    assert state(lines, other) is State.STALE
    res = apply_merged(lines, other)
    assert res.changed == ["src/lines.py"]
    assert (lines.root / "src/lines.py").read_bytes() == BOTH
    record = json.loads(lines.job_file("applied", other).read_bytes())["apply"]
    assert record["merged"]["over"] == {"src/lines.py": sha(TOP)}
    assert record["merged"]["base"] == {"src/lines.py": sha(LINES)}
    assert record["merged"]["receipt"] == f"sha256:{sha(lines.receipt(other).read_bytes())}"
    assert record["merged"]["tool"].startswith("git merge-file")
    assert record["targets"] == [{"path": "src/lines.py", "before": sha(TOP), "after": sha(BOTH)}]
    assert not (lines.gen / "merges" / other).exists() and os.listdir(lines.journal) == []


def test_the_cli_merge_commits_with_a_merged_over_trailer(lines: Layout, signer: Ed25519PrivateKey) -> None:
    _, other = stale_pair(lines, signer)
    res = cli("apply", other, "--merge", "--commit", root=lines.root)
    assert res.exit_code == 0, res.stderr
    assert f"merged and applied {other}" in res.stdout
    message = git(lines.root, "log", "-1", "--format=%B")
    assert f"Genjob-Merged-Over: src/lines.py sha256:{sha(TOP)}" in message
    assert f"Genjob-Key: {other}" in message


def test_a_conflict_writes_nothing_and_names_its_hunks(lines: Layout, signer: Ed25519PrivateKey) -> None:
    _, other = stale_pair(lines, signer, second=CLASH)
    before = tree_state(lines.root)
    res = cli("apply", other, "--merge", root=lines.root)
    assert res.exit_code == 2
    assert "<<<<<<< tree" in res.stderr and "line one" in res.stderr and "line uno" in res.stderr
    assert f"genjob replay {other}" in res.stderr and "nothing was written" in res.stderr
    assert tree_state(lines.root) == before


def test_a_blob_that_does_not_hash_to_its_name_is_refused(lines: Layout, signer: Ed25519PrivateKey) -> None:
    _, other = stale_pair(lines, signer)
    blob = blobs_dir(lines) / sha(LINES)
    os.chmod(blob, 0o600)
    blob.write_bytes(b"line 1\nsomething else\n")
    before = tree_state(lines.root)
    with pytest.raises(BadInput, match=re.escape(f"{blob}: its bytes do not hash to its name")):
        apply_merged(lines, other)
    assert tree_state(lines.root) == before


def test_a_missing_blob_says_the_base_is_not_kept(lines: Layout, signer: Ed25519PrivateKey) -> None:
    _, other = stale_pair(lines, signer)
    (blobs_dir(lines) / sha(LINES)).unlink()
    before = tree_state(lines.root)
    with pytest.raises(Stale, match="are not kept"):
        apply_merged(lines, other)
    assert tree_state(lines.root) == before


def test_a_symlinked_blob_is_not_followed(lines: Layout, signer: Ed25519PrivateKey, tmp_path: Path) -> None:
    _, other = stale_pair(lines, signer)
    blob = blobs_dir(lines) / sha(LINES)
    (tmp_path / "real").write_bytes(LINES)
    blob.unlink()
    blob.symlink_to(tmp_path / "real")
    with pytest.raises(BadInput, match="symlink"):
        apply_merged(lines, other)


def test_blobs_are_owner_only(lines: Layout) -> None:
    job_over(lines, "Kept.")
    assert os.stat(blobs_dir(lines)).st_mode & 0o077 == 0
    assert os.stat(blobs_dir(lines) / sha(LINES)).st_mode & 0o077 == 0


def test_a_moved_input_the_receipt_does_not_write_refuses_the_merge(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    first = job_over(lines, "Util.", ["src/util.py"])
    other = job_over(lines, "Both.", ["src/lines.py", "src/util.py"])
    assert receive(lines, first, {"src/util.py": b"def helper(x):\n    return x * 3\n"}, signer).won
    assert receive(lines, other, {"src/lines.py": BOTTOM}, signer).won
    apply_job(lines, first)
    before = tree_state(lines.root)
    with pytest.raises(Stale, match=r"src/util\.py, which the job reads but its receipt does not write"):
        apply_merged(lines, other)
    assert tree_state(lines.root) == before


def test_a_file_deleted_in_the_tree_is_a_conflict(lines: Layout, signer: Ed25519PrivateKey) -> None:
    other = job_over(lines, "Bottom.")
    assert receive(lines, other, {"src/lines.py": BOTTOM}, signer).won
    (lines.root / "src/lines.py").unlink()
    with pytest.raises(MergeConflict, match=r"conflicts in src/lines\.py") as err:
        apply_merged(lines, other)
    assert "deleted in the tree" in err.value.hunks["src/lines.py"][0]
    assert not (lines.root / "src/lines.py").exists()


def test_a_fresh_receipt_is_applied_not_merged(lines: Layout, signer: Ed25519PrivateKey) -> None:
    other = job_over(lines, "Bottom.")
    assert receive(lines, other, {"src/lines.py": BOTTOM}, signer).won
    with pytest.raises(WrongState, match="is not STALE"):
        apply_merged(lines, other)


def test_a_merge_killed_anywhere_is_finished_or_rolled_back_by_recover(
    lines: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    _, other = stale_pair(lines, signer)
    ours, merged = tree_files(lines.root), {**tree_files(lines.root), "src/lines.py": BOTH}
    runs = 0
    work = tmp_path / "work"
    for root, killed in every_crash(lines.root, work, lambda r: apply_merged(Layout(r), other)):
        runs += 1
        layout = Layout(root)
        assert tree_files(root).get("src/lines.py") in (TOP, BOTH), "half-merged"
        recover(layout)
        after = tree_files(root)
        assert after in (ours, merged), "the tree is neither as it was nor merged"
        assert locate(layout, other).folder == ("applied" if after == merged else "running")
        assert os.listdir(layout.journal) == []
        assert not any(".genjob-" in p for p in after)
        if after == ours:
            apply_merged(layout, other)
        assert tree_files(root) == merged
        assert killed or runs > 1
    assert runs >= 8


def forge_journal(layout: Layout, key: str, before: bytes, after: bytes) -> None:
    journal = {
        "key": key,
        "digest": locate(layout, key).job.digest,
        "targets": [{"path": "src/lines.py", "before": sha(before), "after": sha(after)}],
        "started_at": 0.0,
        "by": "someone",
        "merge": {
            "over": {"src/lines.py": sha(before)},
            "base": {"src/lines.py": sha(LINES)},
            "receipt": "sha256:0",
            "tool": "git merge-file",
            "approved": "operator",
        },
    }
    layout.journal_file(key).write_bytes(canonical(journal))


def test_a_merge_journal_that_does_not_merge_again_writes_nothing(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    _, other = stale_pair(lines, signer)
    forge_journal(lines, other, TOP, b"anything at all\n")
    report = recover(lines)
    assert any("not anchored to the job" in line for line in report.left), report.lines
    assert (lines.root / "src/lines.py").read_bytes() == TOP
    assert not lines.journal_file(other).exists()  # set aside as evidence


def test_a_group_writable_merge_journal_is_not_read_and_stays_in_place(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    """The trust check comes before anything reads the journal, a merge's as an apply's."""
    _, other = stale_pair(lines, signer)
    forge_journal(lines, other, TOP, b"anything at all\n")
    path = lines.journal_file(other)
    os.chmod(path, 0o664)
    before = path.read_bytes()
    with pytest.raises(VerificationFailed, match=r"is writable by its group .*chmod go-w.*left in place"):
        apply_job(lines, other)
    assert path.read_bytes() == before and (lines.root / "src/lines.py").read_bytes() == TOP


def test_a_merge_journal_cannot_put_back_bytes_it_names_as_the_original(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    _, other = stale_pair(lines, signer)
    planted = b"planted by whoever wrote the journal\n"
    forge_journal(lines, other, planted, TOP)  # "the tree holds the merge; its original is this"
    (lines.journal / other).mkdir()
    (lines.journal / other / "0").write_bytes(planted)
    report = recover(lines)
    assert report.left, report.lines
    assert (lines.root / "src/lines.py").read_bytes() == TOP


def test_an_interrupted_merge_whose_key_is_no_longer_trusted_is_rolled_back(
    lines: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    _, other = stale_pair(lines, signer)
    work = tmp_path / "work"
    for root, killed in every_crash(lines.root, work, lambda r: apply_merged(Layout(r), other)):
        layout = Layout(root)
        if not killed:
            pytest.fail("no moment found with the merge written and its journal open")
        if (root / "src/lines.py").read_bytes() == BOTH and layout.journal_file(other).exists():
            break
    for pub in layout.trusted_keys.iterdir():
        pub.unlink()
    report = recover(layout)
    assert any("rolled back" in line for line in report.done), report.lines
    assert (root / "src/lines.py").read_bytes() == TOP
    assert locate(layout, other).folder == "running"


def test_a_binary_input_is_not_kept_and_its_merge_says_so(repo: Layout, signer: Ed25519PrivateKey) -> None:
    binary = b"\0\1\2" + LINES
    (repo.root / "data.bin").write_bytes(binary)
    job = build_job(repo, "Binary.", ["data.bin"])
    enqueue(repo, job)
    assert not (blobs_dir(repo) / sha(binary)).exists()
    assert receive(repo, job.key, {"data.bin": binary + b"x"}, signer).won
    (repo.root / "data.bin").write_bytes(binary + b"y")
    with pytest.raises(Stale, match="are not kept"):
        apply_merged(repo, job.key)
    assert (repo.root / "data.bin").read_bytes() == binary + b"y"


def test_a_symlinked_blobs_folder_is_refused_at_mint(repo: Layout, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    blobs_dir(repo).symlink_to(elsewhere)
    job = build_job(repo, "Kept where?", ["src/app.py"])
    with pytest.raises(BadInput, match=re.escape(str(blobs_dir(repo)))):
        enqueue(repo, job)
    assert os.listdir(elsewhere) == []
    assert not repo.job_file("queue", job.key).exists()
