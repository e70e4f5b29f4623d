"""The `genjob` command: one subcommand per core operation, same messages as the board."""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from core.errors import GenjobError
from core.model.freshness import MAX_TTL
from core.model.lifecycle import State
from core.model.protected import PROTECTED_HINT, protected_among
from core.model.protected import describe as describe_protected
from core.model.terminal import visible
from core.store.job_keys import resolve_key
from core.store.layout import Layout, find_root
from tui.cli.output import guarded, print_json, say

if TYPE_CHECKING:
    from core.model.standing import CheckStatus
    from core.store.scheduler import Cleanup

# Each command imports what it uses inside its body, so a command pays only for its own
# imports: `genjob ls` starts without pydantic, cryptography, asyncssh or textual.

F = TypeVar("F", bound=Callable[..., Any])


#: Commands kept in modules of their own: each module is imported when its command is
#: named (or when help lists them all).
_ELSEWHERE = {
    "candidates": ("tui.cli.candidates", "candidates_cmd"),
    "check": ("tui.cli.check", "check_cmd"),
    "demo": ("tui.cli.dashboard", "demo"),
    "discard": ("tui.cli.discard", "discard_cmd"),
    "heartbeat": ("tui.cli.heartbeat", "heartbeat_cmd"),
    "help": ("tui.cli.help", "help_cmd"),
    "hosts": ("tui.cli.fleet", "hosts_cmd"),
    "mcp": ("tui.cli.clients", "mcp_cmd"),
    "serve": ("tui.cli.clients", "serve_cmd"),
    "ship": ("tui.cli.worker", "ship_cmd"),
    "tui": ("tui.cli.dashboard", "tui"),
    "worker": ("tui.cli.worker", "worker_cmd"),
}


