"""A check's `read_only` paths show what the config names, never what a link makes of it.

A repository's links are its data (it may arrive in a clone): a tracked `.venv` that
links to a folder of the operator's home must not show that folder to a check, nor may
a path climb out of the repository, show the repository itself, its `.git/` or `.gen/`.
And a path judged a moment before bwrap starts must not be swapped for a link in
between. Real repositories, real links, real bwrap.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from checkkit import CALC_BETTER, check, configure, project, received
from corekit import git, tree_state
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.model.models import Job
from core.review import sandbox
from core.review.sandbox import SandboxError
from core.store.check_records import read_record
from core.store.layout import Layout
from core.store.queue import locate

pytestmark = pytest.mark.skipif(sandbox.bwrap_problem() is not None, reason="bwrap cannot run here")

SECRET = "token-from-the-operators-home"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The operator's home, set as $HOME: an SSH key, and a folder of a tool's secrets."""
    folder = tmp_path / "home"
    (folder / ".ssh").mkdir(parents=True)
    (folder / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    (folder / "venvs" / "proj").mkdir(parents=True)
    (folder / "venvs" / "proj" / "token.txt").write_text(f"{SECRET}\n")
    monkeypatch.setenv("HOME", str(folder))
    return folder


@pytest.fixture
def repo(tmp_path: Path) -> Layout:
    return project(tmp_path / "repo")


def commit_link(repo: Layout, name: str, target: str | Path) -> None:
    """A symlink `name` -> `target`, tracked: it arrives with every clone."""
    link = repo.root / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    git(repo.root, "add", name)
    git(repo.root, "commit", "-qm", f"link {name}")


def user_files(layout: Layout) -> dict[str, str]:
    return {k: v for k, v in tree_state(layout.root).items() if not k.startswith(".gen")}


def refused(repo: Layout, job: Job) -> str:
    """Run the check, which must be refused before anything runs: its message, after
    making sure nothing was left behind (no record, no scratch tree, the tree and the
    job as they were)."""
    before = user_files(repo)
    try:
        [run] = check(repo, job.key)
    except SandboxError as exc:
        message = str(exc)
    else:
        pytest.fail(f"the check ran, and its output was: {run.finished.tail.decode()!r}")
    assert read_record(repo, job.key, "tests") is None
    assert os.listdir(repo.scratch) == []
    assert user_files(repo) == before
    assert locate(repo, job.key).folder == "running" and repo.receipt(job.key).exists()
    return message


def shows(repo: Layout, job: Job) -> str:
    [run] = check(repo, job.key)
    assert run.record is not None
    return run.record.tail


def test_a_tracked_link_into_the_home_is_refused_naming_where_it_leads(
    repo: Layout, signer: Ed25519PrivateKey, home: Path
) -> None:
    target = home / "venvs" / "proj"
    commit_link(repo, ".venv", target)
    configure(repo, {"tests": f'run = "cat .venv/token.txt {target}/token.txt"\nread_only = [".venv"]'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    message = refused(repo, job)
    assert message.startswith(f"{repo.config}: [checks.tests]: read-only path {repo.root / '.venv'}")
    assert f"goes through {repo.root / '.venv'}, a link to {target}: out of the repository." in message
    assert f'read_only = ["{target}"]' in message  # what to write instead


def test_a_link_in_the_middle_of_the_path_is_refused(
    repo: Layout, signer: Ed25519PrivateKey, home: Path
) -> None:
    commit_link(repo, "tools", home / "venvs")
    configure(repo, {"tests": 'run = "cat tools/proj/token.txt"\nread_only = ["tools/proj"]'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    message = refused(repo, job)
    assert (
        f"goes through {repo.root / 'tools'}, a link to {home / 'venvs'}: out of the repository, to"
        in message
    )
    assert f'read_only = ["{home / "venvs" / "proj"}"]' in message


def test_a_relative_link_that_climbs_out_is_refused(
    repo: Layout, signer: Ed25519PrivateKey, home: Path
) -> None:
    up = os.path.relpath(home / "venvs" / "proj", repo.root / "env")
    commit_link(repo, "env/py", up)
    configure(repo, {"tests": 'run = "cat env/py/token.txt"\nread_only = ["env/py"]'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    assert f"a link to {up}: out of the repository, to {home / 'venvs' / 'proj'}." in refused(repo, job)


def test_a_path_that_climbs_out_of_the_repository_is_refused(
    repo: Layout, signer: Ed25519PrivateKey, home: Path, tmp_path: Path
) -> None:
    (tmp_path / "beside").mkdir()
    (tmp_path / "beside" / "notes.txt").write_text("beside the repository\n")
    configure(repo, {"tests": 'run = "cat ../beside/notes.txt"\nread_only = ["../beside"]'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    assert "leads out of the repository" in refused(repo, job)


@pytest.mark.parametrize("named", [".", ".venv"])
def test_the_repository_itself_is_refused_named_or_linked(
    repo: Layout, signer: Ed25519PrivateKey, home: Path, named: str
) -> None:
    """Bound over the scratch tree, it would show the untracked `.env` and `.gen/`."""
    (repo.root / ".env").write_text("API_TOKEN=hunter2\n")
    commit_link(repo, ".venv", ".")
    configure(repo, {"tests": f'run = "cat {named}/.env"\nread_only = ["{named}"]'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    assert "is the repository itself" in refused(repo, job)


@pytest.mark.parametrize(("link", "hidden"), [(".git", ".git"), (".gen/trusted_keys", ".gen")])
def test_a_link_into_git_or_gen_is_refused(
    repo: Layout, signer: Ed25519PrivateKey, home: Path, link: str, hidden: str
) -> None:
    """`.git/config` may hold a remote's token; a check never sees either folder."""
    commit_link(repo, "meta", link)
    configure(repo, {"tests": 'run = "ls meta"\nread_only = ["meta"]'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    assert f"lies in the repository's {hidden}/" in refused(repo, job)


@pytest.mark.parametrize("absolute", [False, True])
def test_a_link_that_stays_in_the_repository_is_followed(
    repo: Layout, signer: Ed25519PrivateKey, home: Path, absolute: bool
) -> None:
    env = repo.root / "envs" / "py"
    env.mkdir(parents=True)
    (env / "marker.txt").write_text("the environment\n")  # untracked: only read_only shows it
    commit_link(repo, ".venv", env if absolute else "envs/py")
    configure(
        repo,
        {"tests": 'run = "cat .venv/marker.txt; touch .venv/x || echo read-only"\nread_only = [".venv"]'},
    )
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    tail = shows(repo, job)
    assert tail.startswith("the environment\n") and "read-only" in tail
    assert not (env / "x").exists()


def test_a_folder_swapped_for_a_link_after_it_was_judged_shows_the_folder_it_was(
    repo: Layout, signer: Ed25519PrivateKey, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The swap comes after genjob judged `.venv` and before bwrap binds it: bwrap binds
    the folder genjob opened, wherever it went, never what the name leads to now."""
    venv = repo.root / ".venv"
    venv.mkdir()
    (venv / "marker.txt").write_text("the folder that was judged\n")
    target = home / "venvs" / "proj"
    configure(repo, {"tests": 'run = "cat .venv/*"\nread_only = [".venv"]'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    start = sandbox.start

    async def swapped_then_started(how: sandbox.Launch, **kwargs: int) -> sandbox.Started:
        venv.rename(repo.root / ".venv-judged")
        venv.symlink_to(target)
        return await start(how, **kwargs)

    monkeypatch.setattr(sandbox, "start", swapped_then_started)
    tail = shows(repo, job)
    assert SECRET not in tail
    assert tail == "the folder that was judged\n"


def test_a_link_to_an_untracked_file_beside_it_is_refused(
    repo: Layout, signer: Ed25519PrivateKey, home: Path
) -> None:
    """`.venv` -> `.env` would show the untracked `.env` the check never gets."""
    (repo.root / ".env").write_text("API_TOKEN=hunter2\n")
    commit_link(repo, ".venv", ".env")
    configure(repo, {"tests": 'run = "cat .venv"\nread_only = [".venv"]'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    assert f"leads through a link to {repo.root / '.env'}, which is not a folder" in refused(repo, job)


def test_a_folder_of_the_repository_is_shown_beside_a_folder_that_holds_the_repository(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """The scratch tree is bound over the repository's place in the folder above it, so
    `.venv` is bound again on top rather than taken as shown through that folder."""
    (repo.root / ".venv").mkdir()
    (repo.root / ".venv" / "marker.txt").write_text("the environment\n")
    (tmp_path / "beside.txt").write_text("beside the repository\n")
    configure(
        repo,
        {"tests": f'run = "cat .venv/marker.txt {tmp_path}/beside.txt"\nread_only = ["{tmp_path}", ".venv"]'},
    )
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    assert shows(repo, job) == "the environment\nbeside the repository\n"
