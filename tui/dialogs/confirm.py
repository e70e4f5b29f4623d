"""Yes/no, for every change that cannot be taken back."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from tui.dialogs import fit_to_terminal


class ConfirmDialog(ModalScreen[bool]):
    """Asks one question; `y` (or the yes button) answers True, `n` or escape False."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(
        self, title: str, body: Text, yes: str = "Yes", no: str = "Cancel", danger: bool = False
    ) -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.yes = yes
        self.no = no
        self.danger = danger

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(Text(self.title_text, style="bold"), classes="dialog-title")
            with VerticalScroll(classes="dialog-body"):
                yield Static(self.body)
            with Horizontal(classes="dialog-buttons"):
                yield Button(Text(f"{self.yes} (y)"), id="yes", variant="error" if self.danger else "primary")
                yield Button(Text(f"{self.no} (n)"), id="no")

    def on_mount(self) -> None:
        fit_to_terminal(self)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)
