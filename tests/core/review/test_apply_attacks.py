"""Attacks on the apply plane, each made deterministic with a hook at the moment it matters.

A forged journal, a folder swapped for a symlink after it was checked, a source swapped
after verification, a user's edit landing while apply runs: each either is refused or
rolled back, and the bytes of the tree (and of everything outside it) are compared
before and after.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from corekit import FILES, git, mint, receive, sha, tree_files
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import core.review.apply
import core.review.apply_job
from core.errors import ApplyConflict, BadInput, DurabilityError, RolledBack, Stale, VerificationFailed
from core.model.canonical import canonical
from core.model.lifecycle import State
from core.model.models import Job
from core.plan.replay import replay
from core.read.snapshot import take_snapshot
from core.review.apply_job import apply_job
from core.review.recover import recover
from core.store.layout import Layout
from core.store.queue import claim, locate
from core.store.receipts import load_receipt

NEW_APP = b"def main():\n    return 2\n"
NEW_UTIL = b"def helper(x):\n    return x * 3\n"
NEW_MOD = b"VALUE = 3\n"


@pytest.fixture
def received(repo: Layout, signer: Ed25519PrivateKey) -> Job:
    job = mint(repo, "Three outputs.", paths=["src/app.py", "src/util.py"], new=["src/pkg/mod.py"])
    outputs = {"src/app.py": NEW_APP, "src/util.py": NEW_UTIL, "src/pkg/mod.py": NEW_MOD}
    assert receive(repo, job.key, outputs, signer).won
    return job


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "victim.txt").write_bytes(b"untouched\n")
    return folder


def state_of(layout: Layout, key: str) -> State:
    return take_snapshot(layout, disk_cache=False).rows[key].state


def files_under(folder: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _, names in os.walk(folder):
        for name in names:
            full = Path(dirpath) / name
            if not full.is_symlink():
                out[str(full.relative_to(folder))] = full.read_bytes()
    return out


def hook_once(monkeypatch: pytest.MonkeyPatch, name: str, action: Callable[[], None], call: int = 1) -> None:
    """Run `action` just before the `call`-th call of `core.review.apply.<name>`."""
    real = getattr(core.review.apply, name)
    seen = [0]

    def hooked(*args: Any, **kwargs: Any) -> Any:
        seen[0] += 1
        if seen[0] == call:
            action()
        return real(*args, **kwargs)

    monkeypatch.setattr(core.review.apply, name, hooked)


# --- 1. A journal is never trusted on its own -----------------------------------------


def forge_journal(layout: Layout, key: str, targets: list[dict[str, Any]], **extra: Any) -> Path:
    doc = {"key": key, "digest": "0" * 64, "targets": targets, "by": "mallory", **extra}
    layout.journal_file(key).write_bytes(canonical(doc))
    return layout.journal_file(key)


@pytest.mark.parametrize("folder", ["queue", "running"])
def test_a_journal_for_a_job_without_a_receipt_writes_nothing(
    repo: Layout, outside: Path, folder: str
) -> None:
    job = mint(repo, "No receipt ever.", ["src/app.py"])
    if folder == "running":
        claim(repo, "w1", job.key)
    (repo.out_dir(job.digest) / ".git/hooks").mkdir(parents=True)
    (repo.out_dir(job.digest) / ".git/hooks/pre-commit").write_bytes(b"#!/bin/sh\nrm -rf ~\n")
    evil = [
        {"path": "../outside/victim.txt", "before": sha(b"untouched\n"), "after": sha(b"pwned")},
        {"path": ".git/hooks/pre-commit", "before": None, "after": sha(b"#!/bin/sh\nrm -rf ~\n")},
    ]
    forge_journal(repo, job.key, evil, signer="SHA256:forged")
    tree, there = tree_files(repo.root), files_under(outside)
    hooks = sorted(os.listdir(repo.root / ".git/hooks"))
    with pytest.raises(VerificationFailed, match=r"refused: .*nothing was written") as err:
        apply_job(repo, job.key)
    assert "kept aside at .gen/logs/" in str(err.value)
    assert tree_files(repo.root) == tree and files_under(outside) == there
    assert sorted(os.listdir(repo.root / ".git/hooks")) == hooks
    assert not repo.journal_file(job.key).exists()
    assert any(n.startswith("journal-refused-") for n in os.listdir(repo.log_dir(job.key)))
    assert state_of(repo, job.key) is not State.APPLIED


def test_recover_sets_a_forged_journal_aside_and_goes_on(repo: Layout, received: Job, outside: Path) -> None:
    other = mint(repo, "Queued, never shipped.", ["README.md"])
    forge_journal(repo, other.key, [{"path": "../outside/victim.txt", "before": None, "after": sha(b"x")}])
    (repo.journal / "not-a-key.json").write_text("{}")
    report = recover(repo)
    assert any(
        line.startswith(f"R1 {other.key}: cannot finish: ") and "refused" in line for line in report.left
    )
    assert any("not named for a job key" in line for line in report.left)
    assert files_under(outside) == {"victim.txt": b"untouched\n"}
    assert not repo.journal_file(other.key).exists()
    assert locate(repo, received.key).folder == "running"  # the other job is untouched


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(
            lambda t: [*t, {"path": "docs/guide.md", "before": None, "after": sha(b"x")}], id="extra-path"
        ),
        pytest.param(lambda t: [{**t[0], "after": sha(b"other bytes")}, *t[1:]], id="other-after-hash"),
        pytest.param(lambda t: [{**t[0], "before": sha(b"old")}, *t[1:]], id="other-before-hash"),
        pytest.param(lambda t: t[1:], id="missing-target"),
    ],
)
def test_a_journal_that_does_not_match_the_verified_receipt_is_refused(
    repo: Layout, received: Job, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
) -> None:
    targets = [t.to_dict() for t in core.review.apply.plan(received, locate_receipt(repo, received))]
    forge_journal(repo, received.key, change(targets))
    tree = tree_files(repo.root)
    with pytest.raises(
        VerificationFailed,
        match=r"does not name exactly the outputs of the verified receipt|not the job's paths at",
    ):
        apply_job(repo, received.key)
    assert tree_files(repo.root) == tree
    assert state_of(repo, received.key) is State.RECEIVED


def test_a_journal_whose_receipt_no_longer_verifies_is_closed_and_nothing_written(
    repo: Layout, received: Job
) -> None:
    targets = [t.to_dict() for t in core.review.apply.plan(received, locate_receipt(repo, received))]
    forge_journal(repo, received.key, targets)
    for key_file in repo.trusted_keys.iterdir():
        key_file.unlink()
    tree = tree_files(repo.root)
    with pytest.raises(RolledBack, match=r"the receipt does not verify now \(signature: ") as err:
        apply_job(repo, received.key)
    assert "nothing of it had been written" in str(err.value)
    assert tree_files(repo.root) == tree
    assert os.listdir(repo.journal) == []


def test_the_apply_record_names_the_signer_that_verified_not_the_journal(repo: Layout, received: Job) -> None:
    targets = [t.to_dict() for t in core.review.apply.plan(received, locate_receipt(repo, received))]
    forge_journal(repo, received.key, targets, signer="SHA256:someone-else", signature_required=False)
    res = apply_job(repo, received.key)
    assert res.verification is not None
    record = locate(repo, received.key).record
    assert (
        record is not None and record["apply"]["signer"] == res.verification.signer != "SHA256:someone-else"
    )
    assert record["apply"]["signature_required"] is True


def test_a_group_writable_journal_is_not_trusted(repo: Layout, received: Job) -> None:
    targets = [t.to_dict() for t in core.review.apply.plan(received, locate_receipt(repo, received))]
    path = forge_journal(repo, received.key, targets)
    os.chmod(path, 0o664)
    tree = tree_files(repo.root)
    with pytest.raises(VerificationFailed, match=r"is writable by its group .*chmod go-w.*left in place"):
        apply_job(repo, received.key)
    assert tree_files(repo.root) == tree
    os.chmod(path, 0o644)  # what the message says to do: then the apply finishes
    assert apply_job(repo, received.key).changed


def locate_receipt(layout: Layout, job: Job) -> Any:
    return load_receipt(layout, job.key)


# --- 2. Tree writes cannot be redirected ------------------------------------------------


def test_a_parent_swapped_for_a_symlink_after_it_was_checked(
    repo: Layout, received: Job, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the last output is copied, `src/` becomes a link to a folder outside."""
    tree = tree_files(repo.root)

    def swap() -> None:
        shutil.move(repo.root / "src", outside / "moved-src")
        (repo.root / "src").symlink_to(outside)

    hook_once(monkeypatch, "copy_hashing", swap, call=3)
    with pytest.raises((ApplyConflict, BadInput)):
        apply_job(repo, received.key)
    assert NEW_APP not in files_under(outside).values() and NEW_MOD not in files_under(outside).values()
    assert files_under(outside)["victim.txt"] == b"untouched\n"
    (repo.root / "src").unlink()
    shutil.move(outside / "moved-src", repo.root / "src")
    assert tree_files(repo.root) == tree
    assert os.listdir(repo.journal) == []


