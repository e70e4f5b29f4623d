"""The genjob board as a Textual app; `make_app` builds it for the CLI, tests and screenshots."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from textual.app import App, SystemCommand
from textual.screen import Screen

from core.store.layout import Layout, find_root
from tui.prefs import keep_theme, kept_theme
from tui.screens.board import BoardScreen
from tui.text import use_theme
from tui.widgets.counts import DIGITS


class GenjobApp(App[None]):
    CSS_PATH = "genjob.tcss"
    TITLE = "genjob"
    ENABLE_COMMAND_PALETTE = True

    def __init__(self, layout: Layout, readonly: bool = False) -> None:
        super().__init__()
        self.repo = layout
        self.readonly = readonly
        self.sub_title = str(layout.root)
        theme = kept_theme()
        if theme in self.available_themes:
            self.theme = theme

    def on_mount(self) -> None:
        use_theme(self.get_css_variables())  # styled already: no CSS refresh before the first frame
        self.theme_changed_signal.subscribe(self, lambda _: self._theme_changed())
        self.push_screen(BoardScreen(self.repo, self.readonly))

    def _theme_changed(self) -> None:
        use_theme(self.get_css_variables())
        self.refresh_css()
        self.run_worker(lambda: keep_theme(self.theme), thread=True, group="prefs")

    async def action_quit(self) -> None:
        """`q` and `ctrl+q`: the board asks first while it runs jobs or holds claims."""
        try:
            board = self.board
        except LookupError:
            self.exit()
            return
        board.ask_quit()

    @property
    def board(self) -> BoardScreen:
        """The board screen (under any dialog open on top of it)."""
        for screen in self.screen_stack:
            if isinstance(screen, BoardScreen):
                return screen
        raise LookupError("the board is not open")

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """Textual's commands (but Maximize: the board's zoom does that), then the board's
        keys by name: none twice, none that the board would refuse (read-only)."""
        board = screen if isinstance(screen, BoardScreen) else None
        for command in super().get_system_commands(screen):
            if board is None or command.title not in ("Maximize", "Minimize"):
                yield command
        if board is None:
            return
        for binding in board.help_bindings():
            if binding.id in (None, "quit", "clear", "mark") or not binding.action:
                continue
            key = binding.key_display or binding.key

            def run(action: str = binding.action) -> None:
                self.call_later(board.run_action, action)

            yield SystemCommand(f"{binding.description} ({key})", binding.tooltip or binding.description, run)
        if not board.readonly:

            def recover() -> None:
                self.call_later(board.run_action, "recover")

            yield SystemCommand(
                "Recover",
                "Finish interrupted applies and resolve inconsistent pairs (genjob recover)",
                recover,
            )
        for state, digit in DIGITS.items():

            def only(name: str = state.value) -> None:
                self.call_later(board.run_action, f"toggle_state('{name}')")

            yield SystemCommand(
                f"Only {state.value} ({digit})", f"Show or hide only {state.value} jobs", only, discover=False
            )


def make_app(root: Path, readonly: bool = False) -> GenjobApp:
    """The board for the repository at `root` (NotFound when it has no `.gen/`)."""
    return GenjobApp(find_root(explicit=root), readonly)


def run_board(layout: Layout, readonly: bool = False) -> None:
    """`genjob tui`: the board for `layout`, until the operator quits it."""
    GenjobApp(layout, readonly).run()
