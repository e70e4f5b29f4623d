"""Rich `Text` for each section of a job's detail; every value from disk goes in literally."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.containers import Lines
from rich.style import Style
from rich.table import Table
from rich.text import Text

from core.model.presets import spend_of
from core.model.protected import PROTECTED_HINT, PROTECTED_MARK
from core.model.standing import FAILED, PASSED, CheckState, CheckStatus
from core.model.terminal import age, visible
from tui.text import STATE_STYLES, counted, in_repo, literal, state_text

if TYPE_CHECKING:
    from core.read.inspect_job import JobDetail
    from core.read.preflight import MergePreflight, Preflight
    from core.review.diff import FileDiff
    from core.review.verify import Verification
    from tui.services.check_runner import LiveCheck

LABEL = Style(color="bright_black")
OK = Style(color="green", bold=True)
BAD = Style(color="red", bold=True)
SKIP = Style(color="yellow")
WARN = Style(color="yellow", bold=True)
ADDED_BG = Style(bgcolor="#12361f")
REMOVED_BG = Style(bgcolor="#3c1618")
THEME = "monokai"


def _stamp(at: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(at)))
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def _field(text: Text, label: str, value: str | Text, width: int = 11) -> None:
    text.append(f"{label:<{width}}", LABEL)
    text.append(value if isinstance(value, Text) else literal(value))
    text.append("\n")


def policy_text(signature_required: bool) -> Text:
    if signature_required:
        return Text("signatures REQUIRED by policy", style=Style(color="green", bold=True))
    return Text(
        "signatures NOT required by policy (require_signature = false)",
        style=Style(color="black", bgcolor="yellow", bold=True),
    )


def title_text(detail: JobDetail) -> Text:
    row = detail.row
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(row.key, Style(bold=True))
    text.append("  ")
    text.append_text(state_text(row.state))
    text.append(f"  {row.schema}" if row.schema else "", LABEL)
    return text


def unmergeable_text(p: MergePreflight) -> Text:
    """Why a STALE receipt cannot be merged: the conflicting hunks, or why no merge can be made."""
    head = Text()
    if p.refused is not None:
        head.append("No merge can be made: ", BAD)
        head.append(literal(p.refused))
        return head
    if p.conflicts:
        head.append(
            f"The three-way merge conflicts in {counted(len(p.conflicts), 'file')}; "
            "nothing would be written.\n",
            BAD,
        )
        for path, hunk in sorted(p.conflicts.items()):
            head.append("\n")
            head.append(literal(path, Style(color="cyan", bold=True)))
            head.append("\n")
            head.append(literal("\n".join(hunk)))
            head.append("\n")
    return head


def merge_text(p: MergePreflight) -> Group:
    """A STALE receipt's clean merge: what merges, the checks that run first, the merged diff."""
    head = Text()
    merged = ", ".join(p.merged) or "none"
    head.append("The tree moved on since the job was minted; the receipt merges clean over it ", OK)
    head.append("(git merge-file: base the job's input, ours the tree, theirs the receipt).\n")
    head.append("merged   ", LABEL)
    head.append(literal(merged, Style(color="cyan")))
    head.append("\nchecks   ", LABEL)
    if p.checks:
        head.append(literal(", ".join(p.checks)))
        head.append(" run on the merged bytes first; nothing is written unless they pass\n")
    else:
        head.append("none required\n")
    head.append("\n")
    return Group(head, diffs_text(list(p.diffs)))


def plane_text(lines: Sequence[str], root: Path | None = None) -> Text:
    """What the apply plane says of a job (`core.read.plane_view.PlaneView.lines`): its
    place in the apply queue or why a pass leaves it, and each job in flight it overlaps."""
    text = Text()
    for line in lines:
        text.append("∩ " if line.startswith("overlaps ") else "→ ", WARN)
        text.append(literal(in_repo(line, root)))
        text.append("\n")
    return text + Text("\n") if lines else text


