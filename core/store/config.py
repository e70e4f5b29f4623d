"""`.gen/config.toml` (hosts, generator commands, limits, policy) and the operator's own policy.

The repository's config decides what a generator runs and whether signatures are
required, so it counts only if no user other than the repository's owner could have
written it (`core.store.ownership`). Even then it may have arrived with the repository: what it
would run (its hosts and checks) and every setting that lowers a default counts only
once the operator allowed exactly that (`genjob allow`, pinned in `core.store.pins`); until
then the config runs nothing and lowers nothing, and `Config.held` says what waits.
The operator's `config.toml` in the user config folder (beside the worker key) sets a
floor that nothing in a repository can lower.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shlex
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    PositiveInt,
    PrivateAttr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import core_schema

from core.errors import BadInput
from core.model.canonical import canonical, read_bytes, sha256_bytes
from core.model.check_record import CheckName
from core.model.contract import MAX_CANDIDATES
from core.model.freshness import MAX_TTL
from core.model.presets import PRESETS, PresetName, PresetSettings, generator_line, preset_problem
from core.model.protected import DEFAULT_PROTECTED
from core.remote.rules import DEFAULT_LIMITS, FACTS, MAX_PASS_ENV, Limits, check_env_patterns
from core.store import ruff_settings
from core.store.layout import user_config_dir
from core.store.ownership import operator_owners, repository_owners, require_trusted
from core.store.pins import read_pins

MAX_CONFIG_BYTES = 1 << 20

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)
# The most replays `policy.auto_replay` may make down one job's chain: each is a model call.
MAX_AUTO_REPLAYS = 10

_CONFIG_TEMPLATE = """\
# genjob configuration. Everything here is local policy; nothing in it is shipped.

[policy]
# Apply only receipts signed by a key in .gen/trusted_keys/. Turning this off lets
# unsigned receipts be applied; every view then says so.
require_signature = true
# A lease whose heartbeat is older than its ttl marks its job ORPHANED.
lease_ttl = 120
# Whether the board's approve also commits the applied paths (with a Genjob-Key:
# trailer, like `genjob apply --commit`) in a git repository; the preflight can change it.
commit_on_approve = false
# Sign those commits with your SSH key (`genjob keygen --operator`), as git does with
# gpg.format = ssh, each naming the job's in-toto attestation in a trailer.
# sign_commits = false
# A job minted over paths a job in flight also may write: "warn" says so, "serialize"
# claims it only once the older ones are applied or closed (replaying it first if they
# changed its inputs), "refuse" does not mint it.
# overlapping = "warn"
# Let `genjob apply --ready --watch` apply, with no person in the loop, every received job
# that verifies and whose required checks passed ("checked"); "never" only lists them.
# auto_apply = "never"
# Let `genjob apply --ready` three-way merge a STALE receipt over the tree unasked, when
# every required check passed on it (`genjob apply KEY --merge` does it by hand).
# auto_merge = false
# Let `genjob apply --ready` replay a job whose STALE receipt it could not merge (the merge
# conflicts, or cannot say what the tree's change meant to it): a new model call, made at
# most auto_replay_attempts times down one job's chain of replays.
# auto_replay = false
# auto_replay_attempts = 1
# Checks (see [checks.NAME] below) that must have passed on a receipt's exact outputs
# before apply writes them.
# require_checks = ["tests"]
# A generator that exits 0 having changed nothing (every output equals its input) gets
# an `ok` receipt flagged "nothing changed" everywhere it is shown; true: a `rejected` one.
# refuse_no_change = false
# Best-of-N: ship every job as this many candidates at once, spread over the hosts it is
# shipped to, each with its own signed receipt; `genjob apply KEY --candidate N` picks one.
# candidates = 1
# What judges or runs a job: its tests, CI, git hooks, files an editor or shell runs on
# opening, coding agents' settings, lock files. A job that may write one is flagged when
# minted, listed and approved; apply writes such an output only when you approve that job
# explicitly (`genjob apply KEY --protected`, or `p` in the board's preflight). Patterns
# as in .gitignore: `*` within a name, `**` across folders, no `/` for a name anywhere.
protected_paths = [
{protected}
]

