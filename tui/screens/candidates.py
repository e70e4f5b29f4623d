"""A job's best-of-N candidates side by side, and the diff of the highlighted one.

One row per candidate: where it ran, how it ended, whether it verifies and who signed
it, the size of its change, and its checks (one mark per configured check; `t` runs the
highlighted candidate's checks, each kept as that candidate's record). Below, the
highlighted candidate's diff against the tree, or against the candidate pinned with `b`.
`a` approves the highlighted candidate: its preflight (the same one a receipt gets), then
the screen returns the approval, and the board chooses it and applies it. Everything is
read in threads, which are handed what they read and post what they found as messages;
every cell is a `Text`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static

from core.errors import GenjobError
from core.model.contract import ReceiptStatus
from core.model.standing import CheckState
from core.model.terminal import visible
from core.read.candidate_view import CandidateView, candidate_detail, diff, views
from core.read.inspect_job import job_detail
from core.read.preflight import Preflight, preflight
from core.review.diff import FileDiff
from core.store.candidate_store import load
from core.store.layout import Layout
from tui import render
from tui.dialogs.preflight import Approval
from tui.text import counted
from tui.widgets.key_bar import Hint, KeyBar
from tui.widgets.sized_table import fill

COLUMNS = ("#", "host", "status", "verify", "checks", "change", "signer", "why not")
# A host, a signer's fingerprint (its hash, without "SHA256:") and the reason are cut to
# this many characters, so that every column fits at 80; the line under the table shows
# the highlighted one's reason whole.
HOST_SHOWN = 10
SIGNER_SHOWN = 9
WHY_SHOWN = 12


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def why_not(c: CandidateView) -> str:
    """Why a candidate may not be approved: how its run ended, else its first failed check."""
    return c.reason or (c.failures[0] if c.failures else "")


def reason_line(c: CandidateView) -> Text:
    """The line under the table: the highlighted candidate's whole reason (and every failure)."""
    text = Text(f"candidate {c.number} on {visible(c.host or '?')}: ", style="bold")
    # A failed status step only restates how the run ended, which the reason says.
    failures = [f for f in c.failures if not (c.reason and f.startswith("status: "))]
    reasons = [r for r in (c.reason, *failures) if r]
    if not reasons:
        text.append("nothing against it" if c.ok else c.status, style="green" if c.ok else "red")
    text.append("; ".join(visible(r) for r in reasons), style="red")
    return text


def checks_cell(c: CandidateView, running: bool) -> Text:
    """One mark per configured check, in the config's order; "-" when none is configured."""
    if not c.checks:
        return Text("-", style="dim")
    cell = Text()
    for status in c.checks:
        mark, style = render.CHECK_MARKS[CheckState.RUNNING if running else status.state]
        cell.append(mark, style)
    return cell


def candidate_cells(c: CandidateView, pinned: int | None, running: bool = False) -> tuple[Text, ...]:
    """One candidate's row, every value made visible."""
    number = Text(f"{c.number}{'*' if c.chosen else ''}{' =' if c.number == pinned else ''}", style="bold")
    status = Text(c.status, style="green" if c.status == ReceiptStatus.OK else "red")
    verifies = Text("yes" if c.ok else "no", style="bold green" if c.ok else "bold red")
    if c.signer:
        signer = visible(c.signer).removeprefix("SHA256:")
        signature = Text(_cut(signer, SIGNER_SHOWN), style="green", no_wrap=True)
    else:
        signature = Text("unsigned" if not c.signed else "not trusted", style="red")
    change = Text("-", style="dim")
    if c.status == ReceiptStatus.OK:
        change = Text(f"{counted(c.files, 'file')} ")
        change.append(f"+{c.added}", style="green")
        change.append(f" -{c.removed}", style="red")
    return (
        number,
        Text(_cut(visible(c.host or "?"), HOST_SHOWN)),
        status,
        verifies,
        checks_cell(c, running),
        change,
        signature,
        Text(_cut(visible(why_not(c)), WHY_SHOWN), style="dim", no_wrap=True),
    )


