"""The scratch tree: the repository as it is now with a receipt's outputs, never the user's tree."""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
from pathlib import Path

import pytest
from checkkit import CALC, CALC_BETTER, PROJECT, project, received, refuse_git
from corekit import git, sha, tree_files, tree_state
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import GenjobError, Stale, VerificationFailed
from core.model.models import Job, Receipt, receipt_from_bytes
from core.review import scratch
from core.review.scratch import Scratch, scratch_tree, sweep
from core.store.layout import Layout

LIMIT = 64 << 20


@pytest.fixture
def repo(tmp_path: Path) -> Layout:
    return project(tmp_path / "repo")


def receipt_of(layout: Layout, job: Job) -> Receipt:
    return receipt_from_bytes(layout.receipt(job.key).read_bytes(), "receipt")


def files_in(tree: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(tree)): p.read_bytes()
        for p in sorted(tree.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.mark.parametrize("mode", ["overlay", "copy"])
def test_it_holds_tracked_files_inputs_and_outputs_and_nothing_else(
    repo: Layout, signer: Ed25519PrivateKey, mode: str
) -> None:
    (repo.root / "untracked-secret.txt").write_text("not for checks\n")
    (repo.root / "notes").mkdir()
    (repo.root / "notes" / "draft.md").write_text("untracked\n")
    (repo.root / "new_input.py").write_bytes(b"X = 1\n")  # an input git does not know yet
    job = received(
        repo,
        signer,
        {"calc.py": CALC_BETTER, "new_input.py": b"X = 2\n", "extra.py": b"Y = 1\n"},
        paths=["calc.py", "new_input.py", "README.md"],
        new=["extra.py"],
    )
    before = tree_state(repo.root)
    with scratch_tree(repo, job, receipt_of(repo, job), mode, LIMIT) as made:  # type: ignore[arg-type]
        got = files_in(made.tree)
        assert got == {
            "calc.py": CALC_BETTER,
            "tests/test_calc.py": PROJECT["tests/test_calc.py"],
            "tests/conftest.py": PROJECT["tests/conftest.py"],
            "README.md": PROJECT["README.md"],
            "new_input.py": b"X = 2\n",
            "extra.py": b"Y = 1\n",
        }
        assert made.outputs == {
            "calc.py": sha(CALC_BETTER),
            "new_input.py": sha(b"X = 2\n"),
            "extra.py": sha(b"Y = 1\n"),
        }
        assert made.base == {
            "calc.py": sha(CALC),
            "new_input.py": sha(b"X = 1\n"),
            "extra.py": None,
            "README.md": sha(PROJECT["README.md"]),
        }
        inode = (
            os.stat(made.tree / "tests" / "test_calc.py").st_ino
            == os.stat(repo.root / "tests/test_calc.py").st_ino
        )
        assert inode == (mode == "overlay")
        # Inputs and outputs are always copies, never links to the user's files.
        assert os.stat(made.tree / "README.md").st_ino != os.stat(repo.root / "README.md").st_ino
        run_dir = made.run_dir
    assert not run_dir.exists()
    assert tree_state(repo.root) == before
    assert os.listdir(repo.scratch) == []


def test_outside_git_every_file_but_gen_and_git(
    tmp_path: Path, signer_outside: tuple[Layout, Ed25519PrivateKey]
) -> None:
    layout, key = signer_outside
    (layout.root / "lib").mkdir()
    (layout.root / "lib" / "a.txt").write_text("a\n")
    (layout.root / "link").symlink_to("lib")
    job = received(layout, key, {"main.py": b"print(2)\n"})
    with scratch_tree(layout, job, receipt_of(layout, job), "copy", LIMIT) as made:
        assert files_in(made.tree) == {"main.py": b"print(2)\n", "lib/a.txt": b"a\n"}
        assert os.readlink(made.tree / "link") == "lib"
        assert not (made.tree / ".gen").exists()


@pytest.fixture
def signer_outside(tmp_path: Path) -> tuple[Layout, Ed25519PrivateKey]:
    """A folder that is not a git repository, with genjob initialised and a pinned key."""
    from core.store.repo import init_repo
    from core.store.signing import keygen, load_private_key, trust_repository

    root = tmp_path / "plain"
    root.mkdir()
    (root / "main.py").write_text("print(1)\n")
    layout, _ = init_repo(root)
    trust_repository(layout, keygen())
    return layout, load_private_key()


def test_symlinks_and_modes_are_kept(repo: Layout, signer: Ed25519PrivateKey) -> None:
    script = repo.root / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    (repo.root / "calc_link.py").symlink_to("calc.py")
    git(repo.root, "add", "run.sh", "calc_link.py")
    git(repo.root, "commit", "-qm", "script")
    job = received(repo, signer, {"run.sh": b"#!/bin/sh\necho bye\n"})
    with scratch_tree(repo, job, receipt_of(repo, job), "copy", LIMIT) as made:
        assert stat.S_IMODE(os.stat(made.tree / "run.sh").st_mode) == 0o755
        assert os.readlink(made.tree / "calc_link.py") == "calc.py"
        assert subprocess.run([str(made.tree / "run.sh")], capture_output=True).stdout == b"bye\n"


def test_an_input_changed_since_mint_makes_it_stale_and_leaves_nothing(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    job = received(repo, signer, {"calc.py": CALC_BETTER}, paths=["calc.py", "README.md"])
    (repo.root / "README.md").write_text("# edited\n")
    tree = scratch_tree(repo, job, receipt_of(repo, job), "overlay", LIMIT)
    with pytest.raises(Stale, match=r"README\.md: changed since the job was minted"), tree:
        pass
    assert os.listdir(repo.scratch) == []


def test_an_output_changed_since_verification_fails_and_leaves_nothing(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    (repo.out_dir(job.digest) / "calc.py").write_bytes(b"import os\n")
    tree = scratch_tree(repo, job, receipt_of(repo, job), "overlay", LIMIT)
    with pytest.raises(VerificationFailed, match="not the bytes the receipt names"), tree:
        pass
    assert os.listdir(repo.scratch) == []


def test_it_is_removed_whatever_the_check_did_to_it(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    tree = scratch_tree(repo, job, receipt_of(repo, job), "copy", LIMIT)
    with pytest.raises(RuntimeError), tree as made:
        locked = made.tree / "tests"
        (locked / "deep" / "er").mkdir(parents=True)
        os.chmod(locked / "deep", 0)
        os.chmod(locked, 0o500)
        deep = made.tree
        for _ in range(1200):  # deeper than Python's recursion limit
            deep = deep / "d"
        os.makedirs(deep)
        raise RuntimeError("the check crashed")
    assert os.listdir(repo.scratch) == []
    assert tree_files(repo.root) == {k: v for k, v in PROJECT.items()}


def test_a_sweep_removes_dead_runs_and_keeps_live_ones(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    dead = repo.scratch / "123-dead"
    (dead / "tree").mkdir(parents=True)
    (repo.scratch / "123-dead.lock").write_bytes(b"")
    with scratch_tree(repo, job, receipt_of(repo, job), "overlay", LIMIT) as made:
        assert not dead.exists()
        assert sweep(repo) == []
        assert made.run_dir.exists()
    assert os.listdir(repo.scratch) == []


def test_a_sweep_holds_a_dead_runs_lock_while_it_removes_the_run(
    repo: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that opened its lock but has not locked it yet must not see its folder go:
    the sweep keeps the lock until the folder and the lock are gone, so the run waits and
    then takes another name."""
    repo.scratch.mkdir(exist_ok=True)
    (repo.scratch / "1-dead").mkdir()
    lock = repo.scratch / "1-dead.lock"
    lock.touch()
    held_during_removal = []

    def remove(path: Path) -> None:
        fd = os.open(lock, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held_during_removal.append(False)
        except BlockingIOError:
            held_during_removal.append(True)
        finally:
            os.close(fd)
        real_remove(path)

    real_remove = scratch.remove
    monkeypatch.setattr(scratch, "remove", remove)
    assert sweep(repo) == [repo.scratch / "1-dead"]
    assert held_during_removal == [True] and not lock.exists()


def test_the_scratch_is_cheap_hard_links_in_overlay_mode(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    with scratch_tree(repo, job, receipt_of(repo, job), "overlay", LIMIT) as made:
        assert isinstance(made, Scratch)
        assert made.linked == 3 and made.copied == 0
    with scratch_tree(repo, job, receipt_of(repo, job), "copy", LIMIT) as made:
        assert made.linked == 0 and made.copied == 3


@pytest.mark.parametrize("how", ["dubious", "broken"])
@pytest.mark.parametrize("mode", ["overlay", "copy"])
def test_when_git_cannot_list_the_tracked_files_no_tree_is_made_and_git_says_why(
    repo: Layout, signer: Ed25519PrivateKey, how: str, mode: str
) -> None:
    (repo.root / ".env").write_text("API_TOKEN=hunter2\n")  # untracked: no check may see it
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    refuse_git(repo.root, how)
    before = tree_state(repo.root)
    tree = scratch_tree(repo, job, receipt_of(repo, job), mode, LIMIT)  # type: ignore[arg-type]
    try:
        with tree as made:
            pytest.fail(f"a scratch tree was made of {sorted(files_in(made.tree))}")
    except GenjobError as exc:
        message = str(exc)
    assert message.startswith(f"{repo.root}: git ls-files failed, so which files git tracks is unknown; ")
    assert "the check did not run" in message
    if how == "dubious":
        assert "dubious ownership" in message
        assert f"git config --global --add safe.directory {repo.root}" in message
    else:
        assert "not a git repository: /nonexistent/repository.git" in message
    assert os.listdir(repo.scratch) == []
    assert tree_state(repo.root) == before