def job_text(detail: JobDetail, now: float | None = None, root: Path | None = None) -> Text:
    """The job document: key, digest, instruction and inputs, and every fault found."""
    now = time.time() if now is None else now
    row = detail.row
    text = Text()
    _field(text, "key", row.key)
    _field(text, "state", state_text(row.state))
    if detail.located is not None:
        extra = f" (also in {', '.join(detail.located.also_in)})" if detail.located.also_in else ""
        _field(text, "file", f".gen/{detail.located.folder}/{row.key}.json{extra}")
    if row.schema:
        _field(text, "schema", row.schema)
        _field(text, "digest", row.digest)
    if row.created_at:
        _field(text, "created", f"{_stamp(row.created_at)} ({age(now - row.created_at)} ago)")
    if detail.candidates:
        picked = f"candidate {detail.chosen} chosen" if detail.chosen else "none chosen: a compares them"
        _field(text, "candidates", f"{detail.candidates}, {picked}")
    for problem in dict.fromkeys((*row.problems, *detail.errors)):
        text.append("! ", BAD)
        text.append(literal(in_repo(problem, root), BAD))
        text.append("\n")
    for failure in detail.host_failures:  # the host's fault, not the job's: it went back to the queue
        text.append("host ", WARN)
        text.append(literal(failure, SKIP))
        text.append("\n")
    if row.instruction:
        text.append("\ninstruction\n", Style(bold=True))
        text.append(literal(row.instruction))
        if not row.instruction.endswith("\n"):
            text.append("\n")
    doc = detail.document or {}
    inputs = doc.get("inputs") or {}
    if inputs:
        text.append("\ninputs\n", Style(bold=True))
        for path in sorted(inputs):
            text.append("  ")
            text.append(literal(path, Style(color="cyan")))
            digest = inputs[path]
            text.append(f"  {digest}" if digest else "  (new file: must not exist at apply)", LABEL)
            if path in detail.protected:
                text.append(f"  {PROTECTED_MARK} protected ({detail.protected[path]})", WARN)
            text.append("\n")
    if detail.protected:
        text.append(f"{PROTECTED_MARK} {PROTECTED_HINT}\n", WARN)
    if doc.get("replay_of"):
        _field(text, "replay of", str(doc["replay_of"]))
    record = detail.located.record if detail.located else None
    if record:
        text.append_text(_record_text(record))
    return text


def _record_text(record: dict[str, Any]) -> Text:
    """The apply or rejection record kept with a finished job."""
    text = Text()
    applied, rejected = record.get("apply"), record.get("rejection")
    if isinstance(applied, dict):
        text.append("\napplied\n", Style(bold=True, color="green"))
        _field(text, "at", _stamp(applied.get("at")))
        _field(text, "by", str(applied.get("by")))
        _field(text, "signer", str(applied.get("signer") or "unsigned"))
        required = applied.get("signature_required")
        _field(text, "policy", "signatures required" if required else "signatures NOT required")
        given = applied.get("commit")
        commit: dict[str, Any] = given if isinstance(given, dict) else {}
        if commit.get("state") == "pending":
            _field(text, "commit", Text("applied, NOT committed: apply --commit or recover commits it", WARN))
        elif commit.get("state") == "committed":
            _field(text, "commit", str(commit.get("sha")))
        for path in applied.get("changed") or []:
            text.append("  ")
            text.append(literal(str(path), Style(color="cyan"), keep_newlines=False))
            text.append("\n")
    if isinstance(rejected, dict):
        text.append("\nrejected\n", Style(bold=True, color="red"))
        _field(text, "at", _stamp(rejected.get("at")))
        _field(text, "by", str(rejected.get("by")))
        _field(text, "from", str(rejected.get("from")))
        _field(text, "reason", str(rejected.get("reason")))
    return text


