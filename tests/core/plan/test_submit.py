"""The files a new job may name: git's view of the repository, or a walk outside git.

A repository's ignored files (`.env`) are never offered; when git cannot say which
files it ignores, nothing is offered and the message says why, in git's words.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from checkkit import refuse_git
from corekit import make_repo

from core.errors import GenjobError
from core.plan.submit import repo_files
from core.store.layout import Layout
from core.store.repo import init_repo


@pytest.fixture
def repo(tmp_path: Path) -> Layout:
    layout = make_repo(tmp_path / "repo", {"src/app.py": b"print(1)\n", ".gitignore": b".env\n"})
    (layout.root / ".env").write_text("API_TOKEN=hunter2\n")
    (layout.root / "notes.md").write_text("untracked, not ignored\n")
    return layout


def test_git_lists_tracked_and_untracked_files_but_not_ignored_ones(repo: Layout) -> None:
    assert repo_files(repo.root) == [".gitignore", "notes.md", "src/app.py"]


@pytest.mark.parametrize("how", ["dubious", "broken"])
def test_when_git_fails_nothing_is_listed_and_git_says_why(repo: Layout, how: str) -> None:
    refuse_git(repo.root, how)
    try:
        listed = repo_files(repo.root)
    except GenjobError as exc:
        message = str(exc)
    else:
        pytest.fail(f"listed {listed}")
    assert message.startswith(f"{repo.root}: git ls-files failed")
    assert "no file is listed" in message and ".env" in message
    if how == "dubious":
        assert f"git config --global --add safe.directory {repo.root}" in message


def test_outside_git_every_file_but_gen_is_listed(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print(1)\n")
    (root / ".env").write_text("no git here to ignore it\n")
    init_repo(root)
    assert repo_files(root) == [".env", "src/app.py"]
