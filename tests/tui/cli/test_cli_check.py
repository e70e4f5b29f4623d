"""`genjob check`, and the checks as `verify`, `show` and `apply` tell of them."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from checkkit import CALC_BETTER, CALC_BROKEN, PYTEST, configure, project, received
from corekit import cli, set_config
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import BadInput
from core.review import sandbox
from core.store.config import DEFAULT_CONFIG, Config, load_config
from core.store.layout import Layout

pytestmark = pytest.mark.skipif(sandbox.tools().bwrap is None, reason="bwrap is not installed")


@pytest.fixture
def repo(tmp_path: Path) -> Layout:
    layout = project(tmp_path / "repo")
    configure(
        layout, {"tests": f'run = "{PYTEST}"', "lint": 'run = "echo linting {paths}"'}, require=["tests"]
    )
    return layout


def test_check_streams_each_check_and_exits_0_when_all_pass(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    res = cli("check", job.key[:8], root=repo.root)
    assert res.exit_code == 0, res.stdout + res.stderr
    out = res.stdout
    assert "== check tests: running" in out and "2 passed" in out
    assert "== check tests: passed in" in out and "sandboxed (bwrap)" in out
    assert "linting calc.py" in out and "== check lint: passed" in out
    assert out.index("2 passed") < out.index("== check tests: passed") < out.index("== check lint: running")
    assert "no network" in out


def test_check_exits_1_when_one_fails_and_apply_names_it(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = received(repo, signer, {"calc.py": CALC_BROKEN})
    refused = cli("apply", job.key, root=repo.root)
    assert refused.exit_code == 2
    assert f"tests (not run); nothing was written. Run: genjob check {job.key} --name tests" in refused.stderr
    res = cli("check", job.key, "--name", "tests", root=repo.root)
    assert res.exit_code == 1 and "== check tests: failed (exit 1)" in res.stdout
    assert "lint" not in res.stdout
    refused = cli("apply", job.key, root=repo.root)
    assert refused.exit_code == 2 and "tests (failed)" in refused.stderr


def test_check_json(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    res = cli("check", job.key, "--name", "lint", "--json", root=repo.root)
    assert res.exit_code == 0
    [run] = json.loads(res.stdout)
    assert run["name"] == "lint" and run["passed"] is True and run["scratch"] == "overlay"
    assert run["record"]["tail"] == "linting calc.py\n" and run["record"]["sandbox"] == "bwrap"


def test_verify_lists_the_checks_and_exits_0_only_when_apply_may_run(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    before = cli("verify", job.key, root=repo.root)
    assert before.exit_code == 1
    assert f"[----] tests        required not run yet: genjob check {job.key} --name tests" in before.stdout
    assert "[----] lint         optional" in before.stdout
    assert (
        f"=> apply refused until required checks pass: genjob check {job.key} --name tests" in before.stdout
    )
    assert cli("check", job.key, "--name", "tests", root=repo.root).exit_code == 0
    after = cli("verify", job.key, root=repo.root)
    assert after.exit_code == 0 and "[ok  ] tests        required passed in" in after.stdout
    data = json.loads(cli("verify", job.key, "--json", root=repo.root).stdout)
    assert data["apply_may_run"] is True
    assert {c["name"]: c["state"] for c in data["check_states"]} == {"tests": "passed", "lint": "not run"}
    shown = cli("show", job.key, root=repo.root)
    assert "checks:" in shown.stdout and "[ok  ] tests" in shown.stdout
    assert cli("apply", job.key, root=repo.root).exit_code == 0


def test_unsandboxed_checks_are_said_to_be(repo: Layout, signer: Ed25519PrivateKey) -> None:
    configure(repo, {"tests": f'run = "{PYTEST}"\nsandbox = "none"'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    res = cli("check", job.key, root=repo.root)
    assert res.exit_code == 0 and "UNSANDBOXED" in res.stdout
    assert 'check tests ran UNSANDBOXED (sandbox = "none"' in res.stderr
    shown = cli("verify", job.key, root=repo.root)
    assert "UNSANDBOXED" in shown.stdout


def test_check_refusals_are_one_line(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    res = cli("check", job.key, "--name", "nope", root=repo.root)
    assert res.exit_code == 2 and res.stderr.count("\n") == 1 and "no check named nope" in res.stderr
    set_config(repo, "[checks.tests]\n")
    res = cli("check", job.key, root=repo.root)
    assert res.exit_code == 2 and "checks.tests.run: Field required" in res.stderr


def test_a_check_output_cannot_drive_the_terminal(repo: Layout, signer: Ed25519PrivateKey) -> None:
    configure(repo, {"tests": "run = \"printf '\\\\033]8;;http://evil\\\\007click\\\\033[2J'\""})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    res = cli("check", job.key, root=repo.root)
    assert "\x1b" not in res.stdout and "\x07" not in res.stdout and "␛" in res.stdout


def test_the_default_config_shows_checks_that_parse_once_uncommented() -> None:
    lines = DEFAULT_CONFIG.splitlines()
    start = lines.index("# [checks.tests]")
    settings = ("[", "run =", "timeout =", "sandbox =", "read_only =", "on_receipt", "concurrency")
    text = "\n".join(
        line[2:]
        if (i >= start and line[2:].startswith(settings)) or line == '# require_checks = ["tests"]'
        else line
        for i, line in enumerate(lines)
    )
    config = Config.model_validate(tomllib.loads(text))
    assert list(config.checks) == ["tests", "lint"]
    assert config.policy.require_checks == ["tests"]
    assert config.checks["tests"].read_only == [".venv"]
    assert config.check_runs.on_receipt and config.check_runs.concurrency == 2


@pytest.mark.parametrize(
    ("toml", "fault"),
    [
        (
            '[policy]\nrequire_checks = ["tests"]\n',
            "policy.require_checks names tests, which no [checks.NAME]",
        ),
        ('[checks."a/b"]\nrun = "x"\n', "a name is letters, digits"),
        ('[checks.t]\nrun = "x"\nsandbox = "docker"\n', "checks.t.sandbox"),
        ('[checks.t]\nrun = ""\n', "checks.t.run"),
        ('[checks.t]\nrun = "x"\ntimeout = 0\n', "checks.t.timeout"),
        ("[check_runs]\nconcurrency = 0\n", "check_runs.concurrency"),
    ],
)
def test_bad_check_settings_name_the_file_and_the_fault(tmp_path: Path, toml: str, fault: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(toml)
    with pytest.raises(BadInput) as caught:
        load_config(path)
    assert str(caught.value).startswith(f"{path}: ") and fault in str(caught.value)


def test_the_checks_topics_example_is_a_valid_config() -> None:
    topic = (Path(__file__).resolve().parents[3] / "tui/reference/checks.md").read_text()
    block = topic.split("```toml\n", 1)[1].split("```", 1)[0]
    config = Config.model_validate(tomllib.loads(block))
    assert list(config.checks) == ["tests", "lint"] and config.policy.require_checks == ["tests"]


def test_ls_says_which_checks_run_unsandboxed(repo: Layout) -> None:
    configure(repo, {"tests": 'run = "true"\nsandbox = "none"', "lint": 'run = "true"'})
    res = cli("ls", root=repo.root)
    assert 'policy: checks run UNSANDBOXED (sandbox = "none"): tests' in res.stderr
