"""Coding-agent CLIs as presets (`core.model.presets`, `core.work.spend`): each runs its tool
unattended, fails at once saying why when it cannot work, records what the run cost
where `show`, the board and `genjob hosts` read it, and `[budget]` refuses a dispatch
that could pass a limit. The tools are stand-ins on PATH (`agentkit`), printing each
tool's documented output format."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from agentkit import install
from corekit import cli, mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from rich.console import Console
from shipkit import write_config

from core.errors import BadInput
from core.model.presets import PRESETS, PresetSettings, generator_line, parse_usage, spend_of
from core.read.inspect_job import job_detail
from core.store.config import load_config, read_repository_config, runs_digest
from core.store.events import attempts, record_attempt
from core.store.layout import Layout
from core.work.ship import ship
from core.work.spend import OverBudget
from tui.reference import topic_text
from tui.render import lease_text

pytestmark = pytest.mark.timeout(120)

KEYS = {
    "claude": "ANTHROPIC_API_KEY",
    "codex": "CODEX_API_KEY",
    "aider": "OPENAI_API_KEY",
    "llm": "OPENAI_API_KEY",
}
MODELS = {"claude": None, "codex": "gpt-5-codex", "aider": "gpt-4o", "llm": "gpt-4o-mini"}
# What each stand-in reports, as genjob records it.
REPORTED = {
    "claude": {"model": "claude-sonnet-4-5", "tokens_in": 1500, "tokens_out": 150, "cost_usd": 0.5},
    "codex": {"model": "gpt-5-codex", "tokens_in": 2400, "tokens_out": 310, "cost_usd": None},
    "aider": {"model": "gpt-4o", "tokens_in": 2300, "tokens_out": 145, "cost_usd": 0.0123},
    # one call per allowed path: two paths
    "llm": {"model": "gpt-4o-mini", "tokens_in": 240, "tokens_out": 80, "cost_usd": None},
}


@pytest.fixture(scope="module")
def api() -> Iterator[str]:
    """A listening socket standing in for the model's API: the lines' reach check passes."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield f"127.0.0.1:{server.getsockname()[1]}"


def closed_port() -> str:
    with socket.create_server(("127.0.0.1", 0)) as server:
        return f"127.0.0.1:{server.getsockname()[1]}"


def preset_table(name: str, preset: str, env_file: Path | None, **extra: object) -> str:
    lines = [f"[hosts.{name}]", 'transport = "local"', 'sandbox = "none"', f'preset = "{preset}"']
    extra = {"api_host": API[0], **extra}
    if MODELS[preset]:
        lines.append(f'model = "{MODELS[preset]}"')
    if env_file is not None:
        lines.append(f'env_file = "{env_file}"')
    lines += [f"{k} = {json.dumps(v)}" for k, v in extra.items()]
    return "\n".join(lines) + "\n"


# The stand-in API's host:port, set by the `tools` fixture for `preset_table`.
API = [""]


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, api: str) -> Path:
    API[0] = api
    folder = tmp_path / "bin"
    for tool in PRESETS:
        install(folder, tool)
    monkeypatch.setenv("PATH", f"{folder}:{Path('/usr/bin')}:{Path('/bin')}")
    return folder


def key_file(tmp_path: Path, preset: str) -> Path:
    path = tmp_path / f"{preset}.env"
    path.write_text(f"{KEYS[preset]}=sk-test-not-a-real-key\n")
    return path


