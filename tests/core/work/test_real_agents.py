"""The presets with the real coding-agent CLIs, where one is installed: run with a fake key
and no network, each must end by itself, well before its timeout, in a `rejected` receipt
whose log keeps the tool's own error.

A tool is looked for in $GENJOB_AGENT_BIN (a folder), then on PATH; a test whose tool is
not there is skipped, saying so. They install from the registries: `llm` and `aider-chat`
(PyPI), `@anthropic-ai/claude-code` and `@openai/codex` (npm). CI does not install them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from corekit import mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import write_config

from core.model.presets import KEY_ENV, PRESETS
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
    assert log.strip(), "the tool's error is kept"
    assert "genjob preset" not in log, "the tool itself ran, past the checks"
