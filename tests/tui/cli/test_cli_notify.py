"""`genjob ship` and `genjob check` tell the operator's `[notify]` channels, as real
processes: a command that keeps what it reads on stdin, and the events it got."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from checkkit import CALC_BETTER, CALC_BROKEN, PYTEST, configure, project, received
from corekit import mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import DEMO, GENJOB, genjob_env, host_block, script, write_config

from core.review import sandbox
from core.store.layout import Layout, user_config_dir
from core.store.signing import private_key_path, trust_repository

pytestmark = pytest.mark.timeout(180)

ALL = ["receipt", "approval", "check_failed", "host_failed"]
needs_bwrap = pytest.mark.skipif(sandbox.tools().bwrap is None, reason="bwrap is not installed")


@pytest.fixture
def events(tmp_path: Path) -> Path:
    """Where the operator's `[notify] command` keeps each event it is given."""
    return tmp_path / "events.jsonl"


@pytest.fixture
def checked(repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path) -> Layout:
    """A small project whose pytest suite is a required check, the worker key pinned in it,
    and one local host that runs the demo generator."""
    layout = project(tmp_path / "checked")
    configure(layout, {"tests": f'run = "{PYTEST}"'}, host_block("gen", None, DEMO), require=["tests"])
    pub = private_key_path().with_name(private_key_path().name + ".pub")
    trust_repository(layout, pub)
    return layout


def hook_argv(events: Path) -> list[str]:
    """A command that appends what it reads on stdin to `events`."""
    return [sys.executable, "-c", f"import sys; open({str(events)!r}, 'ab').write(sys.stdin.buffer.read())"]


def opt_in(events: Path) -> None:
    """The operator's own config.toml: every event to the command `hook_argv(events)`."""
    folder = user_config_dir()
    folder.mkdir(parents=True, exist_ok=True)
    text = f"[notify.command]\nrun = {json.dumps(hook_argv(events))}\nevents = {json.dumps(ALL)}\n"
    (folder / "config.toml").write_text(text)