@pytest.mark.parametrize("preset", PRESETS)
async def test_a_preset_runs_its_tool_unattended_and_records_what_the_run_cost(
    repo: Layout, signer: Ed25519PrivateKey, tools: Path, tmp_path: Path, preset: str
) -> None:
    write_config(repo, preset_table("agent", preset, key_file(tmp_path, preset)))
    job = mint(repo, "Make it better.", ["src/app.py", "src/util.py"])
    res = await ship(repo, job.key, "agent")
    assert res.status == "ok", res.reason
    assert not res.unchanged
    usage = [r for r in attempts(repo, job.key) if r.get("event") == "usage"]
    assert len(usage) == 1
    record = usage[0]
    assert {k: record[k] for k in REPORTED[preset]} == REPORTED[preset]
    assert record["host"] == "agent" and record["preset"] == preset and record["attempt"] == 1
    shown = json.loads(cli("show", job.key, "--json", root=repo.root).stdout)
    assert shown["spend"]["runs"] == 1 and shown["spend"]["tokens_out"] == REPORTED[preset]["tokens_out"]
    text = cli("show", job.key, root=repo.root).stdout
    assert "cost    " in text and f"{REPORTED[preset]['tokens_out']:,} out" in text
    console = Console(width=200, record=True)
    console.print(lease_text(job_detail(repo, job.key)))
    assert "cost " in console.export_text()
    hosts = json.loads(cli("hosts", "--json", root=repo.root).stdout)
    assert next(h for h in hosts if h["name"] == "agent")["spend"]["runs"] == 1
    assert "spent " in cli("hosts", root=repo.root).stdout


@pytest.mark.parametrize("preset", PRESETS)
async def test_a_preset_without_its_key_fails_at_once_saying_which(
    repo: Layout, signer: Ed25519PrivateKey, tools: Path, preset: str
) -> None:
    write_config(repo, preset_table("agent", preset, None, timeout=600))
    job = mint(repo)
    res = await ship(repo, job.key, "agent")
    assert res.status == "rejected" and res.reason == "the generator exited with status 2"
    log = next((repo.logs / job.key).glob("attempt-1.log")).read_text()
    assert f"genjob preset {preset}: no {KEYS[preset]} in the environment" in log
    assert not [r for r in attempts(repo, job.key) if r.get("event") == "usage"]


@pytest.mark.parametrize("preset", PRESETS)
async def test_a_preset_whose_tool_or_credentials_file_is_missing_fails_at_once_saying_which(
    repo: Layout, signer: Ed25519PrivateKey, tools: Path, tmp_path: Path, preset: str
) -> None:
    write_config(
        repo,
        preset_table("nofile", preset, tmp_path / "gone.env"),
        preset_table("notool", preset, key_file(tmp_path, preset)),
    )
    first = mint(repo, "First.")
    res = await ship(repo, first.key, "nofile")
    assert res.status == "rejected" and res.reason == "the generator exited with status 2"
    assert "cannot read the credentials file" in (repo.logs / first.key / "attempt-1.log").read_text()
    (tools / preset).unlink()
    second = mint(repo, "Second.")
    res = await ship(repo, second.key, "notool")
    assert res.status == "rejected" and res.reason == "the generator exited with status 127"
    assert f"{preset}: not found on this host PATH" in (repo.logs / second.key / "attempt-1.log").read_text()


def test_every_preset_line_passes_its_tools_unattended_flags() -> None:
    """What the stand-ins check, said once more of the lines themselves: nothing of them waits."""
    for preset in PRESETS:
        line = generator_line(PresetSettings(preset, model=MODELS[preset]))  # type: ignore[arg-type]
        assert "{instruction_file}" in line
    claude = generator_line(PresetSettings("claude"))
    assert "-p --output-format json --max-turns 20 --max-budget-usd 1 --permission-mode acceptEdits" in claude
    assert "--yes-always" in generator_line(PresetSettings("aider", model="gpt-4o"))
    assert 'CODEX_HOME="$HOME/.codex"' in generator_line(PresetSettings("codex"))


@pytest.mark.parametrize(
    ("table", "fault"),
    [
        ('preset = "aider"', 'needs model = "..."'),
        ('preset = "llm"', 'needs model = "..."'),
        ('preset = "codex"\nmax_turns = 3', "Claude Code's own limits"),
        ('preset = "claude"\ngenerator = "true"', "give preset or generator, not both"),
        ('preset = "claude"\nenv_file = "keys.env"', "not an absolute path"),
        ('preset = "claude"\nkey_env = "A B"', "not an environment variable's name"),
        ('preset = "gemini"', "is not one of claude, codex, aider, llm"),
        ('preset = "claude"\napi_host = "a b"', "is not host or host:port"),
        ('preset = "claude"\ntool = "bin/claude"', "tool: 'bin/claude' is not an absolute path"),
    ],
)
def test_a_bad_preset_table_is_one_message_naming_the_host(repo: Layout, table: str, fault: str) -> None:
    repo.config.write_text(f'[hosts.agent]\ntransport = "local"\n{table}\n')
    with pytest.raises(BadInput, match=rf"config\.toml: hosts\.agent: .*{fault}"):
        read_repository_config(repo.config)


