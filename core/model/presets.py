"""Coding-agent CLIs as host presets: the line each runs unattended, and what it cost.

A preset (`[hosts.NAME] preset = "claude"`, or `genjob init --generator claude`) writes a
host's `generator` line so that the tool never waits for a person: no browser login, no
confirmation, no chat prompt, with the tool's own limits. Before the tool starts, the
line checks what it cannot work without and fails at once, in one line, when it is
missing: the tool on the PATH, the credentials file (`env_file`, sourced, on the host),
the key variable the tool reads. The instruction reaches the tool only as the job's
instruction file.

What a run cost is read from what the tool itself prints (`parse_usage`), in the format
its documentation names:
 - claude: the result object of `--output-format json` (`total_cost_usd`, `usage`,
   `modelUsage`);
 - codex: the JSON Lines events of `codex exec --json` (`turn.completed` with `usage`;
   codex reports tokens, not dollars);
 - aider: its token report, `Tokens: 2.3k sent, 145 received. Cost: $0.01 message,
   $0.02 session.`, and the `Main model:` line it starts with;
 - llm: the `Token usage: N input, M output` line that `llm prompt --usage` writes to
   stderr (llm reports tokens, not dollars).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

PresetName = Literal["claude", "codex", "aider", "llm"]
PRESETS: tuple[PresetName, ...] = ("claude", "codex", "aider", "llm")

# Claude Code's own limits, when the host names none.
DEFAULT_MAX_TURNS = 20
DEFAULT_MAX_BUDGET_USD = 1.0


@dataclass(frozen=True)
class Usage:
    """What one run reported it used: None where the tool does not say."""

    model: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "cost_usd": self.cost_usd,
        }


@dataclass(frozen=True)
class PresetSettings:
    """A host's preset and the settings its line is made of."""

    preset: PresetName
    model: str | None = None
    max_turns: int | None = None
    max_budget_usd: float | None = None
    env_file: str | None = None
    key_env: str | None = None
    # The tool's executable, when it is not on the host's PATH (a sandboxed local host's
    # PATH is the system's: /usr/local/bin, /usr/bin, /bin).
    tool: str | None = None
    # The model API's host[:port] the line checks it can reach before the tool starts
    # ("none": no check, for a host that reaches the API only through something else).
    api_host: str | None = None

    @property
    def reach(self) -> tuple[str, int] | None:
        given = self.api_host or API_HOSTS[self.preset]
        if given == "none":
            return None
        host, _, port = given.partition(":")
        return host, int(port or 443)

    @property
    def program(self) -> str:
        return shlex.quote(self.tool) if self.tool else PROGRAMS[self.preset]


# The program each preset runs, and the variable holding the key it needs by default.
PROGRAMS: dict[PresetName, str] = {"claude": "claude", "codex": "codex", "aider": "aider", "llm": "llm"}
KEY_ENV: dict[PresetName, str] = {
    "claude": "ANTHROPIC_API_KEY",
    "codex": "CODEX_API_KEY",
    "aider": "OPENAI_API_KEY",
    "llm": "OPENAI_API_KEY",
}
# Where each tool's model API is by default (aider and llm: OpenAI's, unless the host says).
API_HOSTS: dict[PresetName, str] = {
    "claude": "api.anthropic.com",
    "codex": "api.openai.com",
    "aider": "api.openai.com",
    "llm": "api.openai.com",
}
# How long the line waits to reach the model's API before it gives up, in seconds.
REACH_SECONDS = 10
_REACH = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), float(sys.argv[3]))"

# The presets that cannot pick a model by themselves without asking (aider offers a
# browser login; llm has no default key for one).
NEEDS_MODEL: tuple[PresetName, ...] = ("aider", "llm")


def generator_line(s: PresetSettings) -> str:
    """The `generator` line of a preset host: the checks that fail fast, then the tool."""
    return f"{_guard(s)} {_TOOL_LINES[s.preset](s)}"


def _fail(s: PresetSettings, why: str, code: int) -> str:
    message = shlex.quote(f"genjob preset {s.preset}: {why}")
    return f"{{ echo {message} >&2; exit {code}; }}"


def _guard(s: PresetSettings) -> str:
    """Shell that stops the run at once, saying why, when the tool cannot work here."""
    program = s.program
    key = s.key_env or KEY_ENV[s.preset]
    steps = []
    if s.env_file:
        env = shlex.quote(s.env_file)
        steps.append(f"[ -r {env} ] || {_fail(s, f'{s.env_file}: cannot read the credentials file', 2)};")
        steps.append(f"set -a; . {env}; set +a;")
    missing = _fail(s, f"{s.tool or program}: not found on this host PATH", 127)
    steps.append(f"command -v {program} >/dev/null 2>&1 || {missing};")
    where = (
        f"in {s.env_file}"
        if s.env_file
        else "in the environment (env_file names a file on the host that sets it)"
    )
    steps.append(f'[ -n "${{{key}:-}}" ] || {_fail(s, f"no {key} {where}", 2)};')
    if (reach := s.reach) is not None:
        # A tool without a network waits for one (codex: "Reconnecting... waiting for
        # network") or retries for minutes (aider): one connection attempt says so at once.
        host, port = reach
        unreachable = _fail(s, f"cannot reach {host}:{port}, the model API (no network here?)", 3)
        probe = f"python3 -c {shlex.quote(_REACH)} {shlex.quote(host)} {port} {REACH_SECONDS}"
        steps.append(
            f'[ -n "${{HTTPS_PROXY:-${{https_proxy:-}}}}" ] || {probe} 2>/dev/null || {unreachable};'
        )
    return " ".join(steps)


