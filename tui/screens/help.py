"""`?`: every key of the board with what it does."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

INTRO = (
    "A job moves queued → running → received → applied or rejected; orphaned, failed, stale, "
    "invalid and inconsistent are derived from what is on disk. Every key is one core operation; "
    "mark several jobs with space first to act on all of them. The arrow and page keys move; "
    "every letter is an action."
)


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[Binding]] = [Binding("escape,q,question_mark", "close", "Close", id="help.close")]

    def __init__(self, bindings: list[Binding], readonly: bool) -> None:
        super().__init__()
        self.bindings = bindings
        self.readonly = readonly

    def compose(self) -> ComposeResult:
        table = Table(box=None, show_header=False, padding=(0, 2, 0, 0), expand=True)
        table.add_column(style="bold cyan", no_wrap=True, max_width=12)
        table.add_column(ratio=1)
        for b in self.bindings:
            table.add_row(b.key_display or b.key, Text(b.tooltip or b.description))
        with Vertical(classes="dialog wide tall"):
            yield Static("genjob board: keys", classes="dialog-title")
            with VerticalScroll(classes="dialog-body"):
                note = "\n\nREAD-ONLY: the keys that change anything are off, and not listed."
                yield Static(Text(INTRO + (note if self.readonly else "") + "\n"), id="help-intro")
                yield Static(table, id="help-keys")
            yield Static(Text("escape closes; ctrl+p opens the command palette", style="dim"))

    def action_close(self) -> None:
        self.dismiss(None)