def lease_text(detail: JobDetail, now: float | None = None) -> Text:
    """The lease (who holds the job, how fresh), a cancel waiting for it, and every attempt."""
    now = time.time() if now is None else now
    text = Text()
    lease = detail.lease
    if detail.cancel_requested_at is not None:
        text.append("cancel requested ", BAD)
        text.append(f"{age(now - detail.cancel_requested_at)} ago", BAD)
        text.append(": waiting for the worker to stop it and write an aborted receipt\n\n", LABEL)
    if lease is not None:
        fresh = lease.fresh(now)
        text.append("lease ", Style(bold=True))
        text.append("fresh\n" if fresh else "STALE\n", OK if fresh else BAD)
        _field(text, "worker", lease.worker)
        _field(text, "host", f"{lease.host}, pid {lease.pid}" + (" (dead)" if lease.holder_dead() else ""))
        _field(text, "attempt", str(lease.token))
        _field(text, "claimed", f"{_stamp(lease.claimed_at)} ({age(now - lease.claimed_at)} ago)")
        _field(
            text,
            "heartbeat",
            f"{age(now - lease.heartbeat)} ago, ttl {lease.ttl:g}s"
            + ("" if not lease.expired(now) else " (expired)"),
        )
    elif detail.lease_error:
        text.append("lease does not parse: ", BAD)
        text.append(literal(detail.lease_error, BAD))
        text.append("\n")
    else:
        text.append("no lease (the job is not running)\n", LABEL)
    spend = spend_of(detail.attempts)
    if spend.runs:
        text.append("\ncost ", Style(bold=True))
        text.append(f"{spend.describe()}\n")
    text.append(f"\nattempts ({len(detail.attempts)} records)\n", Style(bold=True))
    for rec in detail.attempts:
        text.append(f"  {_stamp(rec.get('at'))}  ", LABEL)
        text.append(literal(str(rec.get("event", "?")), Style(bold=True)))
        extra = {k: v for k, v in rec.items() if k not in ("at", "event")}
        if extra:
            text.append("  ")
            text.append(literal(json.dumps(extra, sort_keys=True, default=str), keep_newlines=False))
        text.append("\n")
    return text


def verification_text(
    v: Verification | None,
    signature_required: bool,
    *,
    applied: bool = False,
    root: Path | None = None,
    checks: Text | None = None,
    missing: Sequence[str] = (),
) -> Group | Text:
    """The receipt's checks as a checklist, with the signature policy stated first and the
    job's own checks (`checks_text`) next; the verdict last counts the required checks
    not passed (`missing`) too."""
    head = Text()
    head.append_text(policy_text(v.signature_required if v else signature_required))
    head.append("\n")
    if v is None:
        head.append("\nno receipt yet: nothing to verify\n", LABEL)
        return head
    if applied:
        head.append("\napplied: the checks ran again now; the base is the tree before the apply\n", LABEL)
    table = Table(box=None, show_header=False, padding=(0, 1, 0, 0), expand=False)
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True, style=Style(bold=True))
    table.add_column(no_wrap=True)
    table.add_column(overflow="fold")
    marks = {PASSED: ("✔", OK), FAILED: ("✘", BAD)}
    for check in v.checks:
        mark, style = marks.get(check.status, ("–", SKIP))
        detail = literal(in_repo(check.detail, root), keep_newlines=False)
        status = check.status
        if applied and check.name == "base" and check.status == FAILED:
            # Not a fault: the outputs are in the tree now, so it no longer holds the inputs.
            mark, style, status = "✔", OK, "applied"
            detail = Text("the tree has moved past the inputs: it holds this job's outputs", LABEL)
        table.add_row(Text(mark, style), check.name, Text(status, style), detail)
    tail = Text()
    if applied:
        if v.ok or v.only_base_failed():
            tail.append("=> applied from a receipt that verifies", OK)
        else:
            tail.append(f"=> applied; {len(v.failures)} check(s) fail now", BAD)
    elif v.ok and missing:
        waits = ", ".join(missing)
        tail.append(f"=> the receipt verifies; apply waits for the required check(s) {waits}", SKIP)
        tail.append(" (t runs them)", LABEL)
    elif v.ok:
        tail.append("=> every check passed: apply may run", OK)
    elif v.only_base_failed():
        tail.append("=> STALE: the tree moved on since the job was minted; replay it (R)", SKIP)
    else:
        tail.append(f"=> apply refused: {len(v.failures)} check(s) failed", BAD)
    if v.unchanged:
        from core.review.verify import NOTHING_CHANGED  # loaded already: `v` is a verification

        tail.append(f"\n⚠ {NOTHING_CHANGED}", WARN)
    if v.signer:
        tail.append(f"\nsigner {v.signer}", LABEL)
    return Group(head, checks or Text(), table, Text(""), tail)


