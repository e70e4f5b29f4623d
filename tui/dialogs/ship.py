"""Shipping one job: progress, a live tail of the generator's output, and the next step.

While it runs, escape (or "Cancel ship") stops it: the runner kills the generator and
the job ends in an aborted receipt. Once it ends, the dialog says how, and for a receipt
that came back ok offers to approve it (`a`), which opens the approve preflight.

The generator's output is the host's to choose, so the tail holds it within bounds: each
line is cut at MAX_LINE_CHARS as it arrives, the log keeps MAX_LOG_LINES, and what waits
to be drawn is at most MAX_UNSHOWN_CHARS (the oldest dropped, and said to be).
"""

from __future__ import annotations

import asyncio
import codecs
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Log, Static

from core.errors import GenjobError
from core.model.contract import ReceiptStatus
from core.model.terminal import visible
from core.remote.demo_generator import stand_in_note
from core.remote.rules import LineCap
from core.store.layout import Layout
from tui.dialogs import fit_to_terminal

if TYPE_CHECKING:
    from core.store.queue import Claim
    from core.work.ship import ShipResult

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
    """Runs `core.work.ship.ship` for one job; returns "approve" when the operator asked to
    approve the receipt it brought back, else "closed"."""

    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape", "close", "Close / cancel", id="ship.close"),
        Binding("a", "approve", "Approve", id="ship.approve"),
    ]

    class Output(Message):
        """Output is waiting in `unshown` (posted once until it is shown)."""

    def __init__(
        self, layout: Layout, key: str, host: str | None, worker_id: str, claimed: Claim | None = None
    ) -> None:
        super().__init__()
        self.repo = layout
        self.key = key
        self.host = host
        self.worker_id = worker_id
        self.claimed = claimed
        self.cancel = asyncio.Event()
        self.done = False
        self.succeeded = False
        self.unshown = Unshown()
        self._output_posted = False

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide tall"):
            where = visible(self.host or "the default host")
            yield Static(Text(f"Shipping {self.key} to {where}"), classes="dialog-title")
            yield Static(Text("starting…", style="dim"), id="ship-status")
            yield Log(id="ship-log", max_lines=MAX_LOG_LINES, auto_scroll=True)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Approve (a)", id="ship-approve", variant="success")
                yield Button("Cancel ship (esc)", id="ship-cancel", variant="error")
                yield Button("Close (esc)", id="ship-close")

    def on_mount(self) -> None:
        fit_to_terminal(self)
        self.query_one("#ship-approve").display = False
        self.query_one("#ship-close").display = False
        self._ship()

    def _status(self, text: Text) -> None:
        self.query_one("#ship-status", Static).update(text)

    @work(exclusive=True, group="ship", exit_on_error=False)
    async def _ship(self) -> None:
        from core.work.ship import ship  # asyncssh is slow to import: only when shipping

        self._status(
            Text(f"claiming and shipping to {visible(self.host or 'the default host')}…", style="bold")
        )
        try:
            spread, stand_ins = await asyncio.to_thread(self._plan)
            if len(spread) > 1:
                await self._ship_candidates(spread)
                return
            result = await ship(
                self.repo,
                self.key,
                self.host,
                on_output=self._output,
                cancel=self.cancel,
                worker_id=self.worker_id,
                claimed=self.claimed,
            )
        except GenjobError as exc:
            self._finish(Text(visible(str(exc)), style="bold red"), False)
            return
        except Exception as exc:
            self._finish(Text(visible(f"ship failed: {exc}"), style="bold red"), False)
            return
        ok = result.status == ReceiptStatus.OK and result.won
        style = "bold green" if ok else "bold yellow"
        text = Text(visible(describe(result), keep_newlines=True), style=style)
        if result.host in stand_ins:
            text.append(f"\nNote: {stand_in_note([visible(result.host)])}.", style="yellow")
        self._finish(text, ok)

    def _plan(self) -> tuple[list[str], set[str]]:
        """The host of each run (one, unless the host or the policy asks for candidates),
        and which configured hosts run the stand-in generator."""
        from core.store.config import candidate_hosts, load_config
        from core.work.ship import Hosts

        config = load_config(self.repo.config)
        stand_ins = {name for name, host in config.hosts.items() if host.stand_in}
        return candidate_hosts(config, [Hosts(config).pick(self.host)]), stand_ins

    async def _ship_candidates(self, spread: list[str]) -> None:
        """Best-of-N: a line in the log as each candidate ends; then `a` compares them."""
        from core.work.ship_candidates import CandidateRequest, ship_candidates

        self._status(Text(f"running {len(spread)} candidates on {visible(spread[0])}…", style="bold"))

        def ended(res: ShipResult) -> None:
            why = f" ({res.reason})" if res.reason else ""
            lost = "" if res.won else "; the lease was lost, so it was kept aside"
            line = f"[genjob] candidate {res.candidate} on {res.host}: {res.status}{why}{lost}\n"
            self._output(line.encode())

        results = await ship_candidates(
            self.repo,
            CandidateRequest(self.key, spread, len(spread), claimed=self.claimed),
            self.cancel,
            worker_id=self.worker_id,
            on_candidate=ended,
        )
        ok = sum(1 for r in results if r.status == ReceiptStatus.OK and r.won)
        line = f"{len(results)} candidates of {self.key[:12]}: {ok} came back ok."
        if ok:
            line += "\nNext: a shows them side by side; approve one there."
        self._finish(Text(line, style="bold green" if ok else "bold yellow"), ok > 0)

    def _finish(self, text: Text, ok: bool) -> None:
        self.done = True
        self.succeeded = ok
        self._status(text)
        self.query_one("#ship-cancel").display = False
        close = self.query_one("#ship-close", Button)
        close.display = True
        approve = self.query_one("#ship-approve", Button)
        approve.display = ok
        (approve if ok else close).focus()
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "approve":
            return self.done and self.succeeded
        return True

    def _output(self, data: bytes) -> None:
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
            self.action_close()
        elif event.button.id == "ship-approve":
            self.action_approve()
        else:
            self.dismiss("closed")

    def action_approve(self) -> None:
        if self.done and self.succeeded:
            self.dismiss("approve")

    def action_close(self) -> None:
        if self.done:
            self.dismiss("closed")
        else:
            self.cancel.set()
            self._status(Text("cancelling: the runner stops the generator…", style="bold yellow"))


def describe(result: ShipResult) -> str:
    """One line about how a ship ended."""
    line = f"{result.key[:12]} on {result.host}, attempt {result.attempt}: receipt {result.status}"
    if result.reason:
        line += f" ({result.reason})"
    if not result.won:
        return line + "; the lease was lost, so the receipt was kept aside as evidence"
    if result.status == ReceiptStatus.OK and result.unchanged:
        nothing = "nothing changed (every output equals its input)"
        return line + f", but {nothing}.\nNext: replay it once the cause is fixed."
    if result.status == ReceiptStatus.OK:
        return line + f", {len(result.outputs)} output file(s).\nNext: a opens the approve preflight."
    return line + ".\nNext: replay the job (R on the board) once the cause is fixed."