class _Group(click.Group):
    """Runs each command `guarded` (one line on stderr for each fault, and its exit code),
    and finds the commands of `_ELSEWHERE` when they are named."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_ELSEWHERE})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in _ELSEWHERE:
            module, name = _ELSEWHERE[cmd_name]
            command = getattr(importlib.import_module(module), name)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        return guarded(functools.partial(super().invoke, ctx))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The repository (default: found by walking up from the current folder).",
)
@click.version_option(package_name="genjob", prog_name="genjob", message="%(prog)s %(version)s")
@click.pass_context
def main(ctx: click.Context, root: Path | None) -> None:
    """genjob: keyed, replayable code-generation jobs with verified receipts.

    The reference (formats, commands, the board, hosts, checks, trust, the threat model,
    architecture, benchmarks): `genjob help` lists its topics, `genjob help TOPIC` prints one.
    """
    ctx.obj = root


def layout_of(ctx: click.Context) -> Layout:
    return find_root(explicit=ctx.find_root().obj)


@main.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--generator",
    "preset",
    type=click.Choice(["claude", "codex", "aider", "llm"]),
    help="Also write a host that runs this coding agent unattended (`genjob help hosts`, Presets).",
)
@click.option("--model", help="The model the --generator host asks for (aider and llm need one).")
@click.option("--env-file", help="A file on the host that sets the tool's key (KEY=value lines).")
@click.pass_context
def init(
    ctx: click.Context, directory: Path | None, preset: str | None, model: str | None, env_file: str | None
) -> None:
    """Create .gen/ (queue, receipts, config.toml with the local host) in DIRECTORY or here."""
    from core.model.presets import PresetSettings
    from core.store.repo import init_repo, is_git_work_tree

    if preset is None and (model or env_file):
        raise GenjobError("--model and --env-file are for the host --generator writes: give --generator too")
    settings = PresetSettings(preset, model=model, env_file=env_file) if preset else None  # type: ignore[arg-type]
    root = directory or ctx.find_root().obj or Path.cwd()
    layout, made = init_repo(root, settings)
    for item in made:
        say(f"created {item}")
    say(f"genjob ready in {visible(str(layout.gen))}")
    if not is_git_work_tree(layout.root):
        say(
            f"warning: {visible(str(layout.root))} is not a git repository: `apply --commit` and the "
            "board's commit will not work here (run `git init` first if you want them)",
            err=True,
        )
    if settings is not None and made:
        name = settings.preset
        say(f"host `{name}` runs {name} unattended: `genjob ship KEY --host {name}`")
    if made:
        say(
            "hosts: `local` is a stand-in that only appends a comment to each file; `tidy` runs "
            "ruff for real (no model, no key). For a model, see `genjob help hosts` and edit "
            f"{visible(str(layout.config))}."
        )


@main.command()
@click.option("-m", "--message", help="The instruction.")
@click.option(
    "-f",
    "--file",
    "message_file",
    type=click.File("r"),
    help="Read the instruction from a file (- for stdin).",
)
@click.option(
    "--new", "new_paths", multiple=True, help="A path the job creates (must not exist). Repeatable."
)
@click.option("--schema", type=click.Choice(["v1", "v2"]), default="v2", show_default=True)
@click.option(
    "--allow-secrets", is_flag=True, help="Do not refuse instructions or files that look like credentials."
)
@click.argument("paths", nargs=-1)
@click.pass_context
def mint(
    ctx: click.Context,
    *,
    message: str | None,
    message_file: Any,
    new_paths: tuple[str, ...],
    schema: str,
    allow_secrets: bool,
    paths: tuple[str, ...],
) -> None:
    """Mint a job over PATHS into the queue and print its key."""
    from core.model.models import V1, V2
    from core.model.paths import repo_relative
    from core.plan.mint import build_job
    from core.plan.overlaps import forecast
    from core.store.config import load_config
    from core.store.queue import enqueue

    if (message is None) == (message_file is None):
        raise GenjobError("mint: give the instruction with exactly one of -m TEXT or -f FILE")
    instruction = message if message is not None else message_file.read()
    layout = layout_of(ctx)
    cwd = Path.cwd()
    rel = [repo_relative(layout.root, p, cwd) for p in paths]
    new = [repo_relative(layout.root, p, cwd) for p in new_paths]
    job = build_job(layout, instruction, rel, new, V1 if schema == "v1" else V2, allow_secrets=allow_secrets)
    config = load_config(layout.config)
    overlaps = forecast(layout, job, config)
    res = enqueue(layout, job)
    say(res.key)
    if not res.created:
        say(f"the same job exists already: {res.path.relative_to(layout.root)} ({res.folder})", err=True)
    for overlap in overlaps:
        say(visible(overlap.line()), err=True)
    protected = protected_among(job.allowed_paths, config.policy.protected_paths)
    if protected:
        say(f"note: {PROTECTED_HINT}: {visible(describe_protected(protected))}", err=True)


class StateChoice(click.Choice[str]):
    """A job state, typed in either case, named as `ls` shows it (QUEUED, RUNNING, ...) in
    help, errors and completion; the command gets the state's value."""

    def __init__(self) -> None:
        super().__init__([s.value for s in State], case_sensitive=False)

    def normalize_choice(self, choice: object, ctx: click.Context | None) -> str:
        return str(choice).upper()


@main.command("ls")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=StateChoice(),
    help="Only jobs in this state. Repeatable.",
)
@click.option("--json", "as_json", is_flag=True, help="A JSON array of job objects.")
@click.option(
    "--summary", is_flag=True, help="One line of counts of the open jobs, for a tmux or shell status bar."
)
@click.pass_context
def ls_cmd(ctx: click.Context, states: tuple[str, ...], as_json: bool, summary: bool) -> None:
    """List jobs with their derived states."""
    from tui.cli.listing import list_jobs, print_summary

    if summary and (states or as_json):
        raise GenjobError(
            "ls --summary counts every open state on one line: give it without --state or --json"
        )
    if summary:
        print_summary(ctx.find_root().obj)
        return
    list_jobs(layout_of(ctx), states, as_json)