# Each check state's mark in the Verify tab, the preflight and the job list.
CHECK_MARKS: dict[CheckState, tuple[str, Style]] = {
    CheckState.PASSED: ("✔", OK),
    CheckState.FAILED: ("✘", BAD),
    CheckState.RUNNING: ("●", Style(color="yellow", bold=True)),
    CheckState.STALE: ("○", SKIP),
    CheckState.NOT_RUN: ("·", LABEL),
}
UNSANDBOXED = Style(color="black", bgcolor="yellow", bold=True)
# How many lines of a check's output the Verify tab shows: a failure's last words, or the
# newest lines of one running now.
OUTPUT_LINES = 14


def checks_text(
    statuses: Sequence[CheckStatus],
    live: Mapping[str, LiveCheck],
    now: float | None = None,
    root: Path | None = None,
) -> Text:
    """The job's checks: each one's state, what it found, and the output of a failed or
    running one (a check this board runs shows its output as it comes). A check runs at
    the repository's own path, so the paths it prints show from the repository's root."""
    now = time.time() if now is None else now
    text = Text()
    if not statuses:
        return text
    text.append("checks\n", Style(bold=True))
    for status in statuses:
        running = live.get(status.name)
        state = CheckState.RUNNING if running is not None else status.state
        mark, style = CHECK_MARKS[state]
        text.append(f" {mark} ", style)
        text.append(f"{status.name:<12}", Style(bold=True))
        text.append(f" {'required' if status.required else 'optional':<9}", LABEL)
        if running is not None:
            if running.started_at is None:
                text.append("waiting for a free slot", style)
            else:
                text.append(f"running for {age(now - running.started_at)}", style)
        else:
            shown = in_repo(status.detail, root)
            text.append(literal(shown, style if state is not CheckState.PASSED else Style(), False))
            if status.record is not None and state in (CheckState.PASSED, CheckState.FAILED):
                text.append(f"  ({age(now - status.record.started_at)} ago)", LABEL)
        if not status.sandboxed:
            text.append("  UNSANDBOXED", UNSANDBOXED)
        text.append("\n")
        output = running.output if running is not None else None
        if output is None and state is CheckState.FAILED and status.record is not None:
            output = status.record.tail
        if output:
            for line in output.splitlines()[-OUTPUT_LINES:]:
                text.append("     │ ", LABEL)
                text.append(literal(in_repo(line, root), keep_newlines=False))
                text.append("\n")
    text.append("\n")
    return text


def check_marks(statuses: Sequence[CheckStatus], live: Mapping[str, LiveCheck]) -> str:
    """One mark per check, in the config's order: what the job list and the tab show."""
    return "".join(CHECK_MARKS[CheckState.RUNNING if s.name in live else s.state][0] for s in statuses)


def _highlighted(path: str, code: str) -> Text:
    # Pygments and its lexers cost a few MB: loaded with the first diff shown, not at start.
    from rich.syntax import Syntax

    try:
        lexer = Syntax.guess_lexer(path, code)
    except Exception:
        lexer = "text"
    return Syntax("", lexer, theme=THEME, background_color="default").highlight(code)


