"""Consent: a repository's config runs and lowers nothing until the operator allowed exactly that."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from corekit import cli, mint, receive, set_config

from core.errors import BadInput, GenjobError, Untrusted
from core.model.standing import CheckState
from core.remote.rules import DEFAULT_LIMITS
from core.review.check_status import ChecksRequired, check_statuses, require_checks
from core.review.consent import allow, consent
from core.review.verify import verify
from core.store.config import DEFAULT_CONFIG, load_config, read_repository_config, runs_digest
from core.store.layout import Layout, user_config_dir
from core.store.pins import pins_file, read_pins

CHECK = '\n[checks.tests]\nrun = "true"\n'


def write(layout: Layout, text: str) -> None:
    """Write the config as a pull or a clone would: nothing allowed."""
    layout.config.write_text(text)


def test_init_allows_the_config_it_writes(repo: Layout) -> None:
    config = load_config(repo.config)
    assert config.held is None and set(config.hosts) == {"local", "tidy"}
    assert read_pins(repo.root).config == runs_digest(read_repository_config(repo.config))


def test_a_new_host_or_check_is_held_back(repo: Layout) -> None:
    write(repo, DEFAULT_CONFIG + CHECK)
    config = load_config(repo.config)
    assert config.hosts == {} and config.checks == {}
    assert config.held is not None and config.held.changed and config.held.checks == ("tests",)
    assert "changed since you allowed it" in config.held.hint and "genjob allow" in config.held.hint


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("python3 -m core.remote.demo_generator", "python3 -m core.remote.demo_generator --evil"),
        (
            'transport = "local"\ngenerator = "python3 -m core.remote.demo_generator"',
            'transport = "local"\nnetwork = true\ngenerator = "python3 -m core.remote.demo_generator"',
        ),
        (
            'transport = "local"\ngenerator = "python3 -m core.remote.demo_generator"',
            'transport = "local"\nsandbox = "none"\ngenerator = "python3 -m core.remote.demo_generator"',
        ),
        ("require_signature = true", "require_signature = false"),
        ("max_file_bytes = 67108864", "max_file_bytes = 67108865"),
    ],
)
def test_each_change_to_what_runs_or_lowers_asks_again(repo: Layout, old: str, new: str) -> None:
    assert old in DEFAULT_CONFIG
    write(repo, DEFAULT_CONFIG.replace(old, new))
    assert load_config(repo.config).held is not None


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("timeout = 300", "timeout = 30"),
        ("concurrency = 2\n\n[hosts.tidy]", "concurrency = 5\n\n[hosts.tidy]"),
        ("lease_ttl = 120", "lease_ttl = 60"),
        ("max_file_bytes = 67108864", "max_file_bytes = 1024"),
        ("# genjob configuration.", "# a comment of my own\n# genjob configuration."),
    ],
)
def test_what_changes_neither_what_runs_nor_a_floor_does_not_ask(repo: Layout, old: str, new: str) -> None:
    assert old in DEFAULT_CONFIG
    write(repo, DEFAULT_CONFIG.replace(old, new))
    assert load_config(repo.config).held is None


def test_held_back_the_lowered_settings_are_at_the_defaults(repo: Layout) -> None:
    write(
        repo, "[policy]\nrequire_signature = false\n[limits]\nmax_file_bytes = 999999999999\nmax_files = 3\n"
    )
    config = load_config(repo.config)
    assert config.policy.require_signature is True
    assert config.limits.max_file_bytes == DEFAULT_LIMITS.max_file_bytes and config.limits.max_files == 3
    assert config.held is not None and config.held.hosts == ()
    assert set(config.held.lowers) == {"policy.require_signature", "limits.max_file_bytes"}
    allow(repo, consent(repo).digest or "")
    config = load_config(repo.config)
    assert config.held is None and config.policy.require_signature is False
    assert config.limits.max_file_bytes == 999999999999


def test_the_operators_floor_wins_over_an_allowed_config(repo: Layout) -> None:
    set_config(repo, "[policy]\nrequire_signature = false\n")
    assert load_config(repo.config).policy.require_signature is False
    (user_config_dir() / "config.toml").write_text("[policy]\nrequire_signature = true\n")
    assert load_config(repo.config).policy.require_signature is True


def test_a_required_check_held_back_stops_apply(repo: Layout, signer: object) -> None:
    set_config(
        repo, DEFAULT_CONFIG.replace('# require_checks = ["tests"]', 'require_checks = ["tests"]') + CHECK
    )
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"new\n"}, signer)  # type: ignore[arg-type]
    write(repo, repo.config.read_text().replace('run = "true"', 'run = "true; touch /tmp/x"'))
    config = load_config(repo.config)
    v = verify(repo, job, config)
    [status] = check_statuses(repo, job, config, v)
    assert status.required and status.state is CheckState.NOT_RUN and "genjob allow" in status.detail
    with pytest.raises(ChecksRequired, match="tests"):
        require_checks(repo, job, config, v)
    res = cli("apply", job.key, root=repo.root)
    assert res.exit_code != 0 and (repo.root / "src/app.py").read_bytes() != b"new\n"


def test_allow_pins_only_what_was_shown(repo: Layout) -> None:
    write(repo, DEFAULT_CONFIG + CHECK)
    shown = consent(repo).digest
    assert shown is not None
    write(repo, DEFAULT_CONFIG + CHECK.replace("true", "false"))
    with pytest.raises(GenjobError, match="changed while you read it"):
        allow(repo, shown)
    assert load_config(repo.config).held is not None


def test_allow_lists_what_runs_and_pins_it(repo: Layout) -> None:
    write(repo, DEFAULT_CONFIG + '\n[checks.lint]\nrun = "ruff check ."\nsandbox = "none"\n')
    shown = cli("allow", "--show", root=repo.root)
    assert shown.exit_code == 0
    assert "changed since you allowed it" in shown.stdout
    assert (
        "host local: on this machine" in shown.stdout
        and "generator: python3 -m core.remote.demo_generator" in shown.stdout
    )
    assert "check lint: UNSANDBOXED" in shown.stdout and "run: ruff check ." in shown.stdout
    assert load_config(repo.config).held is not None
    asked = cli("allow", root=repo.root, input="y\n")
    assert asked.exit_code == 2  # no terminal: it says to confirm with --yes
    assert cli("allow", "--yes", root=repo.root).exit_code == 0
    assert load_config(repo.config).held is None
    again = cli("allow", root=repo.root)
    assert again.exit_code == 0 and "(allowed)" in again.stdout


def test_a_config_that_runs_nothing_needs_no_allow(repo: Layout) -> None:
    write(repo, "[policy]\nlease_ttl = 60\n")
    assert load_config(repo.config).held is None
    res = cli("allow", root=repo.root)
    assert res.exit_code == 0 and "nothing to allow" in res.stdout


def test_pins_another_user_could_write_are_refused(repo: Layout) -> None:
    path = pins_file(repo.root)
    os.chmod(path, 0o666)
    with pytest.raises(Untrusted, match=r"chmod go-w"):
        load_config(repo.config)
    res = cli("ls", root=repo.root)
    assert str(path) in res.stderr


@pytest.mark.parametrize(
    "damage",
    [
        b"",
        b"{",
        b'{"schema":"genjob.pins.v1"}',
        b'{"schema":"genjob.pins.v1","root":"/x","config":null,"keys":[]}',
    ],
)
def test_damaged_or_moved_pins_are_refused_not_read_as_none(repo: Layout, damage: bytes) -> None:
    path = pins_file(repo.root)
    path.write_bytes(damage)
    with pytest.raises(BadInput, match=str(path)):
        load_config(repo.config)


def test_a_repository_moved_elsewhere_is_asked_about_again(repo: Layout, tmp_path: Path) -> None:
    moved = tmp_path / "moved"
    os.rename(repo.root, moved)
    assert load_config(Layout(moved).config).held is not None