@pytest.mark.parametrize(
    "change",
    ['model = "claude-opus-4-1"', "max_budget_usd = 50.0", "max_turns = 500", 'env_file = "/other.env"'],
)
def test_a_presets_settings_are_part_of_what_the_operator_allowed(repo: Layout, change: str) -> None:
    write_config(repo, '[hosts.agent]\ntransport = "local"\npreset = "claude"\n')
    allowed = runs_digest(read_repository_config(repo.config))
    repo.config.write_text(repo.config.read_text() + change + "\n")
    assert runs_digest(read_repository_config(repo.config)) != allowed
    config = load_config(repo.config)
    assert config.held is not None and "agent" in config.held.hosts and "agent" not in config.hosts


def test_a_host_budget_refuses_the_run_that_could_pass_it_saying_what_is_left(
    repo: Layout, signer: Ed25519PrivateKey, tools: Path, tmp_path: Path
) -> None:
    write_config(repo, preset_table("agent", "claude", key_file(tmp_path, "claude"), max_budget_usd=0.6))
    repo.config.write_text(repo.config.read_text() + "\n[budget]\nper_host = 1.0\n")
    first = mint(repo, "First.")
    assert asyncio.run(ship(repo, first.key, "agent")).status == "ok"  # reports $0.50
    second = mint(repo, "Second.")
    queued = sorted(p.name for p in repo.queue.iterdir())
    with pytest.raises(
        OverBudget,
        match=r"\[budget\]: host agent's per_host budget has \$0\.50 of \$1\.00 left, and a run on agent may "
        r"cost up to \$0\.60 \(its max_budget_usd\); not dispatched",
    ):
        asyncio.run(ship(repo, second.key, "agent"))
    assert sorted(p.name for p in repo.queue.iterdir()) == queued
    res = cli("ship", second.key, "--host", "agent", root=repo.root)
    assert res.exit_code != 0 and "[budget]: host agent's per_host budget has $0.50" in res.stderr
    worker = cli("worker", "--once", root=repo.root)
    assert "agent: [budget]: host agent's per_host budget" in worker.stdout
    assert second.key + ".json" in queued and (repo.queue / f"{second.key}.json").exists()


async def test_a_job_budget_counts_that_jobs_earlier_runs(
    repo: Layout, signer: Ed25519PrivateKey, tools: Path, tmp_path: Path
) -> None:
    write_config(repo, preset_table("agent", "claude", key_file(tmp_path, "claude")))
    repo.config.write_text(repo.config.read_text() + "\n[budget]\nper_job = 0.75\n")
    job = mint(repo)
    record_attempt(repo, job.key, "usage", attempt=0, host="agent", cost_usd=0.75)
    with pytest.raises(OverBudget, match=rf"job {job.key}'s per_job budget is spent \(\$0\.75 of \$0\.75\)"):
        await ship(repo, job.key, "agent")
    other = mint(repo, "Other.")
    with pytest.raises(
        OverBudget, match=r"has \$0\.75 of \$0\.75 left, and a run on agent may cost up to \$1\.00"
    ):
        await ship(repo, other.key, "agent")


def test_init_writes_a_preset_host_that_loads_and_refuses_one_that_cannot_run(tmp_path: Path) -> None:
    for preset in PRESETS:
        root = tmp_path / preset
        root.mkdir()
        args = ["init", str(root), "--generator", preset, "--env-file", "/home/gen/keys.env"]
        res = cli(*args, *(["--model", MODELS[preset]] if MODELS[preset] else []))
        assert res.exit_code == 0, res.output
        host = load_config(root / ".gen/config.toml").hosts[preset]
        assert host.preset == preset and host.network and "/home/gen/keys.env" in host.read_only
        assert host.generator == generator_line(host.preset_settings)  # type: ignore[arg-type]
    bare = tmp_path / "bare"
    bare.mkdir()
    res = cli("init", str(bare), "--generator", "aider")
    assert res.exit_code != 0 and "needs model" in res.stderr and not (bare / ".gen").exists()