@main.command()
@click.argument("key")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def show(ctx: click.Context, key: str, as_json: bool) -> None:
    """The job, its state, lease, receipt verification, diffs and timeline."""
    from core.model.presets import USAGE, spend_of
    from core.model.terminal import age
    from core.read.inspect_job import job_detail
    from core.store.overlaps import overlaps_of

    layout = layout_of(ctx)
    d = job_detail(layout, resolve_key(layout, key))
    overlaps = overlaps_of(layout, d.row.key)
    if as_json:
        print_json({**d.to_dict(), "overlaps": [o.to_dict() for o in overlaps]})
        return
    r = d.row
    say(f"job {r.key}  {r.state.value}" + (f"  ({visible(r.schema)})" if r.schema else ""))
    for overlap in overlaps:
        say(visible(overlap.line()))
    if r.digest:
        say(f"digest  {r.digest}")
    if r.instruction:
        say("instruction:")
        for line in r.instruction.splitlines():
            say(f"  {visible(line)}")
    if d.document:
        say("inputs:")
        for p, h in sorted(d.document["inputs"].items()):
            say(f"  {visible(p)}  {h or '(new file)'}")
    if d.protected:
        say(f"{PROTECTED_HINT}: {visible(describe_protected(d.protected))}")
    for p in dict.fromkeys(r.problems + tuple(d.errors)):  # each fault once, in order
        say(f"! {visible(p)}")
    if r.state is State.INVALID:
        say(f"  it cannot be run or applied; set it aside with: genjob discard {r.key}")
    for line in d.host_failures:
        say(f"host    {visible(line)}")
    if d.lease:
        ls = d.lease
        say(
            f"lease   {visible(ls.worker)} pid {ls.pid} on {visible(ls.host)}, attempt {ls.token}, "
            f"heartbeat {age(time.time() - ls.heartbeat)} ago, ttl {ls.ttl:g}s"
        )
    if (spend := spend_of(d.attempts)).runs:
        models = ", ".join(sorted({str(r.get("model")) for r in d.attempts if r.get("event") == USAGE}))
        say(f"cost    {spend.describe()} ({visible(models)})")
    if d.commit == "pending":
        say(f"commit  applied, not committed: genjob apply {r.key} --commit (or genjob recover) commits it")
    elif d.commit_sha:
        say(f"commit  {d.commit_sha}")
    if d.candidates:
        picked = f"candidate {d.chosen} chosen" if d.chosen else f"none chosen: genjob candidates {r.key}"
        say(f"candidates  {d.candidates}, {picked}")
    if d.verification and r.state is not State.INVALID:  # its fault is said above, once
        from core.review.check_status import check_statuses
        from core.store.config import load_config

        job = d.located.job if d.located is not None else None
        config = load_config(layout.config)
        statuses = check_statuses(layout, job, config, d.verification) if job is not None else []
        print_checks(d.verification, statuses)
    for diff in d.diffs:
        say(f"--- {visible(diff.path)}: {diff.status} +{diff.added} -{diff.removed}")
        if diff.note:
            say(f"    {visible(diff.note)}")
        if diff.text:
            say(_printable_block(diff.text), nl=False)
    print_runs(d.attempts)
    print_login_output(layout, r.key)
    if d.timeline:
        say("timeline:")
        for e in d.timeline:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.get("at", 0)))
            extra = {k: v for k, v in e.items() if k not in ("at", "event", "key", "by")}
            event, by = visible(str(e.get("event"))), visible(str(e.get("by")))
            say(f"  {stamp}  {event}  by {by}  {visible(json.dumps(extra))}")
    if d.log_tail:
        say("output (the generator's, as kept in .gen/logs/):")
        say(_output_block(d.log_tail), nl=False)


def _printable_block(text: str) -> str:
    return "".join(visible(line) + "\n" for line in text.splitlines())


# A line of kept output longer than this is cut, as the board's Output tab cuts it.
OUTPUT_LINE_CHARS = 4096


def _output_block(text: str) -> str:
    """The generator's kept output, each line indented, escaped and cut at
    OUTPUT_LINE_CHARS; CRLF as a plain line end (OpenSSH's client ends its lines so)."""
    from core.remote.rules import cut_lines

    lines = cut_lines(text.replace("\r\n", "\n"), OUTPUT_LINE_CHARS).splitlines()
    return "".join(f"  {visible(line)}\n" for line in lines)


