"""The approve preflight: paths, lines, signature, base; `y` applies, `n` cancels."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from core.preflight import Preflight
from tui.render import preflight_text


class PreflightDialog(ModalScreen[bool]):
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("y", "answer(True)", "Apply", id="preflight.yes"),
        Binding("n,escape", "answer(False)", "Cancel", id="preflight.no"),
    ]

    def __init__(self, preflight: Preflight) -> None:
        super().__init__()
        self.preflight = preflight

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Static("Approve: preflight", classes="dialog-title")
            with VerticalScroll(classes="dialog-body"):
                yield Static(preflight_text(self.preflight), id="preflight-body")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Apply (y)", id="yes", variant="success", disabled=not self.preflight.verified)
                yield Button("Cancel (n)", id="no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_answer(event.button.id == "yes")

    def action_answer(self, value: bool) -> None:
        if value and not self.preflight.verified:
            self.notify("the receipt does not verify: apply would be refused", severity="error")
            return
        self.dismiss(value)
