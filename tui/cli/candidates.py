"""`genjob candidates`: a job's best-of-N candidates side by side, and their diffs."""

from __future__ import annotations

import sys

import click

from core.model.contract import ReceiptStatus
from core.model.standing import CheckState
from core.model.terminal import visible
from core.read.candidate_view import CandidateView, diff, views
from core.store.candidate_store import load
from core.store.job_keys import resolve_key
from tui.cli.commands import layout_of
from tui.cli.output import print_json, say


def print_candidates(key: str, shown: list[CandidateView]) -> None:
    """One line per candidate: host, how it ended, verification, signature, size of change."""
    if not shown:
        say(f"{key}: no candidates")
        return
    picked = next((c.number for c in shown if c.chosen), None)
    ok = sum(1 for c in shown if c.ok)
    choice = f"candidate {picked} chosen" if picked else "none chosen"
    say(f"candidates of {key}: {len(shown)}, {ok} verify, {choice}")
    say(f"  {'#':>3}  {'HOST':12} {'STATUS':9} {'VERIFY':6} {'SIGNATURE':22} {'CHANGE':16} REASON")
    for c in shown:
        mark = "*" if c.chosen else " "
        change = f"{c.files} file(s) +{c.added} -{c.removed}" if c.status == ReceiptStatus.OK else "-"
        say(
            f"{mark} {c.number:>3}  {_clip(visible(c.host or '?'), 12):12} {c.status:9} "
            f"{'ok' if c.ok else 'FAIL':6} {_signature(c):22} {change:16} "
            f"{visible(c.reason or (c.failures[0] if c.failures else ''))}"
        )
        if c.checks:
            say(f"        checks: {check_summary(key, c)}")
    if picked is None and ok:
        say(f"  apply one with: genjob apply {key} --candidate N")


# How a check state reads on the line; the others read as their own words.
_WORDS = {CheckState.PASSED: "ok", CheckState.FAILED: "FAIL"}


def check_summary(key: str, c: CandidateView) -> str:
    """The candidate's checks in one line (`tests ok  lint FAIL`), or how to run them."""
    if all(s.state is CheckState.NOT_RUN for s in c.checks):
        return f"not run: genjob check {key} --candidate {c.number}"
    return "  ".join(f"{visible(s.name)} {_WORDS.get(s.state, s.state.value)}" for s in c.checks)


def _signature(c: CandidateView) -> str:
    if c.signer:
        return _clip(f"trusted {c.signer}", 22)
    if not c.signed:
        return "unsigned"
    return "NOT trusted"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


@click.command("candidates")
@click.argument("key")
@click.option("--diff", "show", type=int, default=None, help="Print candidate N's diff (against the tree).")
@click.option("--against", type=int, default=None, help="With --diff: against candidate M instead.")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of candidate objects.")
@click.pass_context
def candidates_cmd(
    ctx: click.Context, key: str, show: int | None, against: int | None, as_json: bool
) -> None:
    """A job's candidates side by side: host, status, verification (signature included),
    size of change; or one candidate's diff against the tree or another candidate."""
    layout = layout_of(ctx)
    full = resolve_key(layout, key)
    if show is not None:
        other = load(layout, full, against) if against is not None else None
        diffs = diff(layout, load(layout, full, show), other)
        base = f"candidate {against}" if against is not None else "the tree"
        say(f"candidate {show} of {full} against {base}:")
        for d in diffs:
            say(f"--- {visible(d.path)}: {d.status} +{d.added} -{d.removed}")
            for line in d.text.splitlines():
                say(visible(line))
        return
    if against is not None:
        raise click.UsageError("--against goes with --diff N")
    shown = views(layout, full)
    if as_json:
        print_json([c.to_dict() for c in shown])
        return
    print_candidates(full, shown)
    sys.exit(0 if shown else 1)
