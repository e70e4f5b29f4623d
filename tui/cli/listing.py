"""`genjob ls`: the listing, and its plain forms answered without loading click.

`genjob ls` is what scripts and shell prompts run most, and click (with the standard
modules it pulls in) costs about half of its start (the `cli_start` benchmark). So the
`genjob` program first looks at its arguments here: `[--root DIR] ls [--json] [--state
S]...` is listed at once; anything else, help and every mistake included, goes to the
click group, which gives the same listing through `ls_cmd` and the usual messages.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from core.layout import Layout, find_root
from core.lifecycle import STATE_ORDER, State
from core.terminal import visible
from tui.cli.output import guarded, print_json, say

if TYPE_CHECKING:
    from core.snapshot import Snapshot


def list_jobs(layout: Layout, states: Sequence[str], as_json: bool) -> None:
    """One row per job (only those in `states`, when given), most urgent state first."""
    from core.board_view import age, summary_line
    from core.snapshot import take_snapshot

    snap = take_snapshot(layout)
    wanted = {s.upper() for s in states}
    rows = [r for r in snap.rows.values() if not wanted or r.state.value in wanted]
    order = {s: i for i, s in enumerate(STATE_ORDER)}
    rows.sort(key=lambda r: (order[r.state], -r.created_at, r.key))
    if as_json:
        print_json([r.to_dict() for r in rows])
        return
    _print_policy(snap)
    if not rows:
        say("no jobs" + (f" in {', '.join(sorted(wanted))}" if wanted else ""))
        return
    now = time.time()
    say(f"{'KEY':32}  {'STATE':12} {'AGE':>5} {'ATT':>3}  {'WORKER':16} INSTRUCTION")
    for r in rows:
        first = summary_line(r)
        when = age(now - r.created_at) if r.created_at else "-"
        say(
            f"{r.key:32}  {r.state.value:12} {when:>5} {r.attempts:>3}  "
            f"{clip(visible(r.worker or '-'), 16):16} {first[:80]}"
        )
    say("  ".join(f"{s.value}={snap.counts[s]}" for s in STATE_ORDER if snap.counts[s]))


def _print_policy(snap: Snapshot) -> None:
    if snap.config_error:
        say(f"warning: {visible(snap.config_error)}", err=True)
        return
    if not snap.signature_required:
        say("policy: signatures NOT required (require_signature = false)", err=True)
    if snap.unsandboxed_checks:
        names = ", ".join(snap.unsandboxed_checks)
        say(f'policy: checks run UNSANDBOXED (sandbox = "none"): {names}', err=True)


def clip(text: str, width: int) -> str:
    """`text` cut to `width` characters, ending in … when it was longer."""
    return text if len(text) <= width else text[: width - 1] + "…"


_STATES = {s.value for s in State}


def plain_ls(argv: Sequence[str]) -> tuple[Path | None, list[str], bool] | None:
    """(root, states, as_json) when `argv` is a plain `[--root DIR] ls [--json] [--state
    S]...` that click would accept as is; else None."""
    args = list(argv)
    root: Path | None = None
    if args and args[0].startswith("--root"):
        if args[0] == "--root" and len(args) > 1:
            value, args = args[1], args[2:]
        elif args[0].startswith("--root="):
            value, args = args[0].removeprefix("--root="), args[1:]
        else:
            return None
        if not value or os.path.isfile(value):
            return None  # click's message says what is wrong with it
        root = Path(value)
    if not args or args[0] != "ls":
        return None
    states: list[str] = []
    as_json = False
    rest = args[1:]
    while rest:
        arg = rest.pop(0)
        if arg == "--json":
            as_json = True
        elif arg == "--state" and rest:
            states.append(rest.pop(0))
        elif arg.startswith("--state="):
            states.append(arg.removeprefix("--state="))
        else:
            return None
    if any(s.upper() not in _STATES for s in states):
        return None
    return root, states, as_json


def run_plain_ls(argv: Sequence[str]) -> bool:
    """List the jobs when `argv` is a plain `ls` (see `plain_ls`); False when it is not."""
    plain = plain_ls(argv)
    if plain is None:
        return False
    root, states, as_json = plain
    gc.freeze()  # as the click group does: no collection walks what is loaded for good
    guarded(lambda: list_jobs(find_root(explicit=root), states, as_json))
    return True
