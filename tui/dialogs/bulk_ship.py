"""Shipping marked jobs: each host runs as many at once as its concurrency allows.

One line per job says where it is (waiting, running on a host, its receipt's status or
why it was refused), a line above them counts, and the end says what came of it all.
Escape while it runs stops every job in flight (each ends in an aborted receipt) and
starts no more.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from rich.style import Style
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from core.errors import GenjobError
from core.model.contract import ReceiptStatus
from core.model.terminal import visible
from core.store.layout import Layout
from tui.dialogs import fit_to_terminal
from tui.text import counted

if TYPE_CHECKING:
    from core.store.queue import Claim
    from core.work.worker import BatchEvent

OK = Style(color="green", bold=True)
BAD = Style(color="red", bold=True)
BUSY = Style(color="yellow", bold=True)
QUIET = Style(dim=True)


class BulkShipDialog(ModalScreen[str]):
    """Runs `core.work.worker.ship_batch` over `keys`; returns "closed"."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Stop all / close", id="bulkship.close")
    ]

    @dataclass
    class Progress(Message):
        event: BatchEvent

    def __init__(
        self,
        layout: Layout,
        keys: list[str],
        hosts: list[str] | None,
        worker_id: str,
        claimed: dict[str, Claim] | None = None,
    ) -> None:
        super().__init__()
        self.repo = layout
        self.keys = keys
        self.hosts = hosts
        self.worker_id = worker_id
        self.claimed = claimed or {}
        self.cancel = asyncio.Event()
        self.done = False
        self.lines: dict[str, tuple[str, Style]] = {k: ("waiting", QUIET) for k in keys}
        self.counts: dict[str, int] = {**dict.fromkeys(ReceiptStatus, 0), "refused": 0, "skipped": 0}

    def compose(self) -> ComposeResult:
        where = ", ".join(map(visible, self.hosts)) if self.hosts else "every host"
        with Vertical(classes="dialog wide tall"):
            yield Static(
                Text(f"Shipping {counted(len(self.keys), 'job')} to {where}"), classes="dialog-title"
            )
            yield Static(Text("starting…", style="dim"), id="bulk-status")
            with VerticalScroll(id="bulk-scroll"):
                yield Static(id="bulk-jobs")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Stop all (esc)", id="bulk-stop", variant="error")
                yield Button("Close (esc)", id="bulk-close")

    def on_mount(self) -> None:
        fit_to_terminal(self)
        self.query_one("#bulk-close").display = False
        self._show()
        self._ship()

    @work(exclusive=True, group="bulk-ship", exit_on_error=False)
    async def _ship(self) -> None:
        from core.plan.overlaps import replay_waiting
        from core.work.worker import ship_batch  # asyncssh is slow to import: only when shipping

        try:
            await ship_batch(
                self.repo,
                self.keys,
                self.hosts,
                worker_id=self.worker_id,
                claimed=self.claimed,
                on_event=self._progress,
                cancel=self.cancel,
                replay=replay_waiting,
            )
        except GenjobError as exc:
            self._finish(Text(visible(str(exc)), style="bold red"))
            return
        except Exception as exc:
            self._finish(Text(visible(f"shipping failed: {exc}"), style="bold red"))
            return
        self._finish(self._summary())

    def _progress(self, event: BatchEvent) -> None:
        self.post_message(self.Progress(event))

    def on_bulk_ship_dialog_progress(self, message: Progress) -> None:
        event = message.event
        if event.phase == "started":
            self.lines[event.key] = (f"running on {event.host} ({event.text})", BUSY)
        elif event.phase == "finished" and event.result is not None:
            status = event.result.status
            self.counts[status] = self.counts.get(status, 0) + 1
            why = f": {event.text}" if event.text else ""
            self.lines[event.key] = (
                f"{status} on {event.host}{why}",
                OK if status == ReceiptStatus.OK else BAD,
            )
        else:
            self.counts[event.phase] = self.counts.get(event.phase, 0) + 1
            self.lines[event.key] = (
                f"{event.phase}: {event.text}",
                BAD if event.phase == "refused" else QUIET,
            )
        self._show()

    def _show(self) -> None:
        body = Text(no_wrap=True, overflow="ellipsis")
        for key, (line, style) in self.lines.items():
            body.append(f"{key[:12]}  ", Style(bold=True))
            body.append(visible(line), style)
            body.append("\n")
        self.query_one("#bulk-jobs", Static).update(body)
        if not self.done:
            finished = sum(self.counts.values())
            running = sum(1 for line, _ in self.lines.values() if line.startswith("running"))
            waiting = len(self.keys) - finished - running
            status = f"{finished} of {len(self.keys)} done · {running} running · {waiting} waiting"
            self.query_one("#bulk-status", Static).update(Text(status, style="bold"))

    def _summary(self) -> Text:
        parts = [f"{n} {name}" for name, n in self.counts.items() if n]
        text = Text(
            ", ".join(parts) or "nothing shipped",
            style=OK if self.counts[ReceiptStatus.OK] == len(self.keys) else BUSY,
        )
        if self.counts[ReceiptStatus.OK]:
            text.append(
                "\nNext: approve each received job with a (mark them and a approves them all).", QUIET
            )
        return text

    def _finish(self, text: Text) -> None:
        self.done = True
        self.query_one("#bulk-status", Static).update(text)
        self.query_one("#bulk-stop").display = False
        close = self.query_one("#bulk-close", Button)
        close.display = True
        close.focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_close()

    def action_close(self) -> None:
        if self.done:
            self.dismiss("closed")
        else:
            self.cancel.set()
            self.query_one("#bulk-status", Static).update(
                Text("stopping: every job in flight ends in an aborted receipt…", style="bold yellow")
            )
