"""Nothing genjob makes under `.gen/` is writable by the group or by others, whatever the
umask; and what another user could have written is refused, not applied.

Under umask 002 `.gen/candidates/<key>/<n>/`, its `out/` and `.gen/out/<digest>/` used to
be made 0775: a member of the group could swap candidates 1 and 2 after the operator
reviewed 1, and `apply --candidate 1` wrote candidate 2's bytes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from corekit import FILES, cli, mint, set_config, tree_files
from crashkit import first_crash_where
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import DEMO, host_block, script, write_config
from test_missing_folders import group_or_other_writable

from core.review.apply_job import apply_job
from core.review.candidates import choose
from core.store.candidate_store import OUT
from core.store.layout import Layout
from core.store.queue import locate
from core.store.signing import keygen, trust_repository


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def shipping(repo: Layout, monkeypatch: pytest.MonkeyPatch) -> Layout:
    """`repo` with this machine's worker key pinned, a local host running the demo
    generator, and one check; the current folder is its root."""
    trust_repository(repo, keygen())
    write_config(repo, host_block("here", None, DEMO))
    set_config(repo, repo.config.read_text() + '\n[checks.ok]\nrun = "true"\n')
    monkeypatch.chdir(repo.root)
    return repo


def genjob(*args: str) -> str:
    """`genjob ARGS` in this process; it must succeed. Its standard output."""
    res = cli(*args)
    assert res.exit_code == 0, (args, res.output)
    return res.stdout


def minted(*args: str) -> str:
    return genjob("mint", "-m", "Add a comment.", *args).strip()


def written(layout: Layout, paths: list[str], count: int) -> Callable[[Path], bool]:
    """Whether, in the copy at a root, exactly `count` of `paths` no longer hold their bytes."""

    def holds(root: Path) -> bool:
        now = tree_files(root)
        return sum(now.get(p) != FILES.get(p) for p in paths) == count

    return holds


@pytest.mark.parametrize("mask", [0o002, 0o000], ids=["umask-002", "umask-000"])
def test_nothing_genjob_makes_under_gen_is_writable_by_others(
    shipping: Layout, tmp_path: Path, mask: int
) -> None:
    gen = shipping.gen
    with umask(mask):
        one = minted("src/app.py", "--new", "src/pkg/new.py")
        genjob("ship", one, "--host", "here", "-q")
        genjob("check", one)
        genjob("apply", one)
        assert group_or_other_writable(gen) == []

        two = minted("docs/guide.md")
        genjob("ship", two, "--host", "here", "--candidates", "2", "-q")
        assert group_or_other_writable(gen) == []
        genjob("apply", two, "--candidate", "1")
        assert group_or_other_writable(gen) == []

        paths = ["src/util.py", "README.md"]
        three = minted(*paths)
        genjob("ship", three, "--host", "here", "-q")
        work = tmp_path / "killed"
        killed = first_crash_where(
            shipping.root, work, lambda r: apply_job(Layout(r), three), written(shipping, paths, 1)
        )
        assert group_or_other_writable(killed / ".gen") == []  # its journal and originals
        res = cli("--root", str(killed), "recover")
        assert res.exit_code == 0, res.output
        assert f"R1 {three}: finished the interrupted apply (2 file(s))" in res.stdout
        assert group_or_other_writable(killed / ".gen") == []
    assert group_or_other_writable(gen) == []


# --- the swap attack: candidates another user could have written ---------------------------


def two_candidates(layout: Layout, tmp: Path) -> tuple[str, str]:
    """A job shipped under umask 002 as two candidates of src/app.py, one "one" and one
    "two" (whichever runs first); its key and digest."""
    counter = tmp / "runs"
    code = (
        "import os\n"
        f"try:\n    os.close(os.open({str(counter)!r}, os.O_CREAT | os.O_EXCL | os.O_WRONLY))\n"
        "    text = 'one\\n'\n"
        "except FileExistsError:\n    text = 'two\\n'\n"
        "open('src/app.py', 'w').write(text)\n"
    )
    write_config(layout, host_block("here", None, script(tmp, "gen", code)))
    key = mint(layout, "Pick one.").key
    with umask(0o002):
        res = cli("ship", key, "--host", "here", "--candidates", "2", "-q", root=layout.root)
    assert res.exit_code == 0, res.output
    texts = {(layout.candidate(key, n) / OUT / "src/app.py").read_bytes() for n in (1, 2)}
    assert texts == {b"one\n", b"two\n"}
    return key, locate(layout, key).job.digest


def swap(a: Path, b: Path) -> None:
    """What a member of the group does to a folder it can write: trade two entries."""
    aside = a.with_name(f"{a.name}.swap")
    os.rename(a, aside)
    os.rename(b, a)
    os.rename(aside, b)


def swap_candidates(layout: Layout, key: str) -> None:
    swap(layout.candidate(key, 1), layout.candidate(key, 2))


def swap_inside_candidate(layout: Layout, key: str) -> None:
    one, two = layout.candidate(key, 1), layout.candidate(key, 2)
    for name in ("receipt.json", "receipt.sig", OUT):
        shutil.rmtree(one / name) if (one / name).is_dir() else (one / name).unlink()
        (shutil.copytree if (two / name).is_dir() else shutil.copy2)(two / name, one / name)


# (the folder made writable by others, how; the swap such a user then makes)
ATTACKS = {
    "group-writable-candidates-folder": ("candidates_of", 0o020, swap_candidates),
    "other-writable-candidates-folder": ("candidates_of", 0o002, swap_candidates),
    "group-writable-candidate": ("candidate", 0o020, swap_inside_candidate),
}


def writable(layout: Layout, key: str, which: str, bits: int) -> Path:
    path = layout.candidates_of(key) if which == "candidates_of" else layout.candidate(key, 1)
    os.chmod(path, os.stat(path).st_mode | bits)
    return path


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_candidate_swapped_after_review_is_refused(
    signer: Ed25519PrivateKey, repo: Layout, tmp_path: Path, attack: str
) -> None:
    key, digest = two_candidates(repo, tmp_path)
    which, bits, trade = ATTACKS[attack]
    opened = writable(repo, key, which, bits)
    reviewed = cli("candidates", key, "--diff", "1", root=repo.root)
    assert reviewed.exit_code == 0 and "+" in reviewed.stdout
    trade(repo, key)
    tree = tree_files(repo.root)
    res = cli("apply", key, "--candidate", "1", root=repo.root)
    assert res.exit_code == 2, res.output
    kind = "others" if bits == 0o002 else "its group"
    assert "candidate 1 does not verify (present: " in res.stderr
    assert f"{opened} is writable by {kind}" in res.stderr and f"fix with: chmod go-w {opened}" in res.stderr
    assert tree_files(repo.root) == tree, "nothing is written"
    assert not repo.receipt(key).exists() and not repo.out_dir(digest).exists(), "nothing is chosen"
    assert cli("verify", key, "--candidate", "1", root=repo.root).exit_code == 1


def test_a_candidate_owned_by_another_user_is_refused(
    signer: Ed25519PrivateKey, repo: Layout, tmp_path: Path
) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a folder to another user")
    key, _ = two_candidates(repo, tmp_path)
    folder = repo.candidate(key, 1)
    os.chown(folder, 54321, -1)
    swap_inside_candidate(repo, key)
    res = cli("apply", key, "--candidate", "1", root=repo.root)
    assert res.exit_code == 2
    assert f"{folder} is owned by uid 54321, not" in res.stderr and "fix with: chown " in res.stderr
    assert (repo.root / "src/app.py").read_bytes() == FILES["src/app.py"]
    assert not repo.receipt(key).exists()


def test_outputs_in_a_folder_another_user_could_write_are_not_applied(
    signer: Ed25519PrivateKey, repo: Layout, tmp_path: Path
) -> None:
    """The chosen receipt's `.gen/out/<digest>/` made writable by the group after the choice."""
    key, digest = two_candidates(repo, tmp_path)
    assert cli("verify", key, "--candidate", "2", root=repo.root).exit_code == 0
    choose(repo, key, 2)
    os.chmod(repo.out_dir(digest), 0o775)
    res = cli("apply", key, root=repo.root)
    assert res.exit_code == 2
    assert "present: another user could have replaced them" in res.stderr
    assert f"fix with: chmod go-w {repo.out_dir(digest)}" in res.stderr
    assert (repo.root / "src/app.py").read_bytes() == FILES["src/app.py"]
    os.chmod(repo.out_dir(digest), 0o755)
    assert cli("apply", key, root=repo.root).exit_code == 0
    assert (repo.root / "src/app.py").read_bytes() == (
        repo.candidate(key, 2) / OUT / "src/app.py"
    ).read_bytes()
