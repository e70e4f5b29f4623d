"""Shared fixtures: every test gets its own user config folder and, on request, a repository."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, settings

from core.store.layout import Layout

pytest_plugins = ["ssh_servers", "slurmkit"]

# Property tests judge what the code does, never how fast a shared machine ran it:
# no per-example deadline and no health check that times data generation.
settings.register_profile("genjob", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("genjob")


@pytest.fixture(autouse=True)
def private_config(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point XDG_CONFIG_HOME at a fresh folder so no test reads or writes the user's keys."""
    cfg = tmp_path_factory.mktemp("xdg-config")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(cfg))
    return cfg


@pytest.fixture(autouse=True)
def collector_thawed() -> Iterator[None]:
    """What a test froze is thawed after it. The CLI, run in this process, freezes what it
    loaded for good, as a command's process should; left frozen, it would change how every
    later test collects (`gc.get_freeze_count` alone walks all that is frozen)."""
    yield
    gc.unfreeze()


@pytest.fixture
def repo(tmp_path: Path) -> Layout:
    """A git repository with a few files and an initialised `.gen/`."""
    from corekit import make_repo

    return make_repo(tmp_path / "repo")


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
