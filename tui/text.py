"""Untrusted text as Rich `Text`: built literally, never parsed as markup or ANSI.

Everything a job, receipt, file or generator wrote goes through `literal` (or `lines`)
so that `[bold]`, `[link=...]` and escape sequences show as the characters they are.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

from core.lifecycle import State
from core.terminal import visible

STATE_STYLES: dict[State, Style] = {
    State.INCONSISTENT: Style(color="bright_white", bgcolor="red", bold=True),
    State.INVALID: Style(color="bright_red", bold=True),
    State.ORPHANED: Style(color="bright_magenta", bold=True),
    State.RECEIVED: Style(color="bright_cyan", bold=True),
    State.STALE: Style(color="yellow", bold=True),
    State.FAILED: Style(color="red", bold=True),
    State.RUNNING: Style(color="bright_blue", bold=True),
    State.QUEUED: Style(color="white"),
    State.APPLIED: Style(color="green"),
    State.REJECTED: Style(color="bright_black"),
}

SHORT = {
    State.INCONSISTENT: "INCONS",
    State.INVALID: "INVALID",
    State.ORPHANED: "ORPHAN",
    State.RECEIVED: "RECEIVED",
    State.STALE: "STALE",
    State.FAILED: "FAILED",
    State.RUNNING: "RUNNING",
    State.QUEUED: "QUEUED",
    State.APPLIED: "APPLIED",
    State.REJECTED: "REJECTED",
}

TINY = {
    State.INCONSISTENT: "INC",
    State.INVALID: "INV",
    State.ORPHANED: "ORPH",
    State.RECEIVED: "RCVD",
    State.STALE: "STALE",
    State.FAILED: "FAIL",
    State.RUNNING: "RUN",
    State.QUEUED: "QUEUE",
    State.APPLIED: "APPL",
    State.REJECTED: "REJ",
}


def literal(text: str, style: Style | str = "", keep_newlines: bool = True) -> Text:
    """A `Text` showing `text` exactly, control characters made visible."""
    return Text(visible(text, keep_newlines=keep_newlines), style=style, no_wrap=False)


def state_text(state: State) -> Text:
    return Text(state.value, style=STATE_STYLES[state])