def _model(flag: str, s: PresetSettings) -> str:
    return f" {flag} {shlex.quote(s.model)}" if s.model else ""


def _claude(s: PresetSettings) -> str:
    # Print mode never prompts: edits are accepted, any other tool that would ask is denied.
    turns = s.max_turns or DEFAULT_MAX_TURNS
    budget = s.max_budget_usd or DEFAULT_MAX_BUDGET_USD
    return (
        f"{s.program} -p --output-format json --max-turns {turns} --max-budget-usd {budget:g} "
        f"--permission-mode acceptEdits{_model('--model', s)} < {{instruction_file}}"
    )


def _codex(s: PresetSettings) -> str:
    # codex keeps its state in CODEX_HOME and fails without one: a fresh one in $HOME.
    return (
        'export CODEX_HOME="$HOME/.codex"; mkdir -p "$CODEX_HOME"; '
        f"{s.program} exec --json --sandbox workspace-write --skip-git-repo-check --ephemeral"
        f"{_model('--model', s)} - < {{instruction_file}}"
    )


def _aider(s: PresetSettings) -> str:
    # A named model keeps aider from offering a browser login; history goes to $HOME,
    # outside the workspace, where anything beside the allowed paths rejects the job.
    return (
        f"{s.program}{_model('--model', s)} --yes-always --no-git --no-auto-commits --no-check-update "
        "--no-show-model-warnings --no-show-release-notes --no-analytics --no-pretty --no-stream "
        '--no-fancy-input --input-history-file "$HOME/input.history" '
        '--chat-history-file "$HOME/chat.history.md" --message-file {instruction_file} {paths}'
    )


def _llm(s: PresetSettings) -> str:
    # llm prints instead of editing: one call per allowed path, the current file as a
    # fragment, the first fenced block of the reply written over it.
    system = shlex.quote(
        "Rewrite the file named below as instructed. "
        "Reply with its complete new content in one fenced code block."
    )
    return (
        'export LLM_USER_PATH="$HOME/llm"; for path in {paths}; do '
        f'if [ -f "$path" ]; then set -- -f "$path"; else set --; fi; '
        f'{s.program} prompt{_model("-m", s)} --no-log --usage -x -s {system} "$@" "File: $path" '
        '< {instruction_file} > "$HOME/reply" || exit $?; '
        'mkdir -p -- "$(dirname -- "$path")"; mv -- "$HOME/reply" "$path"; done'
    )


_TOOL_LINES: dict[PresetName, Callable[[PresetSettings], str]] = {
    "claude": _claude,
    "codex": _codex,
    "aider": _aider,
    "llm": _llm,
}


def preset_problem(s: PresetSettings) -> str | None:
    """What is wrong with a preset's settings, in one sentence; None when nothing is."""
    if s.preset in NEEDS_MODEL and not s.model:
        return f'preset = "{s.preset}" needs model = "..." (without one, {s.preset} asks instead of running)'
    if s.preset != "claude" and (s.max_turns is not None or s.max_budget_usd is not None):
        return 'max_turns and max_budget_usd are Claude Code\'s own limits: for preset = "claude"'
    if s.env_file is not None and not s.env_file.startswith("/"):
        return f"env_file: {s.env_file!r} is not an absolute path on the host"
    if s.tool is not None and not s.tool.startswith("/"):
        return f"tool: {s.tool!r} is not an absolute path on the host (a name is looked up on its PATH)"
    if s.api_host is not None and not re.fullmatch(r"none|[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?", s.api_host):
        return f'api_host: {s.api_host!r} is not host or host:port (or "none")'
    if s.key_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", s.key_env):
        return f"key_env: {s.key_env!r} is not an environment variable's name"
    return None


# --- what a run cost ------------------------------------------------------------------


def parse_usage(preset: PresetName, output: bytes, model: str | None = None) -> Usage | None:
    """What the run's output says it used; None when it says nothing (a run that failed
    before the tool started, a tool that printed no report). `model`: the host's, for a
    tool that does not print the one it used."""
    text = output.decode("utf-8", "replace")
    return _PARSERS[preset](text, model)


