"""`d`: the diff a job's outputs would make, full screen."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from core.inspect_job import JobDetail
from tui import render


class DiffScreen(Screen[None]):
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("escape,q,d", "close", "Back to the board", id="diff.close"),
        Binding("j,down", "scroll(1)", "Down", show=False),
        Binding("k,up", "scroll(-1)", "Up", show=False),
    ]

    def __init__(self, detail: JobDetail) -> None:
        super().__init__()
        self.detail = detail

    def compose(self) -> ComposeResult:
        applied = self.detail.located is not None and self.detail.located.folder == "applied"
        yield Static(render.title_text(self.detail), id="diff-title")
        with VerticalScroll(id="diff-scroll"):
            yield Static(render.diffs_text(self.detail.diffs, applied), id="diff-body")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#diff-scroll").focus()

    def action_scroll(self, delta: int) -> None:
        self.query_one("#diff-scroll", VerticalScroll).scroll_relative(y=delta, animate=False)

    def action_close(self) -> None:
        self.dismiss(None)
