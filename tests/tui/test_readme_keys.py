"""The README's keys table says what the board's bindings are: every key, and only those."""

from __future__ import annotations

import re
from pathlib import Path

from textual.binding import Binding

from tui.screens.board import BoardScreen
from tui.widgets.job_table import JobTable

README = Path(__file__).resolve().parents[2] / "README.md"
# How the README writes a key Textual names otherwise.
SHOWN = {
    "up": "↑",
    "down": "↓",
    "left": "←",
    "right": "→",
    "pageup": "pgup",
    "pagedown": "pgdn",
    "escape": "esc",
    "slash": "/",
    "question_mark": "?",
}
DIGITS = [str(d) for d in range(10)]


def readme_keys() -> set[str]:
    """The keys in the first column of the table under "## The dashboard"."""
    section = README.read_text().split("## The dashboard", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    keys: set[str] = set()
    for row in rows:
        first = row.split("|")[1]
        keys.update(re.findall(r"`([^`]+)`", first))
        if "`1`…`0`" in first:
            keys.update(DIGITS)
    return keys


def bound_keys() -> set[str]:
    keys: set[str] = {"ctrl+p"}  # Textual's command palette
    for binding in [*BoardScreen.BINDINGS, *JobTable.BINDINGS]:
        assert isinstance(binding, Binding)
        for key in binding.key.split(","):
            keys.add(SHOWN.get(key, key))
    return keys


def test_the_readme_keys_table_matches_the_bindings() -> None:
    readme, bound = readme_keys(), bound_keys()
    assert bound - readme == set(), "bound but missing from the README's keys table"
    assert readme - bound == set(), "in the README's keys table but bound to nothing"
