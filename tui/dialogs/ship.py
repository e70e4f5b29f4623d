"""A view of one run this board ships: progress, a live tail of the generator's output,
and the next step.

The run is the board's (`tui.services.runs`), not the dialog's: escape hides the dialog
and the run goes on; `s` on the job shows it again. Stopping the run (`ctrl+k`, or "Stop
run") asks first: the runner then kills the generator and the job ends in an aborted
receipt. Once the run ends, the dialog says how, and for a receipt that came back ok
offers to approve it (`a`), which opens the approve preflight.

The generator's output is the host's to choose, so the tail holds it within bounds: each
line is cut at MAX_LINE_CHARS as it arrives, the log keeps MAX_LOG_LINES, and what waits
to be drawn is at most MAX_UNSHOWN_CHARS (the oldest dropped, and said to be).
"""

from __future__ import annotations

import codecs
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Log, Static

from core.model.terminal import visible
from core.remote.rules import LineCap
from tui.dialogs import fit_to_terminal
from tui.dialogs.confirm import ConfirmDialog

if TYPE_CHECKING:
    from tui.services.runs import BoardRun

MAX_LOG_LINES = 5000
MAX_LINE_CHARS = 1000
MAX_UNSHOWN_CHARS = 1 << 20


class Unshown:
    """Generator output on its way to the log: decoded across chunks, its lines cut as
    they arrive, at most MAX_UNSHOWN_CHARS of it held until the screen takes it."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lines = LineCap(MAX_LINE_CHARS)
        self._parts: list[str] = []
        self.size = 0
        self.dropped = 0

    def add(self, data: bytes) -> None:
        text = self._lines.feed(self._decoder.decode(data))
        self._parts.append(text)
        self.size += len(text)
        if self.size > MAX_UNSHOWN_CHARS:
            # Keep the newest half: trimming then waits for as much again, so each
            # character is copied a bounded number of times.
            held = "".join(self._parts)
            kept = held[-(MAX_UNSHOWN_CHARS // 2) :]
            self.dropped += len(held) - len(kept)
            self._parts, self.size = [kept], len(kept)

    def take(self) -> str:
        """Everything held, oldest first (after a note of what was dropped); then none."""
        text = "".join(self._parts)
        if self.dropped:
            text = (
                f"\n[genjob] {self.dropped} characters of output came faster than they could be shown\n"
                + text
            )
        self._parts, self.size, self.dropped = [], 0, 0
        return text


class ShipDialog(ModalScreen[str]):
    """Shows `run` as it goes; returns "approve" when the operator asked to approve the
    receipt it brought back, "hidden" when hidden while the run goes on, else "closed"."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Hide / close", id="ship.close"),
        Binding("ctrl+k", "stop", "Stop run", id="ship.stop"),
        Binding("a", "approve", "Approve", id="ship.approve"),
    ]

    class Output(Message):
        """Output is waiting in `unshown` (posted once until it is shown)."""

    def __init__(self, run: BoardRun) -> None:
        super().__init__()
        self.run = run
        self.unshown = Unshown()
        self._output_posted = False

    @property
    def key(self) -> str:
        return self.run.key

    @property
    def done(self) -> bool:
        return self.run.done

    @property
    def succeeded(self) -> bool:
        return self.run.succeeded

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide tall"):
            yield Static(Text(f"Shipping {self.run.key} to {self.run.where}"), classes="dialog-title")
            yield Static(self.run.status, id="ship-status")
            yield Log(id="ship-log", max_lines=MAX_LOG_LINES, auto_scroll=True)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Approve (a)", id="ship-approve", variant="success")
                yield Button("Hide (esc)", id="ship-hide")
                yield Button("Stop run (ctrl+k)", id="ship-cancel", variant="error")
                yield Button("Close (esc)", id="ship-close")

    def on_mount(self) -> None:
        fit_to_terminal(self)
        self.run.watch(self)
        self.run_changed()

    def on_unmount(self) -> None:
        self.run.unwatch(self)

    def run_changed(self) -> None:
        """The run's status moved on: show it, and the buttons that now apply."""
        self.query_one("#ship-status", Static).update(self.run.status)
        done, ok = self.run.done, self.run.succeeded
        self.query_one("#ship-hide").display = not done
        self.query_one("#ship-cancel").display = not done and not self.run.stopping
        close = self.query_one("#ship-close", Button)
        close.display = done
        approve = self.query_one("#ship-approve", Button)
        approve.display = done and ok
        if done:
            (approve if ok else close).focus()
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "approve":
            return self.run.done and self.run.succeeded
        if action == "stop":
            return not self.run.done
        return True

    def run_output(self, data: bytes) -> None:
        """Called on the event loop as output arrives: held, bounded, until it is drawn."""
        self.unshown.add(data)
        if not self._output_posted:
            self._output_posted = True
            self.post_message(self.Output())

    def on_ship_dialog_output(self, message: Output) -> None:
        self._output_posted = False
        self.query_one("#ship-log", Log).write(visible(self.unshown.take(), keep_newlines=True))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "ship-cancel":
            self.action_stop()
        elif event.button.id == "ship-approve":
            self.action_approve()
        else:
            self.action_close()

    def action_approve(self) -> None:
        if self.run.done and self.run.succeeded:
            self.dismiss("approve")

    def action_close(self) -> None:
        self.dismiss("closed" if self.run.done else "hidden")

    def action_stop(self) -> None:
        if self.run.done or self.run.stopping:
            return
        body = Text(f"Stop the run of {self.run.key}?\n", style="bold")
        body.append("The runner stops the generator; the job ends with an aborted receipt, ready to replay.")

        def answered(yes: bool | None) -> None:
            if yes:
                self.run.stop()

        self.app.push_screen(
            ConfirmDialog("Stop run", body, yes="Stop run", no="Keep running", danger=True), answered
        )
