"""Shipping one job: progress, a live tail of the generator's output, and the next step.

While it runs, escape (or "Cancel ship") stops it: the runner kills the generator and
the job ends in an aborted receipt. Once it ends, the dialog says how, and for a receipt
that came back ok offers to approve it (`a`), which opens the approve preflight.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Log, Static

from core.contract import ReceiptStatus
from core.demo_generator import stand_in_note
from core.errors import GenjobError
from core.layout import Layout
from core.terminal import visible
from tui.dialogs import fit_to_terminal

if TYPE_CHECKING:
    from core.queue import Claim
    from core.ship import ShipResult

MAX_LOG_LINES = 5000


class ShipDialog(ModalScreen[str]):
    """Runs `core.ship.ship` for one job; returns "approve" when the operator asked to
    approve the receipt it brought back, else "closed"."""

    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape", "close", "Close / cancel", id="ship.close"),
        Binding("a", "approve", "Approve", id="ship.approve"),
    ]

    class Output(Message):
        def __init__(self, data: bytes) -> None:
            super().__init__()
            self.data = data

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
        self._partial = ""

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide tall"):
            yield Static(f"Shipping {self.key} to {self.host or 'the default host'}", classes="dialog-title")
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
        from core.ship import ship  # asyncssh is slow to import: only when shipping

        self._status(Text(f"claiming and shipping to {self.host or 'the default host'}…", style="bold"))
        try:
            spread, stand_ins = await asyncio.to_thread(self._plan)
            if len(spread) > 1:
                await self._ship_candidates(spread)
                return
            result = await ship(
                self.repo,
                self.key,
                self.host,
                on_output=lambda data: self.post_message(self.Output(data)),
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
        from core.config import candidate_hosts, load_config
        from core.ship import Hosts

        config = load_config(self.repo.config)
        stand_ins = {name for name, host in config.hosts.items() if host.stand_in}
        return candidate_hosts(config, [Hosts(config).pick(self.host)]), stand_ins

    async def _ship_candidates(self, spread: list[str]) -> None:
        """Best-of-N: a line in the log as each candidate ends; then `a` compares them."""
        from core.ship_candidates import CandidateRequest, ship_candidates

        self._status(Text(f"running {len(spread)} candidates on {spread[0]}…", style="bold"))

        def ended(res: ShipResult) -> None:
            why = f" ({res.reason})" if res.reason else ""
            lost = "" if res.won else "; the lease was lost, so it was kept aside"
            line = f"[genjob] candidate {res.candidate} on {res.host}: {res.status}{why}{lost}\n"
            self.post_message(self.Output(line.encode()))

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

    def on_ship_dialog_output(self, message: Output) -> None:
        text = self._partial + message.data.decode("utf-8", errors="replace")
        lines = text.split("\n")
        self._partial = lines.pop()
        log = self.query_one("#ship-log", Log)
        log.write_lines([visible(line) for line in lines])

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
    if result.status == ReceiptStatus.OK:
        return line + f", {len(result.outputs)} output file(s).\nNext: a opens the approve preflight."
    return line + ".\nNext: replay the job (R on the board) once the cause is fixed."