@pytest.mark.parametrize(
    ("preset", "output"),
    [
        (
            "claude",
            b'{"type":"result","total_cost_usd":NaN,"usage":{"input_tokens":true,"output_tokens":-5}}\n',
        ),
        ("claude", b'{"type":"result","total_cost_usd":1e400,"usage":"many"}\n'),
        (
            "codex",
            b'{"type":"turn.completed","usage":{"input_tokens":"10","output_tokens":99999999999999999999}}\n',
        ),
        ("aider", b"Tokens: lots sent, none received.\n"),
        ("llm", b"Token usage: -3 input, x output\n"),
    ],
)
def test_a_report_the_tool_did_not_write_as_documented_counts_for_nothing(preset: str, output: bytes) -> None:
    usage = parse_usage(preset, output)  # type: ignore[arg-type]
    spent = spend_of([{"event": "usage", **(usage.to_dict() if usage else {})}])
    assert spent.cost_usd == 0 and spent.tokens_in == 0 and spent.tokens_out == 0


def doc_hosts() -> dict[str, dict[str, object]]:
    """Every `[hosts.NAME]` table in the hosts topic's TOML blocks."""
    found: dict[str, dict[str, object]] = {}
    for block in re.findall(r"```toml\n(.*?)```", topic_text("hosts"), re.S):
        found.update(tomllib.loads(block).get("hosts", {}))
    return found


def test_every_coding_agent_the_docs_show_runs_through_a_preset() -> None:
    """A line written by hand (aider without a model, codex without a home) waits for a
    person or the timeout; the docs show the tools only as presets, whose lines do not."""
    hosts = doc_hosts()
    assert {"claude", "codex", "aider", "llm"} <= set(hosts)
    for name, table in hosts.items():
        line = str(table.get("generator", ""))
        assert not re.search(r"\b(aider|codex|claude|llm)\b", line), (
            f"hosts.{name} runs an agent by hand: {line}"
        )


@pytest.mark.parametrize("preset", PRESETS)
async def test_the_docs_preset_tables_run_as_written(
    repo: Layout, signer: Ed25519PrivateKey, tools: Path, tmp_path: Path, preset: str
) -> None:
    table = {
        **doc_hosts()[preset],
        "env_file": str(key_file(tmp_path, preset)),
        "sandbox": "none",
        "api_host": API[0],
    }
    lines = [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    write_config(repo, f"[hosts.{preset}]\n" + "\n".join(lines) + "\n")
    job = mint(repo)
    res = await ship(repo, job.key, preset)
    assert res.status == "ok", res.reason
    assert [r["preset"] for r in attempts(repo, job.key) if r.get("event") == "usage"] == [preset]


@pytest.mark.parametrize("preset", PRESETS)
async def test_a_preset_without_a_network_fails_at_once_saying_so(
    repo: Layout, signer: Ed25519PrivateKey, tools: Path, tmp_path: Path, preset: str
) -> None:
    """A tool with no network waits for one (codex) or retries for minutes (aider): the
    line tries the model's API once first."""
    write_config(
        repo, preset_table("agent", preset, key_file(tmp_path, preset), api_host=closed_port(), timeout=600)
    )
    job = mint(repo)
    res = await ship(repo, job.key, "agent")
    assert res.status == "rejected" and res.reason == "the generator exited with status 3"
    log = (repo.logs / job.key / "attempt-1.log").read_text()
    assert (
        f"genjob preset {preset}: cannot reach 127.0.0.1:" in log
        and "the model API (no network here?)" in log
    )


async def test_a_preset_behind_a_proxy_leaves_the_reach_to_the_proxy(
    repo: Layout, signer: Ed25519PrivateKey, tools: Path, tmp_path: Path
) -> None:
    env = key_file(tmp_path, "claude")
    env.write_text(env.read_text() + "HTTPS_PROXY=http://127.0.0.1:9\n")
    write_config(repo, preset_table("agent", "claude", env, api_host=closed_port()))
    job = mint(repo)
    assert (await ship(repo, job.key, "agent")).status == "ok"
