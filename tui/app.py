"""The genjob board as a Textual app; `make_app` builds it for the CLI, tests and screenshots."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from core.layout import Layout, find_root
from tui.screens.board import BoardScreen


class GenjobApp(App[None]):
    CSS_PATH = "genjob.tcss"
    TITLE = "genjob"
    ENABLE_COMMAND_PALETTE = True

    def __init__(self, layout: Layout, readonly: bool = False) -> None:
        super().__init__()
        self.repo = layout
        self.readonly = readonly
        self.sub_title = str(layout.root)

    def on_mount(self) -> None:
        self.push_screen(BoardScreen(self.repo, self.readonly))

    @property
    def board(self) -> BoardScreen:
        """The board screen (under any dialog open on top of it)."""
        for screen in self.screen_stack:
            if isinstance(screen, BoardScreen):
                return screen
        raise LookupError("the board is not open")

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if not isinstance(screen, BoardScreen):
            return
        for binding in screen.BINDINGS:
            if not isinstance(binding, Binding) or binding.id == "clear":
                continue
            key = binding.key_display or binding.key

            def run(action: str = binding.action) -> None:
                self.call_later(screen.run_action, action)

            yield SystemCommand(
                f"{binding.description} ({key})",
                binding.tooltip or binding.description,
                run,
                discover=binding.show,
            )


def make_app(root: Path, readonly: bool = False) -> GenjobApp:
    """The board for the repository at `root` (NotFound when it has no `.gen/`)."""
    return GenjobApp(find_root(explicit=root), readonly)
