"""Stand-ins for the coding-agent CLIs the presets run (`core.model.presets`).

Each is an executable put on PATH by a test. It behaves as the real tool does in the
one way that matters here: it refuses to run unattended unless given the flags that
make it so (a real one would wait for a person instead), edits the files it was given,
and prints what the tool reports in the format its documentation names.
"""

from __future__ import annotations

import sys
from pathlib import Path

_COMMON = r"""
import os, sys

def edit(paths):
    for path in paths:
        with open(path, "a") as f:
            f.write(f"# edited by {TOOL}\n")

def workspace_files():
    return sorted(os.path.join(d, n)[2:] for d, _, names in os.walk(".") for n in names)

def need(*flags):
    missing = [f for f in flags if f not in sys.argv[1:]]
    if missing:
        print(f"stand-in {TOOL}: would wait for a person: {' '.join(missing)} not given", file=sys.stderr)
        sys.exit(99)
"""

STAND_INS = {
    # Claude Code, `claude -p --output-format json`: one result object on stdout
    # ("structured JSON with result, session ID, and metadata": total_cost_usd, usage, modelUsage).
    "claude": r"""
need("-p", "--output-format", "json", "--max-turns", "--max-budget-usd", "--permission-mode", "acceptEdits")
assert os.environ.get("ANTHROPIC_API_KEY"), "no key"
instruction = sys.stdin.read()
edit(workspace_files())
import json
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "duration_ms": 1200,
    "num_turns": 2, "result": "Done: " + instruction[:20], "session_id": "s-1", "total_cost_usd": 0.5,
    "usage": {"input_tokens": 1000, "cache_creation_input_tokens": 200, "cache_read_input_tokens": 300,
              "output_tokens": 150},
    "modelUsage": {"claude-sonnet-4-5": {"inputTokens": 1000, "outputTokens": 150, "costUSD": 0.5}}}))
""",
    # Codex, `codex exec --json`: JSON Lines events (thread.started, turn.started,
    # item.completed, turn.completed with usage {input_tokens, cached_input_tokens, output_tokens}).
    "codex": r"""
need("exec", "--json", "--skip-git-repo-check", "-")
home = os.environ.get("CODEX_HOME")
if not home or not os.path.isdir(home):
    print("Error: CODEX_HOME does not point to a folder", file=sys.stderr); sys.exit(1)
assert os.environ.get("CODEX_API_KEY"), "no key"
sys.stdin.read()
edit(workspace_files())
import json
for event in ({"type": "thread.started", "thread_id": "t-1"}, {"type": "turn.started"},
              {"type": "item.completed", "item": {"id": "i-1", "type": "agent_message", "text": "done"}},
              {"type": "turn.completed",
               "usage": {"input_tokens": 2400, "cached_input_tokens": 1200, "output_tokens": 310}}):
    print(json.dumps(event))
""",
    # aider: its model announcement, then the token report after each message
    # ("Tokens: 2.3k sent, 145 received. Cost: $0.01 message, $0.01 session.").
    "aider": r"""
need("--yes-always", "--no-git", "--model", "--message-file", "--no-show-model-warnings")
args = sys.argv[1:]
model = args[args.index("--model") + 1]
files = [a for a in args if os.path.isfile(a) and a != args[args.index("--message-file") + 1]]
print(f"Aider v0.86.2\nMain model: {model} with diff edit format\nGit repo: none")
edit(files)
print("Tokens: 2.3k sent, 145 received. Cost: $0.0123 message, $0.0123 session.")
""",
    # llm, `llm prompt --usage`: the reply on stdout, "Token usage: N input, M output" on stderr.
    "llm": r"""
need("prompt", "--no-log", "--usage", "-x", "-m")
args = sys.argv[1:]
current = open(args[args.index("-f") + 1]).read() if "-f" in args else ""
sys.stdin.read()
print("```\n" + current + f"# edited by {TOOL}\n```")
print("Token usage: 120 input, 40 output", file=sys.stderr)
""",
}


def install(folder: Path, tool: str) -> Path:
    """Write the stand-in for `tool` into `folder` (to be put first on PATH)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / tool
    path.write_text(f"#!{sys.executable}\nTOOL = {tool!r}\n{_COMMON}\n{STAND_INS[tool]}")
    path.chmod(0o755)
    return path