def file_diff_text(diff: FileDiff) -> Text:
    """One file's diff, its code syntax-highlighted, added and removed lines tinted."""
    text = Text()
    text.append(literal(diff.path, Style(bold=True, color="cyan"), keep_newlines=False))
    text.append(f"  {diff.status}", LABEL)
    text.append(f"  +{diff.added}", Style(color="green"))
    text.append(f" -{diff.removed}\n", Style(color="red"))
    if diff.signed is False:
        text.append("⚠ NOT WHAT THE WORKER SIGNED: ", BAD)
        text.append("these bytes changed after the receipt was signed (the hashes check fails)\n", BAD)
    if diff.note:
        text.append("⚠ ", WARN)
        text.append(literal(diff.note, SKIP, keep_newlines=False))
        text.append("\n")
    if not diff.text:
        return text
    lines = diff.text.splitlines()
    body = [ln for ln in lines if not ln.startswith(("--- ", "+++ "))]
    code = "\n".join(visible(ln[1:]) if ln[:1] in "+- " else "" for ln in body)
    highlighted = _highlighted(diff.path, code)
    highlighted.rstrip()
    code_lines = highlighted.split("\n", allow_blank=True)
    if len(code_lines) != len(body):
        code_lines = Lines(Text(visible(ln[1:])) for ln in body)
    for raw, line in zip(body, code_lines, strict=True):
        head = raw[:1]
        if raw.startswith("@@"):
            text.append(literal(raw, Style(color="magenta"), keep_newlines=False))
        elif head == "\\":
            text.append(literal(raw, LABEL, keep_newlines=False))
        else:
            line.stylize(ADDED_BG if head == "+" else REMOVED_BG if head == "-" else Style())
            prefix = Style(color="green", bold=True) if head == "+" else Style(color="red", bold=True)
            text.append(f"{head} ", prefix if head in "+-" else Style())
            text.append_text(line)
        text.append("\n")
    return text


def diffs_text(diffs: list[FileDiff], applied: bool = False) -> Group | Text:
    if not diffs:
        if applied:
            return Text("applied: its apply record names no file it changed", LABEL)
        return Text("no outputs to diff (no receipt, or it names no files)", LABEL)
    added = sum(d.added for d in diffs)
    removed = sum(d.removed for d in diffs)
    head = Text(f"{counted(len(diffs), 'file')}  ", Style(bold=True))
    if applied:
        head = Text.assemble(("applied: the change it made, from its apply record\n", LABEL), head)
    head.append(f"+{added}", Style(color="green"))
    head.append(f" -{removed}\n", Style(color="red"))
    return Group(head, *(file_diff_text(d) for d in diffs))


def timeline_text(detail: JobDetail) -> Text:
    text = Text()
    if not detail.timeline:
        return Text("no events for this job in .gen/events.jsonl", LABEL)
    for event in detail.timeline:
        text.append(f"{_stamp(event.get('at'))}  ", LABEL)
        text.append(literal(f"{event.get('event', '?'):<12}", Style(bold=True), keep_newlines=False))
        text.append(literal(f" by {event.get('by', '?')}", LABEL, keep_newlines=False))
        extra = {k: v for k, v in event.items() if k not in ("at", "event", "key", "by")}
        if extra:
            text.append("  ")
            text.append(literal(json.dumps(extra, sort_keys=True, default=str), keep_newlines=False))
        text.append("\n")
    return text


def output_text(detail: JobDetail) -> Text:
    if not detail.log_tail:
        return Text("no generator output kept for this job", LABEL)
    return literal(detail.log_tail)