class CandidatesScreen(Screen[Approval | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "a",
            "approve",
            "Approve",
            tooltip="Preflight, then choose and apply this candidate",
            id="cand.approve",
        ),
        Binding(
            "b",
            "pin",
            "Compare",
            tooltip="Diff the others against this candidate (again: the tree)",
            id="cand.pin",
        ),
        Binding("t", "check", "Run checks", tooltip="Run this candidate's checks", id="cand.check"),
        Binding("escape,q", "close", "Back", id="cand.close"),
        Binding("pageup", "scroll(-10)", "Page up", show=False),
        Binding("pagedown", "scroll(10)", "Page down", show=False),
        Binding("question_mark", "help", "Help", key_display="?", id="cand.help"),
    ]

    @dataclass
    class Listed(Message):
        """The job's candidates, as read."""

        shown: list[CandidateView]

    @dataclass
    class Unreadable(Message):
        """The candidates could not be read: why, for the title."""

        text: Text

    @dataclass
    class DiffRead(Message):
        """Candidate `number`'s diff (or why it cannot be shown)."""

        number: int
        body: Group | Text

    def __init__(self, layout: Layout, key: str, readonly: bool = False) -> None:
        super().__init__()
        self.repo = layout
        self.key = key
        self.readonly = readonly
        self.shown: list[CandidateView] = []
        self.pinned: int | None = None
        self.checking: int | None = None  # the candidate whose checks run now
        self._stop_checks = asyncio.Event()

    def compose(self) -> ComposeResult:
        yield Static(Text(f"{self.key}  reading its candidates…", style="dim"), id="cand-title")
        yield DataTable(id="cand-table", cursor_type="row")
        yield Static(id="cand-reason")
        with VerticalScroll(id="cand-scroll"):
            yield Static(id="cand-diff")
        yield KeyBar(id="cand-keys")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        fill(table, COLUMNS, [])
        table.focus()
        changes = (
            []
            if self.readonly
            else [Hint("a", "Approve this one", "approve"), Hint("t", "Run its checks", "check")]
        )
        self.query_one(KeyBar).show(
            [*changes, Hint("b", "Compare against this one", "pin"), Hint("↑↓", "Candidate", "")],
            [Hint("esc", "Back to the board", "close")],
        )
        self.reload()

    @property
    def highlighted(self) -> int | None:
        table = self.query_one(DataTable)
        if not self.shown or table.cursor_row >= len(self.shown):
            return None
        return self.shown[table.cursor_row].number

    def reload(self) -> None:
        """Read the candidates again, off the loop."""
        self._read(self.repo, self.key)

    @work(thread=True, exclusive=True, group="candidates-read")
    def _read(self, layout: Layout, key: str) -> None:
        try:
            shown = views(layout, key)
        except GenjobError as exc:
            self.post_message(self.Unreadable(Text(visible(str(exc)), style="bold red")))
            return
        self.post_message(self.Listed(shown))

    @on(Unreadable)
    def _unreadable(self, message: Unreadable) -> None:
        self._title(message.text)

    @on(Listed)
    def _listed(self, message: Listed) -> None:
        self._show(message.shown)

    def _title(self, text: Text) -> None:
        self.query_one("#cand-title", Static).update(text)

    def _show(self, shown: list[CandidateView]) -> None:
        self.shown = shown
        table = self.query_one(DataTable)
        rows = [(str(c.number), candidate_cells(c, self.pinned, c.number == self.checking)) for c in shown]
        fill(table, COLUMNS, rows)
        verify = sum(1 for c in shown if c.ok)
        title = Text(f" {self.key} ", style="bold reverse")
        title.append(f"  {counted(len(shown), 'candidate')}, {verify} verify", style="bold")
        picked = next((c.number for c in shown if c.chosen), None)
        title.append(f"  candidate {picked} chosen" if picked else "  none chosen yet")
        against = f"candidate {self.pinned}" if self.pinned else "the tree"
        title.append(f"  diffs against {against}", style="dim")
        self._title(title)
        if shown:
            self._show_reason()
            self._load_diff()

    @on(DataTable.RowHighlighted)
    def _highlighted(self) -> None:
        self._show_reason()
        self._load_diff()

    def _show_reason(self) -> None:
        row = self.query_one(DataTable).cursor_row
        shown = reason_line(self.shown[row]) if 0 <= row < len(self.shown) else Text("")
        self.query_one("#cand-reason", Static).update(shown)

    def _load_diff(self) -> None:
        """Read the highlighted candidate's diff (against the pinned one, if another), off the loop."""
        number = self.highlighted
        if number is None:
            return
        against = self.pinned if self.pinned and self.pinned != number else None
        self._read_diff(self.repo, self.key, number, against)

    @work(thread=True, exclusive=True, group="candidates-diff")
    def _read_diff(self, layout: Layout, key: str, number: int, against: int | None) -> None:
        try:
            mine = load(layout, key, number)
            base = load(layout, key, against) if against is not None else None
            diffs = diff(layout, mine, base)
        except GenjobError as exc:
            self.post_message(self.DiffRead(number, Text(visible(str(exc)), style="red")))
            return
        self.post_message(self.DiffRead(number, self._diff_body(number, against, diffs)))

    @staticmethod
    def _diff_body(number: int, against: int | None, diffs: list[FileDiff]) -> Group:
        what = f"candidate {against}" if against else "the tree"
        head = Text(f"candidate {number} against {what}\n", style="bold")
        return Group(head, render.diffs_text(diffs))

    @on(DiffRead)
    def _diff(self, message: DiffRead) -> None:
        if message.number == self.highlighted:
            self.query_one("#cand-diff", Static).update(message.body)

    def action_pin(self) -> None:
        number = self.highlighted
        self.pinned = None if number == self.pinned else number
        self._show(self.shown)

    def action_scroll(self, delta: int) -> None:
        self.query_one("#cand-scroll", VerticalScroll).scroll_relative(y=delta, animate=False)

    @work(exclusive=True, group="candidates-approve")
    async def action_approve(self) -> None:
        """The highlighted candidate's preflight; approved, the screen returns it."""
        if self.readonly:
            self.notify("read-only board: approving is off", severity="warning", markup=False)
            return
        number = self.highlighted
        if number is None:
            return
        from tui.dialogs.preflight import PreflightDialog

        def read() -> Preflight:
            detail = candidate_detail(self.repo, job_detail(self.repo, self.key), number)
            return dataclasses.replace(preflight(self.repo, detail), candidate=number)

        try:
            p = await asyncio.to_thread(read)
        except GenjobError as exc:
            self.notify(visible(str(exc)), severity="error", markup=False)
            return
        answer = await self.app.push_screen_wait(PreflightDialog(p, self.repo.root))
        if isinstance(answer, Approval):
            self.dismiss(Approval(answer.commit, candidate=number))

    @work(exclusive=True, group="candidates-check")
    async def action_check(self) -> None:
        """Run the configured checks on the highlighted candidate, one after another; each
        ends in that candidate's own record, and the marks are read again."""
        if self.readonly:
            self.notify("read-only board: running checks is off", severity="warning", markup=False)
            return
        number = self.highlighted
        if number is None or self.checking is not None:
            return
        from core.review.checks import run_checks

        self.checking = number
        self._show(self.shown)
        try:
            runs = await run_checks(self.repo, self.key, cancel=self._stop_checks, candidate=number)
        except GenjobError as exc:
            self.notify(visible(str(exc)), severity="error", markup=False)
        else:
            failed = [r.name for r in runs if not r.passed]
            if not runs:
                self.notify(
                    "no checks are configured ([checks.NAME] in .gen/config.toml)",
                    severity="warning",
                    markup=False,
                )
            elif failed:
                self.notify(
                    f"candidate {number}: {', '.join(map(visible, failed))} failed",
                    severity="warning",
                    markup=False,
                )
            else:
                self.notify(f"candidate {number}: {len(runs)} check(s) passed", markup=False)
        finally:
            self.checking = None
            self.reload()

    def action_help(self) -> None:
        from tui.screens.help import HelpScreen, screen_keys

        self.app.push_screen(HelpScreen(screen_keys(self.BINDINGS), self.readonly))

    def action_close(self) -> None:
        self._stop_checks.set()  # a check of a candidate stops with the screen that ran it
        self.dismiss(None)
