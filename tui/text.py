"""Untrusted text as Rich `Text`: built literally, never parsed as markup or ANSI.

Everything a job, receipt, file or generator wrote goes through `literal` (or `lines`)
so that `[bold]`, `[link=...]` and escape sequences show as the characters they are.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from rich.style import Style
from rich.text import Text
from textual.color import Color

from core.model.lifecycle import State
from core.model.terminal import visible

# Each state's colour: a theme variable (so that every theme keeps them readable) and
# whether it is bold. INCONSISTENT is the one shown on a background, the loudest.
STATE_COLOURS: dict[State, tuple[str, bool]] = {
    State.INCONSISTENT: ("foreground", True),
    State.INVALID: ("text-error", True),
    State.ORPHANED: ("text-warning", True),
    State.RECEIVED: ("text-primary", True),
    State.STALE: ("text-warning", False),
    State.FAILED: ("text-error", False),
    State.RUNNING: ("text-secondary", True),
    State.QUEUED: ("foreground", False),
    State.APPLIED: ("text-success", False),
    State.REJECTED: ("text-muted", False),
}

# The default theme's values, until the app hands `use_theme` its own.
_DEFAULT_THEME = {
    "foreground": "#E0E0E0",
    "surface": "#1E1E1E",
    "error": "#B93C5B",
    "text-error": "#D17E92",
    "text-warning": "#FFC473",
    "text-primary": "#57A5E2",
    "text-secondary": "#5684A5",
    "text-success": "#8AD4A1",
    "text-muted": "auto 60%",
}


def _colour(variables: Mapping[str, str], name: str) -> str:
    """A theme variable as a hex colour, resolving "auto N%" and alpha over the surface."""
    surface = Color.parse(variables.get("surface", _DEFAULT_THEME["surface"]))
    value = variables.get(name, _DEFAULT_THEME.get(name, "#E0E0E0")).strip()
    if value.startswith("auto"):
        alpha = float(value.split()[1].rstrip("%")) / 100 if " " in value else 0.87
        return _over(surface.get_contrast_text(alpha), surface)
    return _over(Color.parse(value), surface)


def _over(colour: Color, surface: Color) -> str:
    """`colour` as it shows over `surface` (a translucent one blended in), as #rrggbb."""
    return surface.blend(colour.with_alpha(1.0), colour.a).hex6


def state_styles(variables: Mapping[str, str]) -> dict[State, Style]:
    styles: dict[State, Style] = {}
    for state, (name, bold) in STATE_COLOURS.items():
        if state is State.INCONSISTENT:
            styles[state] = Style(
                color=_colour(variables, "foreground"), bgcolor=_colour(variables, "error"), bold=True
            )
        else:
            styles[state] = Style(color=_colour(variables, name), bold=bold)
    return styles


STATE_STYLES: dict[State, Style] = state_styles(_DEFAULT_THEME)


def use_theme(variables: Mapping[str, str]) -> None:
    """Colour the states from the app's theme (called at start and on each theme change)."""
    STATE_STYLES.update(state_styles(variables))


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
    State.ORPHANED: "ORP",
    State.RECEIVED: "RCV",
    State.STALE: "STL",
    State.FAILED: "FLD",
    State.RUNNING: "RUN",
    State.QUEUED: "QUE",
    State.APPLIED: "APL",
    State.REJECTED: "REJ",
}


def literal(text: str, style: Style | str = "", keep_newlines: bool = True) -> Text:
    """A `Text` showing `text` exactly, control characters made visible."""
    return Text(visible(text, keep_newlines=keep_newlines), style=style, no_wrap=False)


def state_text(state: State) -> Text:
    return Text(state.value, style=STATE_STYLES[state])


def in_repo(text: str, root: Path | None) -> str:
    """A message from the core with the repository's own paths shown from its root
    (`.gen/queue/…`), as everything else on the board is."""
    return text.replace(f"{root}{os.sep}", "") if root is not None else text


def counted(n: int, noun: str) -> str:
    """`n` and `noun`, plural unless `n` is 1: "1 job", "3 jobs", "1,200 jobs"."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"
