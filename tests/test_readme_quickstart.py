"""The README's quick start block, run line by line as a new user pastes it.

Only the placeholders change: `/path/to/genjob` becomes this checkout, `your-repo` a
fresh git repository holding the two files the block names, and `<key>` the key that
`mint` printed. `uv tool install` runs for real, into folders of this test's own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from corekit import git

ROOT = Path(__file__).resolve().parents[1]


def quick_start_lines() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start on your own repository", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the quick start has a sh block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def outside_this_venv(path: str) -> list[str]:
    """PATH without this test run's virtual environment: `genjob` must come from the install."""
    return [p for p in path.split(os.pathsep) if p and not Path(p).resolve().is_relative_to(Path(sys.prefix))]


def test_the_quick_start_runs_as_written(tmp_path: Path) -> None:
    if shutil.which("uv") is None:
        pytest.skip("uv is not on this machine's PATH")
    home = tmp_path / "home"
    home.mkdir()
    repo = tmp_path / "your-repo"
    (repo / "src").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "src/user.py").write_text("def fetch_user(uid):\n    return {'id': uid}\n")
    (repo / "tests/test_user.py").write_text("from src.user import fetch_user\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit", "-q", "-m", "start")
    tool_bin = home / ".local/bin"
    # The machine's own settings (certificates, proxies, uv's cache) stay; the user's
    # config folder and this test run's virtual environment do not.
    inherited = {k: v for k, v in os.environ.items() if k not in ("XDG_CONFIG_HOME", "VIRTUAL_ENV")}
    env = {
        **inherited,
        "HOME": str(home),
        "PATH": os.pathsep.join([str(tool_bin), *outside_this_venv(os.environ["PATH"])]),
        "UV_TOOL_DIR": str(home / ".local/share/uv/tools"),
        "UV_TOOL_BIN_DIR": str(tool_bin),
        "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(Path.home() / ".cache/uv")),
        "GIT_AUTHOR_NAME": "genjob tests",
        "GIT_AUTHOR_EMAIL": "tests@genjob.invalid",
        "GIT_COMMITTER_NAME": "genjob tests",
        "GIT_COMMITTER_EMAIL": "tests@genjob.invalid",
        "LANG": "C.UTF-8",
    }
    cwd = tmp_path
    key = ""
    for line in quick_start_lines():
        command = line.split("  #")[0].strip()
        command = command.replace("/path/to/genjob", str(ROOT)).replace("<key>", key)
        if command.startswith("cd "):
            cwd = tmp_path / command[3:].strip()
            assert cwd.is_dir()
            continue
        proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, f"{line!r} failed:\n{proc.stdout}\n{proc.stderr}"
        if command.startswith("genjob mint"):
            key = proc.stdout.strip()
            assert re.fullmatch(r"[0-9a-f]{32}", key)
    assert key, "the quick start mints a job"
    log = git(repo, "log", "-1", "--format=%B")
    assert f"Genjob-Key: {key}" in log
    assert "genjob demo edit" in (repo / "src/user.py").read_text()
    assert (tool_bin / "genjob").exists()
