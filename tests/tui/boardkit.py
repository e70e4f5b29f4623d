"""Helpers for driving the board with Pilot: wait for conditions, read the screen."""

from __future__ import annotations

import contextlib
import io
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from textual.notifications import Notify
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widgets import Static

from tui.app import GenjobApp, make_app
from tui.screens.board import BoardScreen
from tui.widgets.job_table import JobTable

# Pauses of 50 ms; bounded so that a broken board fails instead of hanging.
MAX_PAUSES = 300


async def wait_for(
    pilot: Pilot[None], condition: Callable[[], bool], what: str | Callable[[], str] = "condition"
) -> None:
    """Pause until `condition()` holds; fail (saying what was awaited) after MAX_PAUSES."""
    for _ in range(MAX_PAUSES):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")


async def loaded(pilot: Pilot[None]) -> BoardScreen:
    """The board once its first full scan is done."""
    app = pilot.app
    assert isinstance(app, GenjobApp)
    await wait_for(pilot, lambda: bool(app.screen_stack) and _scanned(app), "the first scan")
    return app.board


def _scanned(app: GenjobApp) -> bool:
    try:
        b = app.board
    except LookupError:
        return False
    return b.is_mounted and not b.scanning and len(b.view.rows) > 0


async def select(pilot: Pilot[None], key: str) -> None:
    """Put the cursor on `key` and wait for its detail to load."""
    b = pilot.app.board  # type: ignore[attr-defined]
    assert b.table.select(key), f"{key} is not in view"
    await wait_for(
        pilot,
        lambda: (
            b.query_one("DetailPane").detail is not None and b.query_one("DetailPane").detail.row.key == key
        ),
        f"the detail of {key}",
    )


async def showing(pilot: Pilot[None], kind: type[Screen[Any]], what: str) -> None:
    """Wait until the screen on top is a `kind` (a dialog the last key opened)."""
    await wait_for(pilot, lambda: isinstance(pilot.app.screen, kind), what)


@contextlib.asynccontextmanager
async def board_at(
    root: Path, key: str, size: tuple[int, int], **options: Any
) -> AsyncIterator[tuple[Pilot[None], BoardScreen]]:
    """The board on `root`, scanned, with the cursor on `key` and its detail loaded."""
    async with app_for(root, **options).run_test(size=size) as pilot:
        board = await loaded(pilot)
        await select(pilot, key)
        yield pilot, board


def screen_lines(table: JobTable) -> list[str]:
    """The text of every line the job list shows now."""
    return [table.render_line(y).text for y in range(table.scrollable_content_region.height)]


def state_of(pilot: Pilot[None], key: str) -> str | None:
    row = pilot.app.board.view.rows.get(key)  # type: ignore[attr-defined]
    return row.state.value if row else None


class Notes:
    """Collects the notifications the app shows (via run_test's message hook)."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def __call__(self, message: object) -> None:
        if isinstance(message, Notify):
            self.messages.append(message.notification.message)

    def any(self, needle: str) -> bool:
        return any(needle in m for m in self.messages)


def app_for(root: Path, readonly: bool = False) -> GenjobApp:
    return make_app(root, readonly=readonly)


def plain(static: Static) -> str:
    """What a Static shows, as plain text (its Rich renderables printed without styles)."""
    content = static.content
    if isinstance(content, str):
        return content
    console = Console(width=300, file=io.StringIO(), color_system=None, legacy_windows=False)
    console.print(content)
    return console.file.getvalue()  # type: ignore[attr-defined]