[limits]
# What a generator may send back, per file and in all, and how many files.
max_file_bytes = 67108864
max_total_bytes = 536870912
max_files = 1000
# How much of the generator's output is kept as evidence.
max_tail_bytes = 65536

# A generator host. `generator` is a command line; {instruction_file}, {job_file},
# {paths} and {workdir} are replaced by shell-quoted values. The instruction reaches
# the generator only as a file (and $GENJOB_INSTRUCTION_FILE), never as shell text.
[hosts.local]
# A STAND-IN, not a model: it only appends a comment quoting the instruction to each
# file, so that a round trip works at once. Point `generator` at a real tool (aider,
# codex, claude, llm: `genjob help hosts` shows them) or use `tidy` below.
# It runs here, in a fresh temp workspace, with a clean environment, under bubblewrap
# when this machine has it: no network, nothing of your home, SSH keys or genjob's key,
# its workspace the only place it can write. A generator that calls a model's API opts
# in: network = true, and read_only = ["~/tools/agent"] for what it must read.
# sandbox = "auto"     # "bwrap" (refused without bwrap) or "none" (unsandboxed, said so)
transport = "local"
generator = "python3 -m core.remote.demo_generator"
timeout = 300
concurrency = 2

[hosts.tidy]
# A real generator that needs no model, no key and no network: ruff removes unused
# imports, modernises syntax, sorts imports and formats the job's Python files
# (other files are left as they are). `genjob ship KEY --host tidy`. It needs ruff
# installed for the Python genjob runs on; without it a run stops saying how to install it.
transport = "local"
# {ruff_settings} passes the repository's own ruff settings (its line length, quotes, ...).
generator = "python3 -m ruff --version >/dev/null 2>&1 || { echo \\"tidy needs ruff, not installed for \
$(command -v python3): pip install ruff there, or uv tool install genjob --with ruff\\" >&2; exit 127; }; \
python3 -m ruff check --no-cache --fix --quiet --select F401,I,UP --exit-zero {ruff_settings} {paths} \
&& python3 -m ruff format --no-cache --quiet {ruff_settings} {paths}"
timeout = 120
concurrency = 2

# [hosts.scratch]
# transport = "ssh"
# address = "gen@203.0.113.7"
# port = 22
# identity = "~/.ssh/id_ed25519"
# known_hosts = "~/.ssh/known_hosts"
# python = "/usr/bin/python3"   # runs genjob's runner there (default: python3 on the PATH)
# A coding agent run unattended, with its own limits (`genjob help hosts`, Presets):
# preset = "aider"             # or "claude", "codex", "llm"; or generator = "any command line"
# model = "gpt-4o"
# env_file = "/home/gen/aider.env"   # on that host: OPENAI_API_KEY=...
# timeout = 900
# concurrency = 2

# [hosts.pods]
# Any command that yields a pipe to a Python on the far side: kubectl exec -i, docker
# exec -i, srun, or OpenSSH's own ssh with your ~/.ssh/config (`genjob help hosts`,
# "Running on a cluster"). genjob adds the runner's start to the end of it.
# transport = "command"
# command = ["kubectl", "exec", "-i", "-n", "gen", "deploy/generator", "--"]
# preset = "claude"
# env_file = "/etc/genjob/claude.env"
# concurrency = 4
# candidates = 2          # each job shipped here alone runs as two candidates

# Checks run on a receipt's outputs before you approve it: `genjob check KEY`, and the
# board runs them as each receipt arrives. Each runs in a scratch copy of the repository
# (tracked files, the job's inputs, the receipt's outputs written in), never in your tree,
# under bubblewrap: no network, nothing of your home, keys or untracked files, and the
# scratch copy the only place it can write. {paths} becomes the job's output paths,
# shell-quoted. `python3` is the interpreter genjob runs on.
# [checks.tests]
# run = "python3 -m unittest discover -s tests"
# timeout = 600
# sandbox = "bwrap"          # "none" runs it unsandboxed, with all your rights; every view says so
# read_only = [".venv"]      # more it may read (relative paths are in this repository)
#
# [checks.lint]
# run = "python3 -m ruff check --no-cache {paths}"
# timeout = 120
#
# [check_runs]
# on_receipt = true          # the board runs every check as a receipt arrives
# concurrency = 2            # checks at once