def test_a_parent_swapped_between_staging_and_the_swap(
    repo: Layout, received: Job, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After every copy is staged, the folder is moved out and a link put in its place."""

    def swap() -> None:
        os.rename(repo.root / "src", outside / "moved-src")
        (repo.root / "src").symlink_to(outside / "moved-src")

    hook_once(monkeypatch, "_check_parent", swap)
    with pytest.raises(ApplyConflict, match="its folder was moved or replaced"):
        apply_job(repo, received.key)
    moved = files_under(outside / "moved-src")
    assert moved["app.py"] == FILES["src/app.py"] and moved["util.py"] == FILES["src/util.py"]
    assert not [n for n in moved if n.endswith(".tmp")]


@pytest.mark.parametrize("kind", ["fifo", "symlink", "other-bytes", "symlinked-folder"])
def test_a_source_swapped_after_verification(
    repo: Layout, received: Job, outside: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    out = repo.out_dir(received.digest)
    (outside / "evil.py").write_bytes(b"import os; os.system('id')\n")

    def swap() -> None:
        src = out / "src/util.py"
        if kind == "symlinked-folder":
            shutil.move(out / "src", outside / "src-copy")
            (out / "src").symlink_to(outside / "src-copy")
            (outside / "src-copy/util.py").write_bytes(b"evil\n")
            return
        src.unlink()
        if kind == "fifo":
            os.mkfifo(src)
        elif kind == "symlink":
            src.symlink_to(outside / "evil.py")
        else:
            src.write_bytes(b"not what was signed\n")

    real_verify = core.review.apply_job.verify

    def verify_then_swap(*args: Any, **kwargs: Any) -> Any:
        v = real_verify(*args, **kwargs)
        swap()
        return v

    monkeypatch.setattr(core.review.apply_job, "verify", verify_then_swap)
    tree = tree_files(repo.root)
    with pytest.raises((BadInput, VerificationFailed)) as err:
        apply_job(repo, received.key)
    assert f"out/{received.digest}/src" in str(err.value)
    assert tree_files(repo.root) == tree
    assert os.listdir(repo.journal) == []
    assert state_of(repo, received.key) in (State.RECEIVED, State.INVALID, State.FAILED)


@pytest.mark.parametrize("kind", ["symlink", "folder"])
def test_a_target_swapped_for_a_link_or_folder_is_never_written_through(
    repo: Layout, received: Job, outside: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    def swap() -> None:
        target = repo.root / "src/util.py"
        target.unlink()
        if kind == "symlink":
            target.symlink_to(outside / "victim.txt")
        else:
            target.mkdir()

    hook_once(monkeypatch, "_check_parent", swap, call=3)
    with pytest.raises(ApplyConflict, match=r"src/util\.py: no longer a regular file during the apply"):
        apply_job(repo, received.key)
    assert files_under(outside)["victim.txt"] == b"untouched\n"
    assert (repo.root / "src/app.py").read_bytes() == FILES["src/app.py"]
    target = repo.root / "src/util.py"
    assert target.is_symlink() if kind == "symlink" else target.is_dir()


# --- 3. A user's edit is never overwritten ------------------------------------------------


@pytest.mark.parametrize("atomic", [True, False], ids=["exchange", "link-and-rename"])
def test_an_edit_saved_while_a_sibling_is_staged_is_kept(
    repo: Layout, received: Job, monkeypatch: pytest.MonkeyPatch, atomic: bool
) -> None:
    if not atomic:
        monkeypatch.setattr(core.review.apply, "exchange", lambda *a: False)
    edit = b"def main():\n    return 'my edit'\n"
    hook_once(monkeypatch, "copy_hashing", lambda: (repo.root / "src/app.py").write_bytes(edit), call=3)
    with pytest.raises(ApplyConflict) as err:
        apply_job(repo, received.key)
    message = str(err.value)
    assert "src/app.py: changed" in message and "that version is kept" in message
    assert "Never written: src/app.py, src/pkg/mod.py, src/util.py" in message
    assert (repo.root / "src/app.py").read_bytes() == edit
    assert (repo.root / "src/util.py").read_bytes() == FILES["src/util.py"]
    assert not (repo.root / "src/pkg").exists()
    assert os.listdir(repo.journal) == []
    assert state_of(repo, received.key) is State.STALE
    assert replay(repo, received.key).created


def test_an_edit_midway_rolls_back_what_was_written(
    repo: Layout, received: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`src/app.py` is written; then the user saves `src/util.py`; app.py goes back."""
    edit = b"# the user's version\n"
    hook_once(monkeypatch, "_check_parent", lambda: (repo.root / "src/util.py").write_bytes(edit), call=3)
    with pytest.raises(ApplyConflict) as err:
        apply_job(repo, received.key)
    message = str(err.value)
    assert "Written, then rolled back: src/app.py, src/pkg/mod.py" in message
    assert "Never written: src/util.py" in message
    assert (repo.root / "src/app.py").read_bytes() == FILES["src/app.py"]
    assert (repo.root / "src/util.py").read_bytes() == edit
    assert not (repo.root / "src/pkg").exists()
    assert os.listdir(repo.journal) == []
    assert not [p for p in tree_files(repo.root) if ".genjob-" in p]


def test_a_new_file_is_created_only_if_still_absent(
    repo: Layout, received: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = b"# I made this file myself\n"

    def create() -> None:
        (repo.root / "src/pkg").mkdir(exist_ok=True)
        (repo.root / "src/pkg/mod.py").write_bytes(mine)

    hook_once(monkeypatch, "_check_parent", create, call=2)
    with pytest.raises(ApplyConflict, match=r"src/pkg/mod\.py: was created during the apply"):
        apply_job(repo, received.key)
    assert (repo.root / "src/pkg/mod.py").read_bytes() == mine
    assert (repo.root / "src/app.py").read_bytes() == FILES["src/app.py"]


def test_an_edit_after_verify_and_before_any_write_leaves_no_journal(
    repo: Layout, received: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_verify = core.review.apply_job.verify

    def verify_then_edit(*args: Any, **kwargs: Any) -> Any:
        v = real_verify(*args, **kwargs)
        (repo.root / "src/util.py").write_bytes(b"saved just now\n")
        return v

    monkeypatch.setattr(core.review.apply_job, "verify", verify_then_edit)
    with pytest.raises(Stale, match=f"genjob replay {received.key}"):
        apply_job(repo, received.key)
    assert os.listdir(repo.journal) == []
    assert (repo.root / "src/util.py").read_bytes() == b"saved just now\n"
    assert state_of(repo, received.key) is State.STALE


def test_a_killed_apply_whose_target_was_then_edited_is_rolled_back_by_recover(
    repo: Layout, received: Job
) -> None:
    """The journal and one written target, as a kill leaves them; then the user edits
    another target. `recover` puts the written one back and keeps the edit."""
    targets = core.review.apply.plan(received, locate_receipt(repo, received))
    forge_journal(repo, received.key, [t.to_dict() for t in targets])
    originals = repo.journal / received.key
    originals.mkdir()
    app = next(t for t in targets if t.path == "src/app.py")
    os.link(repo.root / "src/app.py", originals / str(app.index))
    (repo.root / "src/.tmp-written").write_bytes(NEW_APP)
    os.rename(repo.root / "src/.tmp-written", repo.root / "src/app.py")
    (repo.root / "src/util.py").write_bytes(b"edited after the crash\n")
    report = recover(repo)
    assert report.left == [], report.left
    assert (repo.root / "src/app.py").read_bytes() == FILES["src/app.py"]
    assert (repo.root / "src/util.py").read_bytes() == b"edited after the crash\n"
    assert state_of(repo, received.key) is State.STALE


# --- 5. git sees literal paths --------------------------------------------------------------


@pytest.mark.parametrize("name", ["src/*.py", ":(glob)**"])
def test_apply_commit_commits_only_the_literal_path(
    repo: Layout, signer: Ed25519PrivateKey, name: str
) -> None:
    (repo.root / name).parent.mkdir(parents=True, exist_ok=True)
    (repo.root / name).write_bytes(b"literal\n")
    git(repo.root, "add", "--", f":(literal){name}")
    git(repo.root, "commit", "-q", "-m", "a file with pathspec magic in its name")
    (repo.root / "src/app.py").write_bytes(b"# work in progress, not for this commit\n")
    (repo.root / "docs/guide.md").write_bytes(b"also in progress\n")
    job = mint(repo, "Touch the literal file.", [name])
    receive(repo, job.key, {name: b"changed by the job\n"}, signer)
    res = apply_job(repo, job.key, commit=True)
    assert res.commit is not None
    committed = git(repo.root, "show", "--name-only", "--format=", "HEAD").splitlines()
    assert committed == [name] or committed == [json.dumps(name)]
    status = git(repo.root, "status", "--porcelain")
    assert " M src/app.py" in status and " M docs/guide.md" in status


# --- 6. A fault right after a swap loses no original ------------------------------------------


@pytest.mark.parametrize("atomic", [True, False], ids=["exchange", "link-and-rename"])
def test_a_fault_just_after_a_swap_loses_no_original(
    repo: Layout, received: Job, monkeypatch: pytest.MonkeyPatch, atomic: bool
) -> None:
    """The last swap (src/util.py) is made, then moving what it displaced into
    `.gen/journal/` fails (an I/O error): the original goes back, and so does every other
    target; the apply says what failed, in one line."""
    if not atomic:
        monkeypatch.setattr(core.review.apply, "exchange", lambda *a: False)
    real = core.review.apply.rename_at
    last = ("2", "util.py")  # its original's name in the journal's folder, and in the tree

    def failing(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        if dst in last and src.endswith("-2.tmp"):
            raise OSError(errno.EIO, os.strerror(errno.EIO), dst)
        real(src_fd, src, dst_fd, dst)

    monkeypatch.setattr(core.review.apply, "rename_at", failing)
    tree = tree_files(repo.root)
    with pytest.raises(DurabilityError, match="input/output error"):
        apply_job(repo, received.key)
    assert tree_files(repo.root) == tree
    assert os.listdir(repo.journal) == []
    assert state_of(repo, received.key) is State.RECEIVED
