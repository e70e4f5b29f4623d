"""Modal dialogs: each returns its answer with `dismiss(value)`."""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Button, Checkbox

# Below this many lines, buttons and checkboxes drop their borders (one line each), so
# that a dialog's body, its choices and its buttons all fit on a 24-line terminal.
SHORT_TERMINAL = 30


def fit_to_terminal(screen: Screen[Any]) -> None:
    """Make the dialog's buttons and checkboxes compact on a short terminal."""
    compact = screen.app.size.height < SHORT_TERMINAL
    for widget in screen.query("Button, Checkbox"):
        if isinstance(widget, (Button, Checkbox)):
            widget.compact = compact
