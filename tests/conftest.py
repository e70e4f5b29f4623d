"""Shared fixtures: every test gets its own user config folder and, on request, a repository."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, settings

from core.store.layout import Layout

pytest_plugins = ["ssh_servers", "slurmkit", "dockerkit"]

# Property tests judge what the code does, never how fast a shared machine ran it:
# no per-example deadline and no health check that times data generation.
settings.register_profile("genjob", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("genjob")

# `-n auto` starts this many test processes for each CPU: much of a test's time is spent
# waiting (on sshd, bwrap, a generator process, a Slurm step, a lease holder, Chromium), and
# a second process per CPU runs while the first waits.
WORKERS_PER_CPU = 2


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """How many test processes `-n auto` starts; PYTEST_XDIST_AUTO_NUM_WORKERS, when set,
    decides instead (xdist's own reading of it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return WORKERS_PER_CPU * len(os.sched_getaffinity(0))


@pytest.fixture(autouse=True)
def private_config(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point XDG_CONFIG_HOME at a fresh folder so no test reads or writes the user's keys."""
    cfg = tmp_path_factory.mktemp("xdg-config")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(cfg))
    return cfg


@pytest.fixture(autouse=True)
def private_tmp(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the temp folder (TMPDIR, for the processes a test starts, and `tempfile`'s own
    choice, made once per process) at a fresh folder: what a test, or the code it runs, puts
    in the temp folder is its own, and no other test's or run's leftovers are seen there."""
    folder = tmp_path_factory.mktemp("tmp")
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture(scope="session")
def repo_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`corekit.make_repo`'s repository, made once per test process (under a config folder
    of its own) for `repo` to copy: one git command, not six, for each test that takes one."""
    from corekit import make_repo

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("template-xdg")))
        return make_repo(tmp_path_factory.mktemp("template") / "repo").root


@pytest.fixture
def repo(repo_template: Path, tmp_path: Path) -> Layout:
    """A git repository with a few files and an initialised `.gen/`: a copy of the
    template, whose config the operator allowed as `genjob init` allows the config it
    writes (a copy at another path is another repository to the operator)."""
    from corekit import git

    from core.store.config import read_repository_config, runs_digest
    from core.store.pins import pin_config

    root = tmp_path / "repo"
    shutil.copytree(repo_template, root, symlinks=True)
    # The copies' inodes and change times are new: git's index learns them now, as a
    # fresh repository's knows them, so that no later git command rewrites it.
    git(root, "update-index", "-q", "--refresh")
    layout = Layout(root.resolve())
    digest = runs_digest(read_repository_config(layout.config))
    assert digest is not None, "genjob's own config runs its hosts"
    pin_config(layout.root, digest)
    return layout


@pytest.fixture
def signer(repo: Layout) -> Ed25519PrivateKey:
    """This machine's worker key (made under the private config) and pinned in `repo`."""
    from core.store.signing import keygen, load_private_key, trust_repository

    pub = keygen()
    trust_repository(repo, pub)
    return load_private_key()


@pytest.fixture
def in_repo(repo: Layout, monkeypatch: pytest.MonkeyPatch) -> Layout:
    """`repo`, with the current folder set to its root (as a user at a shell would be)."""
    monkeypatch.chdir(repo.root)
    assert Path(os.getcwd()) == repo.root
    return repo