def preflight_text(p: Preflight, root: Path | None = None) -> Group:
    """The approve preflight: the verdict first (and what to do about a refusal), then what
    apply would write, then the signature, its policy and the base."""
    text = Text()
    what = f"candidate {p.candidate} of {p.key}" if p.candidate is not None else p.key
    text.append(f"apply {what}\n", Style(bold=True))
    if p.unchanged:
        from core.review.verify import NOTHING_CHANGED  # loaded already: the preflight verified

        text.append(f"⚠ {NOTHING_CHANGED}: applying it writes nothing\n", WARN)
    if p.may_apply:
        text.append("every check passed: y applies, n cancels\n", OK)
        if p.protected:
            text.append(
                f"{PROTECTED_MARK} it writes protected paths (what judges or runs a job): read the diff, "
                "then p approves writing them; without p, apply refuses\n",
                WARN,
            )
    else:
        text.append("apply would be refused:\n", BAD)
        for f in p.failures:
            text.append(" ✘ ", BAD)
            text.append(literal(in_repo(f, root), keep_newlines=False))
            text.append("\n")
        if p.own_key is not None:
            text.append(" ⚿ ", WARN)
            text.append(
                f"this machine's own worker key {p.own_key_fingerprint} signed it, and nothing pins it "
            )
            text.append("here: k pins it (as genjob trust ", LABEL)
            text.append(literal(in_repo(p.own_key, root), LABEL, keep_newlines=False))
            text.append(" would)\n", LABEL)
        if p.checks_missing:
            text.append(" ✘ ", BAD)
            text.append(f"required check(s) not passed on these outputs: {', '.join(p.checks_missing)}")
            text.append(" (t runs them)\n" if p.candidate is None else "\n", LABEL)
        if p.may_choose:
            text.append(
                "checks run on the job's chosen receipt: y chooses this candidate without applying "
                "it; its checks then run, and approve applies it once they pass\n",
                OK,
            )
    for check in p.checks:
        mark, style = CHECK_MARKS[check.state]
        text.append(f" {mark} ", style)
        text.append(f"{check.name} ", Style(bold=True))
        text.append("(required) " if check.required else "", LABEL)
        text.append(literal(in_repo(check.detail, root), LABEL, keep_newlines=False))
        if not check.sandboxed:
            text.append("  UNSANDBOXED", UNSANDBOXED)
        text.append("\n")
    text.append("\n")
    for c in p.changes:
        text.append("  ")
        text.append(literal(c.path, Style(color="cyan"), keep_newlines=False))
        text.append(f"  {c.status}  ", LABEL)
        text.append(f"+{c.added}", Style(color="green"))
        text.append(f" -{c.removed}", Style(color="red"))
        if c.path in p.protected:
            text.append(f"  {PROTECTED_MARK} protected ({p.protected[c.path]})", WARN)
        text.append("  ⚠ not what the worker signed\n" if not c.signed else "\n", BAD)
    if not p.changes:
        text.append("  (no output files)\n", LABEL)
    text.append(f"  {counted(len(p.changes), 'file')}, ", Style(bold=True))
    text.append(f"+{p.added}", Style(color="green", bold=True))
    text.append(f" -{p.removed}", Style(color="red", bold=True))
    text.append(" lines\n")
    facts = Table(box=None, show_header=False, padding=(0, 1, 0, 2), expand=False)
    facts.add_column(style=LABEL, no_wrap=True)
    facts.add_column(overflow="fold")
    facts.add_row("policy", policy_text(p.signature_required))
    facts.add_row("signature", literal(in_repo(p.signature, root), OK if p.signature_ok else BAD, False))
    base = Text("fresh" if p.base_fresh else "STALE", OK if p.base_fresh else BAD)
    base.append("  ")
    base.append(literal(in_repo(p.base_detail, root), LABEL, keep_newlines=False))
    facts.add_row("base", base)
    parts: list[Text | Table] = [text, facts]
    if p.may_apply and not p.git:
        parts.append(Text("\n  (not a git repository: there is nothing to commit to)", LABEL))
    return Group(*parts)


__all__ = ["STATE_STYLES"]