def run(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """`genjob ARGS` with HOME in the test's folder (XDG_CONFIG_HOME is already the test's)."""
    home.mkdir(exist_ok=True)
    return subprocess.run(
        [GENJOB, *args], cwd=cwd, env=genjob_env({"HOME": str(home)}), capture_output=True, text=True
    )


def shipped(repo: Layout, home: Path, *options: str) -> str:
    """A job minted and shipped by `genjob ship KEY OPTIONS`, its receipt verified; its key."""
    job = mint(repo)
    res = run("ship", job.key, *options, cwd=repo.root, home=home)
    assert res.returncode == 0 and "=> apply may run" in res.stdout, res.stdout + res.stderr
    return job.key


def told(events: Path) -> list[dict[str, Any]]:
    if not events.exists():
        return []
    return [json.loads(line) for line in events.read_text().splitlines()]


def kinds(events: Path) -> list[tuple[str, str]]:
    return [(e["event"], e["key"]) for e in told(events)]


def facts(event: dict[str, Any], *names: str) -> tuple[Any, ...]:
    return tuple(event[n] for n in names)


def test_a_ship_to_the_local_host_tells_its_receipt_and_that_it_waits_for_approval(
    repo: Layout, signer: Ed25519PrivateKey, events: Path, tmp_path: Path
) -> None:
    opt_in(events)
    key = shipped(repo, tmp_path / "home", "--host", "local")
    receipt, approval = told(events)
    assert facts(receipt, "event", "key", "status", "host") == ("receipt", key, "ok", "local")
    assert facts(receipt, "source", "repository") == ("ship", str(repo.root))
    assert facts(approval, "event", "key", "source") == ("approval", key, "ship")
    assert approval["why"] == f"verifies, and its required checks passed; genjob apply {key[:12]}"


def test_a_ship_whose_required_check_has_not_run_waits_on_the_check_not_the_operator(
    checked: Layout, events: Path, tmp_path: Path
) -> None:
    opt_in(events)
    job = mint(checked, paths=["calc.py"])
    res = run("ship", job.key, cwd=checked.root, home=tmp_path / "home")
    assert "=> apply refused until required checks pass" in res.stdout, res.stdout + res.stderr
    assert kinds(events) == [("receipt", job.key)]


def test_a_rejected_ship_tells_its_receipt_and_the_hosts_failure(
    repo: Layout, signer: Ed25519PrivateKey, events: Path, tmp_path: Path
) -> None:
    write_config(repo, host_block("gen", None, script(tmp_path, "fails", "import sys; sys.exit(3)")))
    opt_in(events)
    job = mint(repo)
    res = run("ship", job.key, "--host", "gen", cwd=repo.root, home=tmp_path / "home")
    assert res.returncode == 1
    receipt, failed = told(events)
    assert facts(receipt, "event", "status") == ("receipt", "rejected")
    assert facts(failed, "event", "key", "host", "attempt") == ("host_failed", job.key, "gen", 1)
    assert failed["source"] == "ship" and failed["reason"]


@pytest.mark.parametrize("command", ["ship", "worker"])
def test_a_host_that_cannot_start_the_run_is_told_as_failed_with_no_receipt(
    repo: Layout, signer: Ed25519PrivateKey, events: Path, tmp_path: Path, command: str
) -> None:
    missing = str(tmp_path / "no-such-launcher")
    write_config(
        repo, f'[hosts.far]\ntransport = "command"\ncommand = [{json.dumps(missing)}]\ngenerator = "true"\n'
    )
    opt_in(events)
    job = mint(repo)
    args = ("ship", job.key) if command == "ship" else ("worker", "--once")
    res = run(*args, "--host", "far", cwd=repo.root, home=tmp_path / "home")
    assert "back in the queue" in res.stdout, res.stdout + res.stderr
    [failed] = told(events)
    assert facts(failed, "event", "key", "host") == ("host_failed", job.key, "far")
    assert failed["source"] == command and f"{missing}: not found on this machine" in failed["reason"]


def test_a_ship_of_candidates_tells_each_receipt_and_that_one_waits_to_be_chosen(
    repo: Layout, signer: Ed25519PrivateKey, events: Path, tmp_path: Path
) -> None:
    opt_in(events)
    job = mint(repo)
    res = run("ship", job.key, "--candidates", "2", cwd=repo.root, home=tmp_path / "home")
    assert res.returncode == 0, res.stdout + res.stderr
    assert kinds(events) == [("receipt", job.key), ("receipt", job.key), ("approval", job.key)]
    why = told(events)[2]["why"]
    assert why == f"2 of 2 candidates verify; genjob candidates {job.key[:12]} compares them"


@needs_bwrap
def test_a_failing_check_is_told_and_a_passing_one_leaves_the_job_waiting_for_approval(
    checked: Layout, signer: Ed25519PrivateKey, events: Path, tmp_path: Path
) -> None:
    opt_in(events)
    broken = received(checked, signer, {"calc.py": CALC_BROKEN})
    res = run("check", broken.key, cwd=checked.root, home=tmp_path / "home")
    assert res.returncode == 1, res.stdout + res.stderr
    [failed] = told(events)
    assert facts(failed, "event", "key", "check", "source") == ("check_failed", broken.key, "tests", "check")
    assert failed["text"].startswith("check tests failed (exit 1) in ")
    events.unlink()
    better = received(checked, signer, {"calc.py": CALC_BETTER})
    res = run("check", better.key, cwd=checked.root, home=tmp_path / "home")
    assert res.returncode == 0, res.stdout + res.stderr
    assert kinds(events) == [("approval", better.key)]


@pytest.mark.parametrize(
    "chosen", [None, [], ["check_failed"]], ids=["no-config", "no-notify", "other-events"]
)
def test_a_ship_runs_nothing_the_operator_did_not_opt_into(
    repo: Layout, signer: Ed25519PrivateKey, events: Path, tmp_path: Path, chosen: list[str] | None
) -> None:
    """No config.toml, one without `[notify]`, one whose command hears only of failed
    checks: the ship runs as ever, and its receipt and approval reach no one."""
    if chosen is not None:
        folder = user_config_dir()
        folder.mkdir(parents=True, exist_ok=True)
        hook = f"[notify.command]\nrun = {json.dumps(hook_argv(events))}\nevents = {json.dumps(chosen)}\n"
        (folder / "config.toml").write_text(hook if chosen else "[policy]\n")
    shipped(repo, tmp_path / "home")
    assert not events.exists()
