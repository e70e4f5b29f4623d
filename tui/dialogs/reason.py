"""A line of text typed in: the reason for a rejection."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class ReasonDialog(ModalScreen[str | None]):
    """Returns the text typed (enter), or None (escape). An empty reason is refused."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel", id="reason.cancel")]

    def __init__(self, title: str, body: Text) -> None:
        super().__init__()
        self.title_text = title
        self.body = body

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(Text(self.title_text, style="bold"), classes="dialog-title")
            yield Static(self.body)
            yield Input(placeholder="reason (kept in the rejection record)", id="reason")
            yield Static(Text("enter rejects, escape cancels", style="dim"), id="reason-hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if not event.value.strip():
            self.query_one("#reason-hint", Static).update(
                Text("a rejection needs a reason", style="bold red")
            )
            return
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)