# What model runs may cost, in dollars, as each run reports it (claude, codex, aider
# and llm presets): a dispatch that could pass a limit is refused, saying which and how
# much is left.
# [budget]
# per_job = 2.0
# per_host = 50.0
# hosts = { claude = 20.0 }  # a host's own limit, in place of per_host
"""
# The config `genjob init` writes: the template with the protected paths' defaults filled in.
DEFAULT_CONFIG = _CONFIG_TEMPLATE.replace("{protected}", "\n".join(f'    "{p}",' for p in DEFAULT_PROTECTED))


class Policy(BaseModel):
    model_config = _STRICT
    require_signature: bool = True
    lease_ttl: Annotated[float, Field(gt=0, le=MAX_TTL)] = 120.0
    commit_on_approve: bool = False
    # Sign every commit apply makes with the operator's SSH key (`genjob keygen --operator`),
    # with the job's attestation named in a trailer (`genjob apply --commit --sign`).
    sign_commits: bool = False
    # Checks that must have passed on a receipt's exact outputs before it is applied.
    require_checks: list[CheckName] = []
    # A run that exits 0 and changes nothing ends in a `rejected` receipt, not a flagged `ok`.
    refuse_no_change: bool = False
    # Best-of-N: how many candidates every shipped job runs, spread over the hosts it is
    # shipped to; a host's own `candidates` wins for a job shipped to that host alone.
    candidates: Annotated[int, Field(ge=1, le=MAX_CANDIDATES)] = 1
    # What judges or runs a job (its tests, CI, hooks, agent settings, lock files): a job
    # that may write one is flagged, and apply writes it only when approved explicitly.
    protected_paths: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f]+$")]],
        Field(max_length=256),
    ] = list(DEFAULT_PROTECTED)
    # A job minted over paths a job in flight may write: said ("warn"), held back from its
    # claim until the older ones are applied or closed, and replayed then if they moved its
    # inputs ("serialize"), or not minted at all ("refuse"). Each only adds a warning or
    # makes genjob stricter, so none needs the operator's consent.
    overlapping: Literal["warn", "serialize", "refuse"] = "warn"
    # Whether `genjob apply --ready --watch` applies with no person in the loop: "never"
    # (it lists what is ready) or "checked" (every received job that verifies and passed
    # its required checks). Lowers the default: it counts only with the operator's consent.
    auto_apply: Literal["never", "checked"] = "never"
    # Whether `apply --ready` merges a STALE receipt over the tree unasked, when every
    # required check passed on it. Lowers the default, as auto_apply.
    auto_merge: bool = False
    # Whether `apply --ready` replays a job whose STALE receipt it could not merge (a new
    # model call, unasked), and how many replays it makes down one job's chain of replays
    # at most. Lowers the default, as auto_apply (the cap is part of what is consented to).
    auto_replay: bool = False
    auto_replay_attempts: Annotated[int, Field(ge=1, le=MAX_AUTO_REPLAYS)] = 1


# The `[limits]` table: the names and defaults of `core.remote.rules.Limits` (their one home, shipped
# to generator hosts), each a positive integer, no other key.
_LimitsTable = create_model(  # type: ignore[call-overload]
    "Limits",
    __config__=_STRICT,
    **{f.name: (PositiveInt, f.default) for f in dataclasses.fields(Limits)},
)


class _FromLimitsTable:
    """Validates a `core.remote.rules.Limits` as the `[limits]` table, so that a fault names its key."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(
            lambda table: Limits(**dict(table)), handler.generate_schema(_LimitsTable)
        )


