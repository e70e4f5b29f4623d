"""`genjob ls`: the listing, the same through click (`ls_cmd`) and without it
(`tui.cli.plain`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.model.lifecycle import STATE_ORDER, State
from core.model.protected import PROTECTED_MARK, protected_among
from core.model.terminal import visible
from core.store.layout import Layout
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
    rows = [with_attempts(str(layout.gen), r) for r in ordered]
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
