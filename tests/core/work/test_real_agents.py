"""The presets with the real coding-agent CLIs, where one is installed: run as the hosts
topic shows them, with a fake key and no network, each must end by itself, before its
timeout, in a `rejected` receipt whose log says why. (By themselves, without the line's
reach check, codex waits for a network until it is killed, "Reconnecting... waiting for
network", and aider retries for about 90 s, then exits 0 having changed nothing.)

A tool is looked for in $GENJOB_AGENT_BIN (a folder), then on PATH; a test whose tool is
not there is skipped, saying so. They install from the registries: `llm` and `aider-chat`
(PyPI), `@anthropic-ai/claude-code` and `@openai/codex` (npm). CI does not install them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from corekit import mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import write_config

from core.model.presets import API_HOSTS, KEY_ENV, PRESETS, PresetSettings, generator_line
from core.store.layout import Layout
from core.work.ship import ship

pytestmark = pytest.mark.timeout(400)

MODELS = {"claude": None, "codex": None, "aider": "gpt-4o", "llm": "gpt-4o-mini"}
TIMEOUT = 300.0


def installed(tool: str) -> Path | None:
    folder = os.environ.get("GENJOB_AGENT_BIN")
    found = shutil.which(tool, path=folder) if folder else None
    found = found or shutil.which(tool)
    return Path(found) if found else None


@pytest.mark.parametrize("preset", PRESETS)
async def test_the_real_tool_without_network_ends_fast_in_a_failed_receipt_with_its_error(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, preset: str
) -> None:
    tool = installed(preset)
    if tool is None:
        pytest.skip(f"{preset} is not installed here (not in $GENJOB_AGENT_BIN, not on PATH)")
    if shutil.which("bwrap") is None:
        pytest.skip("bwrap is not installed: without it the run would have the network")
    env_file = tmp_path / f"{preset}.env"
    env_file.write_text(f"{KEY_ENV[preset]}=sk-test-not-a-real-key\n")
    table = {
        "transport": "local",
        "sandbox": "bwrap",
        "network": False,
        "preset": preset,
        "tool": str(tool),
        "env_file": str(env_file),
        "read_only": sorted({str(tool.parent.parent), str(tool.resolve().parent.parent)}),
        "timeout": TIMEOUT,
        **({"model": MODELS[preset]} if MODELS[preset] else {}),
    }
    write_config(repo, "[hosts.agent]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in table.items()))
    text = repo.config.read_text().replace("[policy]\n", "[policy]\nrefuse_no_change = true\n", 1)
    repo.config.write_text(text)
    job = mint(repo, "Add a docstring to main.")
    res = await ship(repo, job.key, "agent")
    assert res.status == "rejected", res.reason  # not `aborted`: it ended by itself, before the timeout
    log = (repo.logs / job.key / "attempt-1.log").read_text()
    assert f"genjob preset {preset}: cannot reach {API_HOSTS[preset]}:443" in log, log[-2000:]


# The flags each preset line passes, as the tool's own --help lists them (claude's
# --max-turns is in its CLI reference but not in --help: it is left out here).
FLAGS = {
    "claude": (
        ["--help"],
        ["--print", "--output-format", "--max-budget-usd", "--permission-mode", "--model"],
    ),
    "codex": (["exec", "--help"], ["--json", "--sandbox", "--skip-git-repo-check", "--ephemeral", "--model"]),
    "aider": (
        ["--help"],
        [
            "--model",
            "--yes-always",
            "--no-git",
            "--no-auto-commits",
            "--no-check-update",
            "--no-show-model-warnings",
            "--no-show-release-notes",
            "--no-analytics",
            "--no-pretty",
            "--no-stream",
            "--no-fancy-input",
            "--input-history-file",
            "--chat-history-file",
            "--message-file",
        ],
    ),
    "llm": (["prompt", "--help"], ["--model", "--no-log", "--usage", "--extract", "--system", "--fragment"]),
}


@pytest.mark.parametrize("preset", PRESETS)
def test_the_real_tool_takes_every_flag_its_preset_passes(preset: str) -> None:
    tool = installed(preset)
    if tool is None:
        pytest.skip(f"{preset} is not installed here (not in $GENJOB_AGENT_BIN, not on PATH)")
    args, flags = FLAGS[preset]
    shown = subprocess.run([str(tool), *args], capture_output=True, text=True, timeout=120).stdout
    assert [f for f in flags if f not in shown] == []
    line = generator_line(PresetSettings(preset, model="m"))  # type: ignore[arg-type]
    short = {"-p": "--print", "-x": "--extract", "-s": "--system", "-f": "--fragment", "-m": "--model"}
    tool_part = line.rsplit("exit 3; };", 1)[-1]  # past the checks: the tool itself
    used = {short.get(f, f) for f in re.findall(r"(?<=\s)--?[a-z][a-z-]*", tool_part)}
    assert used - {"--max-turns", "-c", "--", "-"} <= set(flags) | {"--print"}, used - set(flags)