# A host's name is a TOML key and also names its file under `.gen/fleet/`.
HOST_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
# A placeholder in a host's `cleanup`: one of the facts the runner reports (`FACTS`).
CLEANUP_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class Host(BaseModel):
    model_config = _STRICT
    transport: Literal["local", "ssh", "command"]
    generator: Annotated[str, Field(min_length=1)]
    # transport = "command": the argv that yields a stdin/stdout pipe to a Python on the
    # far side (`kubectl exec -i ... --`, `docker exec -i NAME`, `srun ...`, `ssh -T host`).
    command: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] | None = None
    # How the runner's start is added to `command`: "argv" (as arguments) or "shell" (as one
    # shell-quoted line, for a far side that reads it through a shell, as ssh does). None:
    # "shell" when the program is ssh, else "argv".
    command_mode: Literal["argv", "shell"] | None = None
    address: str | None = None
    port: Annotated[int, Field(gt=0, lt=65536)] = 22
    identity: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    # The interpreter (3.8 or later) that runs genjob's stdlib-only runner on an ssh or a
    # command host; None means `python3` from the far side's PATH. The local transport
    # uses genjob's own.
    python: Annotated[str, Field(min_length=1)] | None = None
    timeout: Annotated[float, Field(gt=0)] = 900.0
    concurrency: Annotated[int, Field(gt=0)] = 1
    # Best-of-N on this host: a job shipped here alone runs this many candidates here.
    candidates: Annotated[int, Field(ge=1, le=MAX_CANDIDATES)] | None = None
    # A coding-agent CLI run unattended (`core.model.presets`): the preset writes `generator`
    # from these; `env_file` (on the host) holds the key `key_env` names.
    preset: PresetName | None = None
    model: Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")] | None = None
    max_turns: Annotated[int, Field(ge=1, le=1000)] | None = None
    max_budget_usd: Annotated[float, Field(gt=0, le=10_000)] | None = None
    env_file: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    key_env: str | None = None
    tool: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    api_host: str | None = None
    # transport = "local": the sandbox its runs get (`core.work.transport.local`): "auto" is
    # bubblewrap when it works on this machine and unsandboxed (said so) when not;
    # "bwrap" refuses to run without it; "none" never sandboxes. `network` shares the
    # machine's network; `read_only` names more paths the generator may read.
    sandbox: Literal["auto", "bwrap", "none"] = "auto"
    network: bool = False
    read_only: Annotated[list[Annotated[str, Field(min_length=1)]], Field(max_length=64)] = []
    # Variables of the runner's environment (a local host's: genjob's own) that the
    # generator gets too, by name or glob ("SLURM_*", "CUDA_VISIBLE_DEVICES"); nothing else
    # of that environment reaches it.
    pass_env: Annotated[list[str], Field(max_length=MAX_PASS_ENV)] = []
    # A command run on this machine when a run's worker died (by `requeue`, `recover` and a
    # stop of the orphaned job), to stop what the run left on the host: its placeholders are
    # the facts the runner reported, shell-quoted (`scancel {slurm_job_id}`).
    cleanup: Annotated[str, Field(min_length=1, max_length=4000)] | None = None

    @field_validator("pass_env")
    @classmethod
    def _env_patterns(cls, patterns: list[str]) -> list[str]:
        return check_env_patterns(patterns)

    @field_validator("cleanup")
    @classmethod
    def _cleanup_placeholders(cls, command: str | None) -> str | None:
        for name in CLEANUP_PLACEHOLDER.findall(command or ""):
            if name not in FACTS:
                raise ValueError(f"cleanup: {{{name}}} is not a fact the runner reports ({', '.join(FACTS)})")
        return command

    @property
    def stand_in(self) -> bool:
        """Whether this host runs genjob's demo generator, which only appends a comment."""
        return "core.remote.demo_generator" in self.generator

    @model_validator(mode="before")
    @classmethod
    def _preset_writes_generator(cls, raw: Any) -> Any:
        """A preset host's `generator` is the preset's line; a local one reaches the model's API."""
        if not isinstance(raw, dict) or raw.get("preset") is None:
            return raw
        if "generator" in raw:
            raise ValueError("give preset or generator, not both: a preset writes the generator line")
        if raw["preset"] not in PRESETS:
            raise ValueError(f"preset: {raw['preset']!r} is not one of {', '.join(PRESETS)}")
        fields = {
            f: raw.get(f)
            for f in ("model", "max_turns", "max_budget_usd", "env_file", "key_env", "tool", "api_host")
        }
        settings = PresetSettings(raw["preset"], **fields)
        if (problem := preset_problem(settings)) is not None:
            raise ValueError(problem)
        given = {"timeout": 600.0, **raw, "generator": generator_line(settings)}
        if given.get("transport") == "local":
            given.setdefault("network", True)
            if settings.env_file and settings.env_file not in given.get("read_only", []):
                given["read_only"] = [*given.get("read_only", []), settings.env_file]
        return given

    @property
    def preset_settings(self) -> PresetSettings | None:
        if self.preset is None:
            return None
        return PresetSettings(
            self.preset,
            model=self.model,
            max_turns=self.max_turns,
            max_budget_usd=self.max_budget_usd,
            env_file=self.env_file,
            key_env=self.key_env,
            tool=self.tool,
            api_host=self.api_host,
        )

    @model_validator(mode="after")
    def _ssh_needs_address(self) -> Host:
        if self.transport == "ssh" and not (self.address and self.identity):
            raise ValueError('an ssh host needs address = "user@host" and identity = "<key file>"')
        if self.transport == "local" and self.python is not None:
            raise ValueError(
                "python is for ssh hosts and command hosts; the local transport runs genjob's own interpreter"
            )
        if self.transport == "command" and self.command is None:
            raise ValueError(
                'a command host needs command = ["program", "arg", ...], an argv that yields a pipe '
                'to a Python on the far side (for example ["kubectl", "exec", "-i", "pod", "--"])'
            )
        if self.transport != "command" and (self.command is not None or self.command_mode is not None):
            raise ValueError('command and command_mode are for transport = "command" hosts')
        if self.transport != "local" and (self.sandbox != "auto" or self.network or self.read_only):
            raise ValueError(
                'sandbox, network and read_only are for transport = "local" hosts; a remote host '
                "is confined by its own means (its account, container or job scheduler)"
            )
        for path in self.read_only:
            if not os.path.isabs(os.path.expanduser(path)):
                raise ValueError(f"read_only: {path!r} is not an absolute path (or one under ~)")
        return self