def print_runs(records: Sequence[dict[str, Any]]) -> None:
    """What the scheduler said about each run (`started` with facts) and each host cleanup
    that ran, from the job's attempt records."""
    from core.store.scheduler import CLEANED_UP, STARTED

    for r in records:
        which = f"attempt {r.get('attempt')}" + (f" candidate {r['candidate']}" if "candidate" in r else "")
        host = visible(str(r.get("host")))
        if r.get("event") == STARTED and isinstance(r.get("facts"), dict) and r["facts"]:
            facts = " ".join(f"{name}={value}" for name, value in sorted(r["facts"].items()))
            say(f"run     {which} on {host}: {visible(facts)}")
        elif r.get("event") == CLEANED_UP:
            how = "ok" if r.get("ok") is True else "FAILED"
            said = r.get("command") if r.get("ok") is True else r.get("detail")
            say(f"cleanup {which} on {host}: {how}: {visible(str(said))}")


def print_login_output(layout: Layout, key: str) -> None:
    """Where the host's login shell output (printed before the runner started) is kept."""
    folder = layout.log_dir(key)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".login"))
    except OSError:
        return
    for name in names:
        size = (folder / name).lstat().st_size
        say(
            f"login   {visible(name[: -len('.login')])}: the host printed {size} bytes before the runner "
            f"started, kept in {visible(str((folder / name).relative_to(layout.root)))}"
        )


_MARKS = {"passed": "ok  ", "failed": "FAIL", "not run": "----", "stale": "old ", "running": "run "}


def print_checks(v: Any, statuses: Sequence[CheckStatus] = ()) -> None:
    """The receipt's verification step by step, the job's checks, and whether apply may run."""
    from core.model.standing import PASSED, SKIPPED
    from core.review.check_status import run_hint

    marks = {PASSED: "ok  ", SKIPPED: "skip"}
    policy = "required" if v.signature_required else "NOT required by policy"
    say(f"verification of {v.key} (signature {policy}):")
    for c in v.checks:
        say(f"  [{marks.get(c.status, 'FAIL')}] {c.name:9} {visible(c.detail)}")
    if statuses:
        say("checks:")
    for s in statuses:
        need = "required" if s.required else "optional"
        say(f"  [{_MARKS[s.state.value]}] {s.name:12} {need:8} {visible(s.detail)}")
    if any(not s.sandboxed for s in statuses):
        say('  note: some checks run UNSANDBOXED (sandbox = "none"): with all your rights, network included')
    missing = [s.name for s in statuses if s.required and not s.satisfied]
    if v.unchanged:
        from core.review.verify import NOTHING_CHANGED

        say(f"  note: {NOTHING_CHANGED}")
    if not v.ok:
        say("  => apply refused")
    elif missing:
        say(f"  => apply refused until required checks pass: {run_hint(v.key, missing)}")
    else:
        say("  => apply may run")


@main.command("claim")
@click.argument("key", required=False)
@click.option("--worker", required=True, help="Who claims (recorded in the lease and attempts).")
@click.option(
    "--ttl",
    type=click.FloatRange(min=0, max=MAX_TTL, min_open=True),
    default=None,
    help=f"Lease ttl in seconds, at most {MAX_TTL:g} (default: policy.lease_ttl).",
)
@click.pass_context
def claim_cmd(ctx: click.Context, key: str | None, worker: str, ttl: float | None) -> None:
    """Claim KEY, or the oldest queued job. Exit 1 when nothing is left.

    The lease names the process that ran this command (its parent) as the holder: when
    that process dies, or the lease's ttl passes without a heartbeat, the job is ORPHANED.
    """
    from core.plan.overlaps import replay_waiting
    from core.store.config import load_config
    from core.store.queue import claim

    layout = layout_of(ctx)
    ttl = ttl or load_config(layout.config).policy.lease_ttl
    given = resolve_key(layout, key) if key else None
    c = claim(layout, worker, given, ttl, pid=os.getppid(), replay=replay_waiting)
    say(c.key)
    say(f"claimed by {worker}, attempt {c.lease.token}, lease ttl {ttl:g}s", err=True)