def _json_objects(text: str) -> Iterator[dict[str, Any]]:
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line, parse_constant=_no_constant)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 53 else None


def _dollars(value: object) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e9
    return float(value) if ok else None  # type: ignore[arg-type]


def _claude_usage(text: str, model: str | None) -> Usage | None:
    """The last `"type": "result"` object of `--output-format json`."""
    results = [o for o in _json_objects(text) if o.get("type") == "result"]
    if not results:
        return None
    result = results[-1]
    found = result.get("usage")
    usage: dict[str, Any] = found if isinstance(found, dict) else {}
    fresh = _count(usage.get("input_tokens"))
    cached = [_count(usage.get(k)) or 0 for k in ("cache_creation_input_tokens", "cache_read_input_tokens")]
    models = result.get("modelUsage")
    named = next(iter(models), None) if isinstance(models, dict) else None
    return Usage(
        model=named if isinstance(named, str) else model,
        tokens_in=None if fresh is None else fresh + sum(cached),
        tokens_out=_count(usage.get("output_tokens")),
        cost_usd=_dollars(result.get("total_cost_usd")),
    )


def _codex_usage(text: str, model: str | None) -> Usage | None:
    """The `usage` of every `turn.completed` event of `codex exec --json`, summed."""
    turns = [
        o["usage"]
        for o in _json_objects(text)
        if o.get("type") == "turn.completed" and isinstance(o.get("usage"), dict)
    ]
    if not turns:
        return None
    return Usage(
        model=model,
        tokens_in=sum(_count(t.get("input_tokens")) or 0 for t in turns),
        tokens_out=sum(_count(t.get("output_tokens")) or 0 for t in turns),
    )


_AIDER_TOKENS = re.compile(
    r"Tokens: ([\d.]+)([kM]?) sent(?:, [\d.]+[kM]? cache \w+)*, ([\d.]+)([kM]?) received\."
    r"(?: Cost: \$([\d.]+) message, \$([\d.]+) session\.)?"
)
_AIDER_MODEL = re.compile(r"^(?:Main model|Model): (\S+)", re.M)
_SCALE = {"": 1, "k": 1_000, "M": 1_000_000}


def _scaled(number: str, suffix: str) -> int:
    return round(float(number) * _SCALE[suffix])


def _aider_usage(text: str, model: str | None) -> Usage | None:
    """aider's token reports, one per message, summed; the session's cost from the last."""
    reports = list(_AIDER_TOKENS.finditer(text))
    if not reports:
        return None
    named = _AIDER_MODEL.search(text)
    session = reports[-1].group(6)
    return Usage(
        model=named.group(1) if named else model,
        tokens_in=sum(_scaled(m.group(1), m.group(2)) for m in reports),
        tokens_out=sum(_scaled(m.group(3), m.group(4)) for m in reports),
        cost_usd=float(session) if session else None,
    )


_LLM_TOKENS = re.compile(r"^Token usage: ([\d,]+) input, ([\d,]+) output", re.M)


def _llm_usage(text: str, model: str | None) -> Usage | None:
    """Every `Token usage:` line of `llm prompt --usage` (one call per path), summed."""
    reports = list(_LLM_TOKENS.finditer(text))
    if not reports:
        return None
    return Usage(
        model=model,
        tokens_in=sum(int(m.group(1).replace(",", "")) for m in reports),
        tokens_out=sum(int(m.group(2).replace(",", "")) for m in reports),
    )


_PARSERS: dict[PresetName, Callable[[str, str | None], Usage | None]] = {
    "claude": _claude_usage,
    "codex": _codex_usage,
    "aider": _aider_usage,
    "llm": _llm_usage,
}


# --- what runs cost, summed -------------------------------------------------------------

# The attempt record (`.gen/attempts/<key>.jsonl`) a preset host's run leaves.
USAGE = "usage"


@dataclass
class Spend:
    """What some runs reported, summed (dollars only where the tool says them)."""

    runs: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0

    def add(self, record: dict[str, object]) -> None:
        self.runs += 1
        self.tokens_in += int(_number(record.get("tokens_in")))
        self.tokens_out += int(_number(record.get("tokens_out")))
        self.cost_usd += _number(record.get("cost_usd"))

    def describe(self) -> str:
        cost = f"${self.cost_usd:.4f}" if self.cost_usd else "no dollars reported"
        return f"{cost}, {self.tokens_in:,} tokens in, {self.tokens_out:,} out, {self.runs} run(s)"

    def to_dict(self) -> dict[str, object]:
        return {
            "runs": self.runs,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "cost_usd": self.cost_usd,
        }


def _number(value: object) -> int | float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e15
    return value if ok else 0  # type: ignore[return-value]


def spend_of(records: Iterable[dict[str, object]]) -> Spend:
    """The `usage` records among a job's attempt records, summed."""
    spend = Spend()
    for record in records:
        if record.get("event") == USAGE:
            spend.add(record)
    return spend
