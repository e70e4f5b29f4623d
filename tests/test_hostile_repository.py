"""A cloned repository's own `.gen/` is data, never instructions, until the operator allows it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from corekit import cli, tree_state
from hostilekit import EVIL, OTHER_UID, Hostile, build_hostile, copy_tree, plant_parent_gen

from core.review import sandbox
from core.store.check_records import read_record
from core.store.config import load_config
from core.store.layout import Layout

needs_bwrap = pytest.mark.skipif(sandbox.bwrap_problem() is not None, reason="bwrap cannot run here")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's files needs root")


@pytest.fixture
def hostile(tmp_path: Path) -> Hostile:
    if sandbox.bwrap_problem() is not None:
        pytest.skip("the fixture's author runs a sandboxed check")
    return build_hostile(tmp_path)


def test_a_fresh_clone_runs_lowers_and_trusts_nothing(hostile: Hostile) -> None:
    clone = hostile.clone
    config = load_config(clone.config)
    assert config.hosts == {} and config.checks == {}
    assert config.policy.require_signature is True
    assert config.held is not None and set(config.held.hosts) == {"local", "box"}
    assert set(config.held.checks) == {"pwn", "tests", "venv"}
    assert config.held.lowers == ("policy.require_signature",)
    assert not config.held.changed


def test_ls_says_what_waits_and_runs_nothing(hostile: Hostile) -> None:
    res = cli("ls", root=hostile.clone.root)
    assert res.exit_code == 0
    assert "waits for your approval" in res.stderr and "genjob allow" in res.stderr
    assert "signatures NOT required" not in res.stderr
    assert hostile.marked() == []


def test_verify_names_the_key_that_came_with_the_repository(hostile: Hostile) -> None:
    res = cli("verify", hostile.received, root=hostile.clone.root)
    assert res.exit_code != 0
    assert "was not pinned by you for this repository" in res.stdout + res.stderr
    assert "apply may run" not in res.stdout
    assert hostile.marked() == []


def test_apply_writes_nothing(hostile: Hostile) -> None:
    before = tree_state(hostile.clone.root)
    for key in (hostile.received, hostile.unsigned):
        res = cli("apply", key, root=hostile.clone.root)
        assert res.exit_code != 0
    assert tree_state(hostile.clone.root) == before
    assert (hostile.clone.root / "src/app.py").read_bytes() != EVIL


def test_check_and_ship_refuse_until_allowed(hostile: Hostile) -> None:
    check = cli("check", hostile.received, root=hostile.clone.root)
    assert check.exit_code == 2 and "waits for your approval" in check.stderr
    ship = cli("ship", hostile.queued, root=hostile.clone.root)
    assert ship.exit_code == 2 and "waits for your approval" in ship.stderr
    box = cli("ship", hostile.queued, "--host", "box", root=hostile.clone.root)
    assert box.exit_code == 2 and "waits for your approval" in box.stderr
    hosts = cli("hosts", root=hostile.clone.root)
    assert hosts.exit_code == 0 and "waits for your approval" in hosts.stdout
    assert hostile.marked() == []
    assert (hostile.clone.queue / f"{hostile.queued}.json").exists()


def test_the_authors_check_record_counts_for_nothing(hostile: Hostile) -> None:
    path = hostile.clone.check_record(hostile.received, "tests")
    assert json.loads(path.read_bytes())["result"] == "passed"
    with pytest.raises(Exception, match="not written by genjob on this machine"):
        read_record(hostile.clone, hostile.received, "tests")


@needs_bwrap
def test_after_allow_its_sandboxed_check_runs_sandboxed(hostile: Hostile) -> None:
    shown = cli("allow", "--show", root=hostile.clone.root)
    assert shown.exit_code == 0 and "not allowed yet" in shown.stdout
    assert "check pwn: UNSANDBOXED" in shown.stdout
    assert "lowers policy.require_signature to false" in shown.stdout
    assert load_config(hostile.clone.config).held is not None
    allowed = cli("allow", "--yes", root=hostile.clone.root)
    assert allowed.exit_code == 0 and "allowed:" in allowed.stdout
    assert load_config(hostile.clone.config).held is None
    # The author's signed receipt still does not verify: allowing the config trusts no key.
    signed = cli("check", hostile.received, "--name", "tests", root=hostile.clone.root)
    assert signed.exit_code == 2 and "was not pinned by you" in signed.stderr
    assert cli("apply", hostile.received, root=hostile.clone.root).exit_code != 0
    assert (hostile.clone.root / "src/app.py").read_bytes() != EVIL
    # Unsigned receipts are what the operator allowed: its check runs, sandboxed.
    ran = cli("check", hostile.unsigned, "--name", "tests", root=hostile.clone.root)
    assert ran.exit_code == 0, ran.stdout + ran.stderr
    record = read_record(hostile.clone, hostile.unsigned, "tests")
    assert record is not None and record.sandbox == "bwrap"
    assert hostile.marked() == []
    # The tracked `.venv`, a link into the operator's home, is refused, not shown.
    venv = cli("check", hostile.unsigned, "--name", "venv", root=hostile.clone.root)
    assert venv.exit_code != 0 and "out of the repository" in venv.stderr
    assert str(hostile.secret) in venv.stdout + venv.stderr
    assert "id_ed25519" not in venv.stdout


def test_an_unpacked_archive_is_as_foreign_as_a_clone(hostile: Hostile, tmp_path: Path) -> None:
    unpacked = tmp_path / "unpacked"
    copy_tree(hostile.origin, unpacked)
    layout = Layout(unpacked)
    assert load_config(layout.config).held is not None
    res = cli("verify", hostile.received, root=unpacked)
    assert res.exit_code != 0 and "was not pinned by you" in res.stdout + res.stderr
    assert cli("check", hostile.received, root=unpacked).exit_code == 2
    assert hostile.marked() == []


def test_a_pull_that_changes_what_runs_asks_again(hostile: Hostile) -> None:
    cli("allow", "--yes", root=hostile.clone.root)
    config = hostile.clone.config
    config.write_text(config.read_text().replace("test -f src/app.py", "touch /tmp/pulled"))
    held = load_config(config).held
    assert held is not None and held.changed
    res = cli("check", hostile.received, root=hostile.clone.root)
    assert res.exit_code == 2 and "changed since you allowed it" in res.stderr


def test_a_timeout_change_does_not_ask_again(hostile: Hostile) -> None:
    cli("allow", "--yes", root=hostile.clone.root)
    config = hostile.clone.config
    config.write_text(
        config.read_text().replace('run = "test -f src/app.py"', 'run = "test -f src/app.py"\ntimeout = 5')
    )
    assert load_config(config).held is None


def test_allow_without_a_terminal_asks_for_yes(hostile: Hostile) -> None:
    res = cli("allow", root=hostile.clone.root)
    assert res.exit_code == 2 and "genjob allow --yes" in res.stderr
    assert load_config(hostile.clone.config).held is not None
    answered = cli("allow", root=hostile.clone.root, input="n\n")
    assert load_config(hostile.clone.config).held is not None, answered.stdout


def test_trust_pins_a_key_file_that_came_with_the_repository(hostile: Hostile) -> None:
    [key_file] = hostile.clone.trusted_keys.glob("*.pub")
    res = cli("trust", str(key_file), root=hostile.clone.root)
    assert res.exit_code == 0 and "trusted SHA256:" in res.stdout
    verify = cli("verify", hostile.received, root=hostile.clone.root)
    assert "was not pinned by you" not in verify.stdout + verify.stderr


@needs_root
def test_a_gen_planted_in_a_parent_folder_is_never_adopted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = tmp_path / "shared"
    notes = parent / "me" / "notes"
    notes.mkdir(parents=True)
    gen = plant_parent_gen(parent)
    before = tree_state(gen)
    for args in (["ls"], ["mint", "-m", "Fix it", "x.txt"]):
        (notes / "x.txt").write_text("x\n")
        monkeypatch.chdir(notes)
        res = cli(*args)
        assert res.exit_code == 2, res.stdout
        assert f"{parent}/.gen: owned by uid {OTHER_UID}" in res.stderr and "safe_directories" in res.stderr
    assert tree_state(gen) == before


@needs_root
def test_a_gen_above_a_git_repository_is_not_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from corekit import git

    parent = tmp_path / "shared"
    repo = parent / "me" / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q")
    gen = plant_parent_gen(parent)
    before = tree_state(gen)
    monkeypatch.chdir(repo)
    res = cli("ls")
    assert res.exit_code == 2 and "a git repository with no .gen/" in res.stderr
    assert tree_state(gen) == before


@needs_root
def test_another_users_repository_is_refused_until_it_is_listed_safe(tmp_path: Path) -> None:
    from corekit import make_repo

    from core.store.layout import user_config_dir

    layout = make_repo(tmp_path / "theirs")
    for path in (layout.root, layout.gen):
        os.lchown(path, OTHER_UID, OTHER_UID)
    res = cli("ls", root=layout.root)
    assert res.exit_code == 2 and "owned by uid 4242, not you" in res.stderr
    user_config_dir().mkdir(parents=True, exist_ok=True)
    (user_config_dir() / "config.toml").write_text(f'[policy]\nsafe_directories = ["{layout.root}"]\n')
    assert cli("ls", root=layout.root).exit_code == 0


@needs_root
def test_init_refuses_another_users_folder(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.lchown(theirs, OTHER_UID, OTHER_UID)
    res = cli("init", str(theirs))
    assert res.exit_code == 2 and "owned by uid 4242" in res.stderr
    assert not (theirs / ".gen").exists()
