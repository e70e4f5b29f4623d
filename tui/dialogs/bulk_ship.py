"""A view of a batch this board ships: marked jobs, each host running as many at once as
its concurrency allows.

One line per job says where it is (waiting, running on a host, its receipt's status or
why it was refused), a line above them counts, and the end says what came of it all.
The batch is the board's (`tui.services.runs.BoardBatch`), not the dialog's: escape hides
the dialog and the batch goes on; `s` on any of its jobs shows it again. Stopping it
(`ctrl+k`, or "Stop all") asks first: every job in flight then ends in an aborted
receipt, and no more starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from core.model.terminal import visible
from tui.dialogs import fit_to_terminal
from tui.dialogs.confirm import ConfirmDialog
from tui.text import counted

if TYPE_CHECKING:
    from tui.services.runs import BoardBatch


class BulkShipDialog(ModalScreen[str]):
    """Shows `batch` as it goes; returns "hidden" when hidden while it goes on, else "closed"."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Hide / close", id="bulkship.close"),
        Binding("ctrl+k", "stop", "Stop all", id="bulkship.stop"),
    ]

    def __init__(self, batch: BoardBatch) -> None:
        super().__init__()
        self.board_batch = batch

    @property
    def done(self) -> bool:
        return self.board_batch.done

    def compose(self) -> ComposeResult:
        title = f"Shipping {counted(len(self.board_batch.keys), 'job')} to {self.board_batch.where}"
        with Vertical(classes="dialog wide tall"):
            yield Static(Text(title), classes="dialog-title")
            yield Static(id="bulk-status")
            with VerticalScroll(id="bulk-scroll"):
                yield Static(id="bulk-jobs")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Hide (esc)", id="bulk-hide")
                yield Button("Stop all (ctrl+k)", id="bulk-stop", variant="error")
                yield Button("Close (esc)", id="bulk-close")

    def on_mount(self) -> None:
        fit_to_terminal(self)
        self.board_batch.watch(self)
        self.batch_changed()

    def on_unmount(self) -> None:
        self.board_batch.unwatch(self)

    def batch_changed(self) -> None:
        """A job moved on, or the batch is stopping or over: show it, and the buttons that apply."""
        body = Text(no_wrap=True, overflow="ellipsis")
        for key, (line, style) in self.board_batch.lines.items():
            body.append(f"{key[:12]}  ", Style(bold=True))
            body.append(visible(line), style)
            body.append("\n")
        self.query_one("#bulk-jobs", Static).update(body)
        self.query_one("#bulk-status", Static).update(self.board_batch.status)
        done = self.board_batch.done
        self.query_one("#bulk-hide").display = not done
        self.query_one("#bulk-stop").display = not done and not self.board_batch.stopping
        close = self.query_one("#bulk-close", Button)
        close.display = done
        if done:
            close.focus()
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop":
            return not self.board_batch.done
        return True

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "bulk-stop":
            self.action_stop()
        else:
            self.action_close()

    def action_close(self) -> None:
        self.dismiss("closed" if self.board_batch.done else "hidden")

    def action_stop(self) -> None:
        if self.board_batch.done or self.board_batch.stopping:
            return
        self.app.push_screen(stop_batch_confirm(self.board_batch), self._stop_answered)

    def _stop_answered(self, yes: bool | None) -> None:
        if yes:
            self.board_batch.stop()


def stop_batch_confirm(batch: BoardBatch) -> ConfirmDialog:
    """The one question before a batch stops: it cannot be taken back."""
    running, waiting = len(batch.running), len(batch.waiting)
    body = Text(f"Stop the batch of {counted(len(batch.keys), 'job')}?\n", style="bold")
    body.append(
        f"{running} in flight: the runner stops each generator and each ends with an aborted "
        f"receipt, ready to replay; {waiting} waiting: none of them starts."
    )
    return ConfirmDialog("Stop all", body, yes="Stop all", no="Keep running", danger=True)
