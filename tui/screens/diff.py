"""`d`: the diff a job's outputs would make, full screen."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from core.read.inspect_job import JobDetail
from tui import render
from tui.widgets.key_bar import Hint, KeyBar


class DiffScreen(Screen[None]):
    # Movement is the arrows and page keys, as on the board; letters only act.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,d", "close", "Back", id="diff.close"),
        Binding("down", "scroll(1)", "Down", show=False),
        Binding("up", "scroll(-1)", "Up", show=False),
        Binding("question_mark", "help", "Help", key_display="?", id="diff.help"),
    ]

    def __init__(self, detail: JobDetail) -> None:
        super().__init__()
        self.detail = detail

    def compose(self) -> ComposeResult:
        applied = self.detail.located is not None and self.detail.located.folder == "applied"
        yield Static(render.title_text(self.detail), id="diff-title")
        with VerticalScroll(id="diff-scroll"):
            yield Static(render.diffs_text(self.detail.diffs, applied), id="diff-body")
        yield KeyBar(id="diff-keys")

    def on_mount(self) -> None:
        self.query_one("#diff-scroll").focus()
        self.query_one(KeyBar).show(
            [Hint("↑↓", "Scroll", "scroll(1)"), Hint("pgup pgdn", "Page", "scroll(1)")],
            [Hint("esc", "Back to the board", "close")],
        )

    def action_scroll(self, delta: int) -> None:
        self.query_one("#diff-scroll", VerticalScroll).scroll_relative(y=delta, animate=False)

    def action_help(self) -> None:
        from tui.screens.help import HelpScreen, screen_keys

        self.app.push_screen(HelpScreen(screen_keys(self.BINDINGS), False))

    def action_close(self) -> None:
        self.dismiss(None)
