"""Why an action cannot run on a job, and the one that can: a key runs it, escape closes."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from tui.dialogs import fit_to_terminal


class NextStepDialog(ModalScreen[bool]):
    """Returns True when the operator takes the step offered (its key, or its button)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,n", "answer(False)", "Close", id="nextstep.close")
    ]

    def __init__(self, title: str, body: Text, step: str, key: str) -> None:
        super().__init__()
        self.title_text = title
        self.body = body
        self.step = step
        self.key = key

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Static(Text(self.title_text, style="bold"), classes="dialog-title")
            with VerticalScroll(classes="dialog-body"):
                yield Static(self.body, id="nextstep-body")
            with Horizontal(classes="dialog-buttons"):
                yield Button(Text(f"{self.step} ({self.key})"), id="step", variant="primary")
                yield Button("Close (esc)", id="close")

    def on_mount(self) -> None:
        fit_to_terminal(self)
        self.query_one("#step", Button).focus()

    def on_key(self, event: events.Key) -> None:
        if event.key == self.key or event.character == self.key:
            event.stop()
            self.dismiss(True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "step")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)