class Check(BaseModel):
    """A named command run on a receipt's outputs in a scratch copy of the repository."""

    model_config = _STRICT
    run: Annotated[str, Field(min_length=1, max_length=4000)]
    timeout: Annotated[float, Field(gt=0)] = 600.0
    sandbox: Literal["bwrap", "none"] = "bwrap"
    # More paths the check may read (relative ones are in the repository), each at its own path.
    read_only: Annotated[list[Annotated[str, Field(min_length=1)]], Field(max_length=64)] = []


class Budget(BaseModel):
    """What model runs may cost, in dollars, as the runs themselves report it
    (`core.model.presets.parse_usage`): a dispatch that could pass a limit is refused."""

    model_config = _STRICT
    per_job: Annotated[float, Field(gt=0)] | None = None
    per_host: Annotated[float, Field(gt=0)] | None = None
    # A host's own limit, in place of `per_host`.
    hosts: dict[str, Annotated[float, Field(gt=0)]] = {}


class CheckRuns(BaseModel):
    """When the board runs checks by itself."""

    model_config = _STRICT
    on_receipt: bool = True
    concurrency: Annotated[int, Field(gt=0, le=64)] = 2


@dataclass(frozen=True)
class Held:
    """What a repository's config would run or lower, held back until the operator allows it."""

    path: Path
    changed: bool
    hosts: tuple[str, ...]
    checks: tuple[str, ...]
    lowers: tuple[str, ...]

    @property
    def what(self) -> str:
        parts = [f"host{'s' * (len(self.hosts) > 1)} {', '.join(self.hosts)}"] if self.hosts else []
        parts += [f"check{'s' * (len(self.checks) > 1)} {', '.join(self.checks)}"] if self.checks else []
        parts += [f"lowers {', '.join(self.lowers)}"] if self.lowers else []
        return "; ".join(parts)

    @property
    def hint(self) -> str:
        state = "changed since you allowed it" if self.changed else "waits for your approval"
        return (
            f"{self.path} {state}: until you allow it, it runs and lowers nothing ({self.what}); "
            "see what it would run and allow it with: genjob allow"
        )