@main.command("requeue")
@click.argument("key")
@click.option("--force", is_flag=True, help="Take the job back even from a live lease.")
@click.pass_context
def requeue_cmd(ctx: click.Context, key: str, force: bool) -> None:
    """Put an ORPHANED job back in the queue, byte for byte."""
    from core.store.queue import requeue

    layout = layout_of(ctx)
    requeued = requeue(layout, resolve_key(layout, key), force)
    say(f"requeued: {requeued.path.relative_to(layout.root)}")
    report_cleanups(requeued.cleanups)


def report_cleanups(cleanups: Sequence[Cleanup]) -> None:
    """A line for each host cleanup a command ran; exit 1 when one failed (what the
    command did stays done)."""
    for cleanup in cleanups:
        say(visible(cleanup.line), err=not cleanup.ok)
    if any(not c.ok for c in cleanups):
        sys.exit(1)


@main.command("verify")
@click.argument("key")
@click.option("--candidate", type=int, default=None, help="Check candidate N's receipt instead.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def verify_cmd(ctx: click.Context, key: str, candidate: int | None, as_json: bool) -> None:
    """Check a job's receipt (or a candidate's) step by step, and list its checks. Exit 0
    only when apply may run."""
    from core.review.check_status import check_statuses
    from core.review.verify import verify, verify_candidate
    from core.store.candidate_store import load
    from core.store.config import load_config
    from core.store.queue import locate

    layout = layout_of(ctx)
    loc = locate(layout, resolve_key(layout, key))
    config = load_config(layout.config)
    if candidate is not None:
        v = verify_candidate(layout, loc.job, config, load(layout, loc.key, candidate))
    else:
        v = verify(layout, loc.job, config)
    statuses = check_statuses(layout, loc.job, config, v)
    missing = [s.name for s in statuses if s.required and not s.satisfied]
    if as_json:
        states = [s.to_dict() for s in statuses]
        print_json({**v.to_dict(), "check_states": states, "apply_may_run": v.ok and not missing})
    else:
        print_checks(v, statuses)
    sys.exit(0 if v.ok and not missing else 1)


@main.command("apply")
@click.argument("key", required=False)
@click.option("--candidate", type=int, default=None, help="Choose candidate N as the job's receipt first.")
@click.option("--commit", is_flag=True, help="Also make a git commit with a Genjob-Key: trailer.")
@click.option(
    "--protected",
    is_flag=True,
    help="You read its diff: write it even where it writes protected paths (tests, CI, hooks, ...).",
)
@click.option(
    "--sign/--no-sign",
    default=None,
    help="Sign the commit with your SSH key and attest the apply (default: policy.sign_commits).",
)
@click.option("--no-wait", is_flag=True, help="If another apply holds the apply lock, say who and exit 1.")
@click.option("--ready", is_flag=True, help="Apply every received job that verifies and passed its checks.")
@click.option("--watch", is_flag=True, help="With --ready: keep applying receipts as they arrive.")
@click.option("--merge", is_flag=True, help="A stale receipt: three-way merge it over the tree as it is.")
@click.pass_context
def apply_cmd(
    ctx: click.Context,
    key: str | None,
    candidate: int | None,
    commit: bool,
    protected: bool,
    sign: bool | None,
    no_wait: bool,
    ready: bool,
    watch: bool,
    merge: bool,
) -> None:
    """Verify, then write KEY's outputs into the tree atomically (--ready: every ready job)."""
    from core.review.candidates import apply_choice
    from tui.cli.apply_plane import apply_plane, held_writer

    layout = layout_of(ctx)
    modes = {"no_wait": no_wait, "ready": ready, "watch": watch, "merge": merge}
    if apply_plane(layout, key, commit, protected=protected, sign=sign, **modes):
        return
    assert key is not None  # apply_plane refuses a plain apply without one
    ctx.with_resource(held_writer(layout, wait=not no_wait))
    if sign and not commit:
        raise GenjobError("apply --sign signs the commit: give --commit too")
    res = apply_choice(layout, resolve_key(layout, key), candidate, commit, protected=protected, sign=sign)
    if res.already and res.commit:
        say(f"{res.key}: applied already; committed {res.commit}")
        return
    if res.already:
        say(f"{res.key}: applied already; nothing to do")
        if res.uncommitted:
            say(f"{res.key}: applied, not committed: genjob apply {res.key} --commit commits it", err=True)
        return
    if res.verification and not res.verification.signature_required:
        say("note: applied under require_signature = false", err=True)
    say(f"applied {res.key}: {len(res.changed)} file(s) changed")
    for p in res.changed:
        say(f"  {visible(p)}")
    if res.commit:
        say(f"committed {res.commit}")


@main.command("reject")
@click.argument("key")
@click.option("--reason", required=True, help="Why (kept in the rejection record).")
@click.pass_context
def reject_cmd(ctx: click.Context, key: str, reason: str) -> None:
    """Close a job as rejected."""
    from core.store.queue import reject

    layout = layout_of(ctx)
    path = reject(layout, resolve_key(layout, key), reason)
    say(f"rejected: {path.relative_to(layout.root)}")


@main.command("cancel")
@click.argument("key")
@click.pass_context
def cancel_cmd(ctx: click.Context, key: str) -> None:
    """Ask the worker running KEY to stop; it ends the job with an aborted receipt."""
    from core.store.queue import request_cancel

    layout = layout_of(ctx)
    asked = request_cancel(layout, resolve_key(layout, key))
    say("cancel requested")
    report_cleanups(asked.cleanups)


@main.command("replay")
@click.argument("key")
@click.option("--allow-secrets", is_flag=True)
@click.pass_context
def replay_cmd(ctx: click.Context, key: str, allow_secrets: bool) -> None:
    """Mint a stale, failed or rejected job again against the current tree."""
    from core.plan.replay import replay

    layout = layout_of(ctx)
    res = replay(layout, resolve_key(layout, key), allow_secrets)
    say(res.key)
    if not res.created:
        say(f"the same replay exists already: {res.path.relative_to(layout.root)}", err=True)


@main.command("recover")
@click.pass_context
def recover_cmd(ctx: click.Context) -> None:
    """Finish interrupted applies and commits, and resolve inconsistent pairs (rules R1-R7)."""
    from core.review.recover import recover
    from tui.cli.apply_plane import held_writer

    ctx.with_resource(held_writer(layout_of(ctx), wait=True))
    report = recover(layout_of(ctx))
    for line in report.lines:
        say(visible(line))
    if not report.lines:
        say("nothing to recover")
    if report.left:
        say(f"genjob: {len(report.left)} thing(s) left to recover; see the lines above", err=True)
        sys.exit(1)


@main.command("keygen")
@click.option("--force", is_flag=True, help="Replace an existing key.")
@click.option(
    "--operator",
    is_flag=True,
    help="Make your own key instead, which signs attestations and commits (apply --commit --sign).",
)
def keygen_cmd(force: bool, operator: bool) -> None:
    """Make this machine's Ed25519 worker key (in the user's config folder); print the public key file.

    Both keys are OpenSSH keys: `ssh-keygen -y -f` reads them, and git signs with them."""
    from core.store.signing import keygen

    say(str(keygen(force, operator=operator)))


@main.command("attest")
@click.argument("key")
@click.pass_context
def attest_cmd(ctx: click.Context, key: str) -> None:
    """Write an applied job's in-toto attestation (a DSSE envelope, signed with your key).

    It lands in .gen/attestations/KEY.intoto.jsonl: the applied paths with their sha256,
    the job, the receipt and its signer, the check records and the apply record, each by
    digest, for anyone to check without genjob (genjob help audit)."""
    from core.model.canonical import read_bytes, sha256_bytes
    from core.review.attest import attest
    from core.store.signing import load_operator_key

    layout = layout_of(ctx)
    path = attest(layout, resolve_key(layout, key), load_operator_key())
    say(str(path.relative_to(layout.root)))
    say(f"sha256:{sha256_bytes(read_bytes(path))}", err=True)


@main.command("trust")
@click.argument("pubkey_file", type=click.Path(dir_okay=False, path_type=Path), required=False)
@click.option(
    "--operator",
    is_flag=True,
    help="Pin it for every repository, in your own config folder (no repository can widen that list).",
)
@click.option(
    "--allowed-signers",
    "print_signers",
    is_flag=True,
    help="Print the keys that count here as an OpenSSH allowed_signers file (ssh-keygen -Y verify, git).",
)
@click.pass_context
def trust_cmd(ctx: click.Context, pubkey_file: Path | None, operator: bool, print_signers: bool) -> None:
    """Pin a worker public key for this repository (or, with --operator, for every one).

    PUBKEY_FILE is a key's .pub file or an OpenSSH allowed_signers file (every Ed25519 key in
    it that may sign genjob receipts is pinned). The key file goes to .gen/trusted_keys/ and
    its fingerprint to your own pins: a key file that came with the repository counts only
    once you pin it here. With --allowed-signers, print the keys that count instead."""
    from core.model.canonical import read_bytes
    from core.model.sshsig import is_allowed_signers
    from core.store.signing import (
        allowed_signers,
        trust_allowed_signers,
        trust_anchors,
        trust_operator,
        trust_repository,
    )

    if print_signers:
        if pubkey_file is not None:
            raise GenjobError("trust --allowed-signers prints the pinned keys; it takes no file")
        repo = layout_of(ctx)
        say(allowed_signers(trust_anchors(repo.trusted_keys, repo.root)), nl=False)
        return
    if pubkey_file is None:
        raise GenjobError("trust: name the key's .pub file (or an allowed_signers file)")
    layout = None if operator else layout_of(ctx)
    if is_allowed_signers(read_bytes(pubkey_file, 1 << 20).decode("utf-8", "replace")):
        for dest, fp in trust_allowed_signers(pubkey_file, layout):
            _said_trusted(layout, dest, fp)
        return
    dest, fp = trust_operator(pubkey_file) if layout is None else trust_repository(layout, pubkey_file)
    _said_trusted(layout, dest, fp)


def _said_trusted(layout: Layout | None, dest: Path, fp: str) -> None:
    from core.store.events import record_event

    if layout is None:
        say(f"trusted {fp} for every repository ({visible(str(dest))})")
        return
    record_event(layout, "trusted", None, fingerprint=fp, file=dest.name)
    say(f"trusted {fp} ({visible(str(dest.relative_to(layout.root)))})")


@main.command("allow")
@click.option("--yes", is_flag=True, help="Allow it without asking (what it runs is printed all the same).")
@click.option("--show", is_flag=True, help="Only show what the config would run; allow nothing.")
@click.pass_context
def allow_cmd(ctx: click.Context, yes: bool, show: bool) -> None:
    """Show exactly what .gen/config.toml would run, and allow it (pinned to its sha256).

    Until you allow it, a repository's config runs nothing (no host, no check) and lowers
    nothing; any change to what it runs asks again."""
    from core.review.consent import allow, consent

    layout = layout_of(ctx)
    now = consent(layout)
    where = visible(str(layout.config.relative_to(layout.root)))
    if now.digest is None:
        say(f"{where} runs nothing and lowers nothing: there is nothing to allow")
        return
    state = "allowed" if now.allowed else "changed since you allowed it" if now.changed else "not allowed yet"
    say(f"{where} ({state}) would run, with your rights:")
    for line in now.lines:
        say(f"  {visible(line)}")
    say(f"sha256 of what it runs: {now.digest}")
    if now.allowed or show:
        return
    if not yes:
        if not sys.stdin.isatty():
            raise GenjobError(f"{where}: not allowed; confirm with `genjob allow --yes` (no terminal to ask)")
        if not click.confirm("Allow it to run this?", default=False):
            say("nothing allowed")
            sys.exit(1)
    allow(layout, now.digest)
    say(f"allowed: {where} may run this until what it runs changes")


@main.command("schema")
@click.argument("kind", type=click.Choice(["job", "receipt"]))
def schema_cmd(kind: str) -> None:
    """Print the JSON Schema of a job document (v1 or v2) or a receipt."""
    from pydantic import TypeAdapter

    from core.model.models import JobV1, JobV2, Receipt

    adapter: TypeAdapter[Any] = TypeAdapter(JobV1 | JobV2 if kind == "job" else Receipt)
    print_json(adapter.json_schema(by_alias=True))
