"""`genjob ls`: the listing, the same through click (`ls_cmd`) and without it
(`tui.cli.plain`)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from core.errors import NotFound
from core.model.lifecycle import STATE_ORDER, State
from core.model.protected import PROTECTED_MARK, protected_among
from core.model.terminal import visible
from core.store.layout import Layout, find_root
from tui.cli.output import print_json, say

if TYPE_CHECKING:
    from core.read.snapshot import Snapshot


def list_jobs(layout: Layout, states: Sequence[str], as_json: bool) -> None:
    """One row per job (only those in `states`, when given), most urgent state first, and
    within a state the newest first. Only the jobs that may be in `states` are read; the
    attempts files of the rows printed are read for their count and last worker, so the
    cost of a listing follows what it prints, not the queue."""
    from core.model.terminal import age
    from core.read.board_view import summary_line
    from core.read.rows import with_attempts
    from core.read.snapshot import take_snapshot

    wanted = {s.upper() for s in states}
    snap = take_snapshot(layout, states={State(s) for s in wanted})
    order = {s: i for i, s in enumerate(STATE_ORDER)}
    ordered = sorted(snap.rows.values(), key=lambda r: (order[r.state], -r.created_at, r.key))
    rows = [with_attempts(layout, r) for r in ordered]
    if as_json:
        print_json(
            [
                {**r.to_dict(), "protected": protected_among(r.allowed_paths, snap.protected_paths)}
                for r in rows
            ]
        )
        return
    _print_policy(snap)
    if not rows:
        say("no jobs" + (f" in {', '.join(sorted(wanted))}" if wanted else ""))
        return
    now = time.time()
    say(f"{'KEY':32}  {'STATE':12} {'AGE':>5} {'ATT':>3}  {'WORKER':16} INSTRUCTION")
    flagged = 0
    for r in rows:
        first = summary_line(r)
        when = age(now - r.created_at) if r.created_at else "-"
        mark = ""
        if protected_among(r.allowed_paths, snap.protected_paths):
            mark, flagged = f"{PROTECTED_MARK} ", flagged + 1
        say(
            f"{r.key:32}  {r.state.value:12} {when:>5} {r.attempts:>3}  "
            f"{clip(visible(r.worker or '-'), 16):16} {mark}{first[:80]}"
        )
    say("  ".join(f"{s.value}={snap.counts[s]}" for s in STATE_ORDER if snap.counts[s]))
    if flagged:
        say(
            f"{PROTECTED_MARK} {flagged} job(s) may write protected paths (policy.protected_paths): "
            "`genjob show KEY` names them; apply writes them only when approved explicitly"
        )


def _print_policy(snap: Snapshot) -> None:
    if snap.config_error:
        say(f"warning: {visible(snap.config_error)}", err=True)
        return
    if snap.config_held:
        say(f"note: {visible(snap.config_held)}", err=True)
    if not snap.signature_required:
        say("policy: signatures NOT required (require_signature = false)", err=True)
    if snap.unsandboxed_checks:
        names = ", ".join(snap.unsandboxed_checks)
        say(f'policy: checks run UNSANDBOXED (sandbox = "none"): {names}', err=True)


def clip(text: str, width: int) -> str:
    """`text` cut to `width` characters, ending in … when it was longer."""
    return text if len(text) <= width else text[: width - 1] + "…"


# What `ls --summary` counts: the jobs still open. Applied and rejected jobs only pile up.
OPEN_STATES = tuple(s for s in STATE_ORDER if s not in (State.APPLIED, State.REJECTED))


def open_counts(layout: Layout) -> Counter[State]:
    """The open jobs in each state, as the board first counts them: the queue by its
    files' names alone, and the operator's jobs (running, with a receipt or candidates),
    which are few, by their files read (RUNNING or ORPHANED, RECEIVED, FAILED or STALE)."""
    from core.read.board_view import board_listing
    from core.read.snapshot import refresh

    listing = board_listing(str(layout.gen))
    counts = Counter({state: len(keys) for state, keys in listing.groups.items()})
    for key, row in refresh(layout, listing.operators).items():
        if (named := listing.where.get(key)) is not None:
            counts[named] -= 1
        if row is not None:
            counts[row.state] += 1
    return Counter({state: counts[state] for state in OPEN_STATES if counts[state] > 0})


def status_line(counts: Counter[State]) -> str:
    """One line for a status bar: `genjob: 3 queued · 1 running`, most urgent state first,
    empty states left out, `genjob: no open jobs` when there are none."""
    said = " · ".join(f"{counts[state]} {state.value.lower()}" for state in OPEN_STATES if counts[state])
    return f"genjob: {said or 'no open jobs'}"


def print_summary(root: Path | None) -> None:
    """`genjob ls --summary`: the status line of the repository at `root` (or found by
    walking up). A status bar runs it in every pane's folder: where no repository is
    found by walking up it prints nothing and exits 0; a `--root` that is not one is an error."""
    try:
        layout = find_root(explicit=root)
    except NotFound:
        if root is not None:
            raise
        return
    say(status_line(open_counts(layout)))