class Config(BaseModel):
    model_config = _STRICT
    policy: Policy = Policy()
    limits: Annotated[Limits, _FromLimitsTable()] = DEFAULT_LIMITS
    hosts: dict[str, Host] = {}
    checks: dict[CheckName, Check] = {}
    check_runs: CheckRuns = CheckRuns()
    budget: Budget = Budget()
    # Set by `load_config` when the repository's hosts, checks or lowered settings wait for
    # the operator's consent; never read from TOML.
    _held: Held | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _no_notify(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and "notify" in raw:
            raise ValueError(
                "[notify] runs a command with your rights, so it is yours to set, never a repository's: "
                "move it to your own config.toml (genjob help dashboard, Notifications)"
            )
        return raw

    @property
    def held(self) -> Held | None:
        """What this config would run or lower and may not yet: None when nothing waits."""
        return self._held

    @model_validator(mode="after")
    def _required_checks_exist(self) -> Config:
        missing = [name for name in self.policy.require_checks if name not in self.checks]
        if missing:
            raise ValueError(
                f"policy.require_checks names {', '.join(missing)}, which no [checks.NAME] table defines"
            )
        return self

    @field_validator("hosts")
    @classmethod
    def _host_names(cls, hosts: dict[str, Host]) -> dict[str, Host]:
        for name in hosts:
            if not re.fullmatch(HOST_NAME, name):
                raise ValueError(
                    f"{name!r}: a host name is up to 64 letters, digits, '.', '_' or '-', "
                    "starting with a letter or digit"
                )
        return hosts


class OperatorPolicy(BaseModel):
    model_config = _STRICT
    # true: every repository requires trusted signatures, whatever its own config says.
    require_signature: bool = False
    # false: only the operator's own pinned keys count, never a repository's trusted_keys/.
    trust_repository_keys: bool = True
    # Repositories (their root folders) owned by another user that genjob may use anyway,
    # as git's safe.directory; read by `core.store.layout.safe_directories`.
    safe_directories: list[Annotated[str, Field(min_length=1)]] = []


class AgentLimits(BaseModel):
    """What `genjob mcp` lets a planning agent do: the operator's to set, never a repository's."""

    model_config = _STRICT
    # How many jobs an agent may mint in a minute, and in one session of the server.
    mints_per_minute: Annotated[int, Field(ge=0, le=10_000)] = 10
    mints_per_session: Annotated[int, Field(ge=0, le=1_000_000)] = 100
    # Whether the agent may ship a queued job to a host (which spends a model call).
    allow_ship: bool = False


# What a notification may be about (`core.store.notify`).
NotifyEvent = Literal["receipt", "check_failed", "approval", "host_failed"]


class NotifyChannel(BaseModel):
    """A channel of notifications: the events it is sent (none: it is off)."""

    model_config = _STRICT
    events: list[NotifyEvent] = []


class NotifyCommand(NotifyChannel):
    """A program run for each event, the event as JSON on its stdin (Slack, ntfy, a webhook)."""

    # Its argv: run as it is, never through a shell.
    run: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    timeout: Annotated[float, Field(gt=0, le=300)] = 10.0


class NotifySettings(BaseModel):
    """`[notify]`: the operator's alone, since its command runs with the operator's rights."""

    model_config = _STRICT
    bell: NotifyChannel = NotifyChannel()
    desktop: NotifyChannel = NotifyChannel()
    command: NotifyCommand | None = None


class OperatorConfig(BaseModel):
    model_config = _STRICT
    policy: OperatorPolicy = OperatorPolicy()
    mcp: AgentLimits = AgentLimits()
    notify: NotifySettings = NotifySettings()


_M = TypeVar("_M", bound=BaseModel)


# The candidates' count and hosts live here, not in core.review.candidates: `genjob ship` asks for
# them on every run, and a run of one should not import the candidates' machinery (30 ms).
def check_candidate_count(how_many: int) -> int:
    if not 1 <= how_many <= MAX_CANDIDATES:
        raise BadInput(f"--candidates: between 1 and {MAX_CANDIDATES}, not {how_many}")
    return how_many


def candidate_hosts(config: Config, names: Sequence[str], how_many: int | None = None) -> list[str]:
    """The host of each candidate, in order: `how_many` (else the setting) spread round
    robin over `names`. The setting is the host's own `candidates` for a job shipped to
    one host that has one, else the policy's."""
    if not names:
        raise BadInput("no host to ship to")
    if how_many is None:
        own = config.hosts[names[0]].candidates if len(names) == 1 else None
        how_many = own or config.policy.candidates
    check_candidate_count(how_many)
    if len(names) > how_many:
        raise BadInput(
            f"{len(names)} hosts for {how_many} candidate(s): give --candidates {len(names)} or more, "
            "or name fewer hosts"
        )
    return [names[i % len(names)] for i in range(how_many)]


def _parse_toml(path: Path, model: type[_M]) -> _M:
    parsed = _parsed(model, read_bytes(path, MAX_CONFIG_BYTES), str(path))
    assert isinstance(parsed, model)
    return parsed


# Every listing and command reads the config again, and a scan may read it once per job
# folder it judges: the same bytes give the same frozen model, so they are parsed once.
@functools.lru_cache(maxsize=32)
def _parsed(model: type[BaseModel], data: bytes, path: str) -> BaseModel:
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: not valid TOML ({exc})") from None
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = "".join(f"{p}: " for p in [".".join(str(p) for p in err["loc"])] if p)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown setting"
        elif err["type"] == "string_pattern_mismatch":
            msg = "a name is letters, digits, '.', '_' and '-' (64 at most), starting with a letter or digit"
        raise BadInput(f"{path}: {where}{msg}") from None


def load_operator_config() -> OperatorConfig:
    """The operator's `config.toml`; the defaults when there is none."""
    folder = user_config_dir()
    path = folder / "config.toml"
    if not os.path.lexists(path):
        return OperatorConfig()
    require_trusted(path, folder, operator_owners(), "an operator config")
    return _parse_toml(path, OperatorConfig)


# The settings of a host and of a check that decide what runs, with which rights, and where
# the job's files go: what the operator's consent is pinned to. (A timeout or a
# concurrency changes how much, not what: changing one does not ask again.)
# Of what a host runs, the settings added since configs were first pinned: each counts once
# it is set, so a config the operator allowed before they existed stays allowed as it is. A
# preset's settings are in its generator line too; named here so that none is missed.
_HOST_RUNS_ADDED = (
    "pass_env",
    "cleanup",
    "preset",
    "model",
    "max_turns",
    "max_budget_usd",
    "env_file",
    "key_env",
    "tool",
    "api_host",
)
_HOST_RUNS = (
    "transport",
    "generator",
    "command",
    "command_mode",
    "address",
    "port",
    "identity",
    "known_hosts",
    "python",
    "sandbox",
    "network",
    "read_only",
    *_HOST_RUNS_ADDED,
)
_CHECK_RUNS = ("run", "sandbox", "read_only")


def _lowered(config: Config) -> dict[str, object]:
    """The settings of `config` that are less safe than genjob's defaults."""
    lowered: dict[str, object] = {}
    if not config.policy.require_signature:
        lowered["policy.require_signature"] = False
    if config.policy.auto_apply != "never":
        lowered["policy.auto_apply"] = config.policy.auto_apply
    if config.policy.auto_merge:
        lowered["policy.auto_merge"] = True
    if config.policy.auto_replay:
        lowered["policy.auto_replay"] = config.policy.auto_replay_attempts
    unprotected = sorted(set(DEFAULT_PROTECTED) - set(config.policy.protected_paths))
    if unprotected:
        lowered["policy.protected_paths"] = unprotected
    defaults = DEFAULT_LIMITS.as_dict()
    for name, value in config.limits.as_dict().items():
        if value > defaults[name]:
            lowered[f"limits.{name}"] = value
    return lowered


def _host_runs(host: Host) -> dict[str, Any]:
    return {f: getattr(host, f) for f in _HOST_RUNS if f not in _HOST_RUNS_ADDED or getattr(host, f)}


def what_runs(config: Config) -> dict[str, dict[str, Any]]:
    """What a repository's config would run and lower: the part the operator consents to."""
    return {
        "hosts": {n: _host_runs(h) for n, h in sorted(config.hosts.items())},
        "checks": {n: {f: getattr(c, f) for f in _CHECK_RUNS} for n, c in sorted(config.checks.items())},
        "lowers": _lowered(config),
    }


def runs_digest(config: Config) -> str | None:
    """The sha256 of `what_runs`; None for a config that runs and lowers nothing."""
    runs = what_runs(config)
    return sha256_bytes(canonical(runs)) if any(runs.values()) else None


def read_repository_config(path: Path) -> Config:
    """A repository's config.toml as it is written, before consent and the operator's
    floor: the defaults when there is none; a bad one, or one another user could have
    written, a BadInput."""
    if not os.path.lexists(path):
        return Config()
    require_trusted(path, path.parent, repository_owners(path.parent.parent), "a config.toml")
    return _parse_toml(path, Config)


def _held_back(declared: Config, path: Path, pinned: str | None) -> Config:
    """`declared` with what it would run removed and what it would lower at the defaults."""
    runs = what_runs(declared)
    protected = [*declared.policy.protected_paths]
    protected += [p for p in DEFAULT_PROTECTED if p not in protected]
    policy = declared.policy.model_copy(
        update={
            "require_signature": True,
            "protected_paths": protected,
            "auto_apply": "never",
            "auto_merge": False,
            "auto_replay": False,
        }
    )
    limits = Limits(**{n: min(v, getattr(DEFAULT_LIMITS, n)) for n, v in declared.limits.as_dict().items()})
    config = declared.model_copy(update={"hosts": {}, "checks": {}, "policy": policy, "limits": limits})
    config._held = Held(
        path, pinned is not None, tuple(runs["hosts"]), tuple(runs["checks"]), tuple(runs["lowers"])
    )
    return config


def load_config(path: Path) -> Config:
    """Read a repository's config.toml as it may act: consent and the operator's floor
    applied (a config that waits for `genjob allow` runs and lowers nothing)."""
    config = read_repository_config(path)
    digest = runs_digest(config)
    if digest is not None:
        pinned = read_pins(path.parent.parent).config
        if pinned != digest:
            config = _held_back(config, path, pinned)
    if any(ruff_settings.TOKEN in h.generator for h in config.hosts.values()):
        config = _with_ruff_settings(config, path.parent.parent)
    if load_operator_config().policy.require_signature and not config.policy.require_signature:
        policy = config.policy.model_copy(update={"require_signature": True})
        config = config.model_copy(update={"policy": policy})
    return config


def _with_ruff_settings(config: Config, root: Path) -> Config:
    """Hosts whose line holds `{ruff_settings}` get the repository's ruff settings there;
    settings that cannot be read make those hosts' runs fail with the reason, and nothing else."""
    try:
        args = ruff_settings.ruff_config_args(ruff_settings.repository_ruff_settings(root))
    except BadInput as exc:
        failing = f"echo {shlex.quote(f'genjob: {exc}')} >&2; exit 2"
        hosts = {
            n: h.model_copy(update={"generator": failing}) if ruff_settings.TOKEN in h.generator else h
            for n, h in config.hosts.items()
        }
    else:
        hosts = {
            n: h.model_copy(update={"generator": h.generator.replace(ruff_settings.TOKEN, args)})
            for n, h in config.hosts.items()
        }
    updated = config.model_copy(update={"hosts": hosts})
    updated._held = config._held
    return updated
