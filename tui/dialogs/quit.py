"""Quitting a board that still runs jobs or holds claims: what becomes of them.

A run is a process of this board's: it cannot outlive the board, so quitting either
stops it (an aborted receipt, ready to replay) or waits for it to end. A claim the board
holds but has not shipped can go back to the queue, or be left held: its lease lapses,
the job turns ORPHANED, and a worker or `genjob requeue` picks it up. A batch's jobs in
flight are runs like any other; those still waiting for a host start only if the board
waits. The board asks, and each answer says what follows.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from tui.dialogs import fit_to_terminal
from tui.text import counted

QuitChoice = Literal["stop", "wait", "leave"]
CHOICES: dict[str, QuitChoice] = {"stop": "stop", "wait": "wait", "leave": "leave"}
LISTED = 8


class QuitDialog(ModalScreen["QuitChoice | None"]):
    """Asks what to do with `runs` (keys this board ships), `claims` (keys it holds idle)
    and the `waiting` jobs of its batches (not started yet)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "answer('stop')", "Stop and quit", id="quit.stop"),
        Binding("w", "answer('wait')", "Wait, then quit", id="quit.wait"),
        Binding("l", "answer('leave')", "Leave the claims and quit", id="quit.leave"),
        Binding("escape,n", "answer(None)", "Keep the board", id="quit.keep"),
    ]

    def __init__(self, runs: list[str], claims: list[str], waiting: int = 0) -> None:
        super().__init__()
        self.runs = runs
        self.claims = claims
        self.waiting = waiting

    @property
    def going(self) -> bool:
        """Whether anything runs, or waits to, that quitting stops or waits for."""
        return bool(self.runs or self.waiting)

    def _body(self) -> Text:
        body = Text()
        if self.runs:
            body.append(f"{counted(len(self.runs), 'run')} still going on this board:\n", style="bold")
            body.append("".join(f"  {k}\n" for k in self.runs[:LISTED]), style="dim")
        if self.waiting:
            body.append(f"{counted(self.waiting, 'job')} of a batch waiting for a host\n", style="bold")
        if self.claims:
            body.append(f"{counted(len(self.claims), 'claim')} this board holds:\n", style="bold")
            body.append("".join(f"  {k}\n" for k in self.claims[:LISTED]), style="dim")
        stop = ["stop the runs (aborted receipts, ready to replay)"] if self.runs else []
        stop += ["start no more of the batch"] if self.waiting else []
        back = ["give the claims back to the queue"] if self.claims else []
        body.append(f"\ns  {', '.join([*stop, *back])}, and quit\n")
        if self.going:
            body.append(
                "w  quit once the runs have ended" + ("; the claims go back now\n" if self.claims else "\n")
            )
        if self.claims:
            first = "stop the runs, then " if self.going else ""
            body.append(f"l  {first}quit leaving the claims held: each job turns ORPHANED once its\n")
            body.append("   lease lapses, for a worker or `genjob requeue KEY` to pick up\n")
        return body

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Static(Text("Quit with jobs in hand?", style="bold"), classes="dialog-title")
            with VerticalScroll(classes="dialog-body"):
                yield Static(self._body())
            with Horizontal(classes="dialog-buttons"):
                yield Button("Stop and quit (s)", id="stop", variant="error")
                if self.going:
                    yield Button("Wait (w)", id="wait", variant="primary")
                if self.claims:
                    yield Button("Leave claims (l)", id="leave")
                yield Button("Keep (esc)", id="keep")

    def on_mount(self) -> None:
        fit_to_terminal(self)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_answer(event.button.id)

    def action_answer(self, choice: str | None) -> None:
        if (choice == "wait" and not self.going) or (choice == "leave" and not self.claims):
            return
        self.dismiss(CHOICES.get(choice or ""))
