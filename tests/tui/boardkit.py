"""Driving the board with Pilot: wait on its messages and workers, read its screen.

Nothing here sleeps: `Driver.until` re-checks a condition each time the app has handled
another message (a file event's rows, a worker's report, a timer), and `Driver.settle`
waits for the action workers to finish. A broken board fails by the suite's timeout,
with the awaited condition named in the traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from textual.message import Message
from textual.notifications import Notify
from textual.pilot import Pilot
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Static

from tui.app import GenjobApp, make_app
from tui.dialogs.confirm import ConfirmDialog
from tui.screens.board import BoardScreen
from tui.widgets.detail import DetailPane
from tui.widgets.job_table import JobTable

SIZE = (160, 48)
# How often `Driver.until` looks again when no message arrives (seconds).
RECHECK_EVERY = 0.05


@dataclass
class Inbox:
    """The app's message hook: keeps every notification and wakes whoever waits on a message."""

    notes: list[str] = field(default_factory=list)
    kinds: list[type[Message]] = field(default_factory=list)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)

    def __call__(self, message: Message) -> None:
        if isinstance(message, Notify):
            self.notes.append(message.notification.message)
        self.kinds.append(type(message))
        self._arrived.set()

    async def next(self) -> None:
        self._arrived.clear()
        await self._arrived.wait()

    def said(self, needle: str) -> bool:
        return any(needle in m for m in self.notes)


@dataclass
class Driver:
    pilot: Pilot[None]
    inbox: Inbox

    @property
    def app(self) -> GenjobApp:
        app = self.pilot.app
        assert isinstance(app, GenjobApp)
        return app

    @property
    def board(self) -> BoardScreen:
        return self.app.board

    @property
    def table(self) -> JobTable:
        return self.board.table

    @property
    def screen(self) -> Screen[Any]:
        return self.app.screen

    async def press(self, *keys: str) -> None:
        await self.pilot.press(*keys)

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        """Wait until `condition()` holds, re-checking after each message the app handles
        (and every so often: the hook sees a message when it is posted, and what it causes
        may happen after the last one). A test stopped by its timeout while waiting says
        what it waited for."""
        try:
            while not condition():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.inbox.next(), RECHECK_EVERY)
                await self.pilot.pause()
        except BaseException as exc:
            exc.add_note(f"while waiting for: {what}")
            raise

    async def settle(self) -> None:
        """Wait for every action the board started (and the messages they posted)."""
        running = [w for w in self.app.workers if w.group == "actions" and not w.is_finished]
        if running:  # an empty list would wait for every worker, the watcher included
            await self.app.workers.wait_for_complete(running)
        await self.pilot.pause()

    async def checks_ended(self) -> None:
        """Wait until every check the board started by itself on a receipt has ended (it
        considers each receipt once both its standing and the config's checks are known)."""
        board = self.board
        received = [k for k, r in board.view.rows.items() if r.state.value == "RECEIVED"]
        await self.until(lambda: all(k in board.table.checks for k in received), "the list's check marks")
        await self.until(lambda: board.table.check_column or not received, "the checks' column")
        await self.until(lambda: not board.checks.live, "the checks under way to end")

    async def showing(self, kind: type[Screen[Any]]) -> Any:
        """Wait until the screen on top is a `kind` (a dialog the last key opened); return it."""
        await self.until(lambda: isinstance(self.app.screen, kind), f"a {kind.__name__}")
        return self.app.screen

    async def loaded(self, jobs: bool = True) -> BoardScreen:
        """The board once its first scan is done (and, with `jobs`, has found some)."""

        def scanned() -> bool:
            try:
                b = self.app.board
            except LookupError:
                return False
            return b.is_mounted and not b.scanning and (len(b.view.rows) > 0 or not jobs)

        await self.until(scanned, "the first scan")
        return self.board

    async def select(self, key: str) -> None:
        """Put the cursor on `key` and wait for its detail to load."""
        assert self.table.select(key), f"{key} is not in view"
        pane = self.board.query_one(DetailPane)
        await self.until(
            lambda: pane.detail is not None and pane.detail.row.key == key, f"the detail of {key}"
        )

    async def ship_marked(self, keys: Iterable[str]) -> None:
        """Mark `keys`, press `s` and confirm the batch (a host picker may come next)."""
        for key in keys:
            await self.select(key)
            await self.press("space")
        await self.press("s")
        await self.showing(ConfirmDialog)
        await self.press("y")

    def state_of(self, key: str) -> str | None:
        row = self.board.view.rows.get(key)
        return row.state.value if row else None

    def lines(self) -> list[str]:
        """The text of every line the job list shows now."""
        table = self.table
        return [table.render_line(y).text for y in range(table.scrollable_content_region.height)]

    def text(self, selector: str) -> str:
        """What the Static `selector` on the top screen shows, as plain text."""
        return plain(self.app.screen.query_one(selector, Static))


@contextlib.asynccontextmanager
async def run_board(
    root: Path,
    size: tuple[int, int] = SIZE,
    *,
    key: str | None = None,
    readonly: bool = False,
    jobs: bool = True,
    notifications: bool = False,
) -> AsyncIterator[Driver]:
    """The board on `root`, scanned (and with the cursor on `key`, its detail loaded);
    with `notifications`, its toasts are drawn too."""
    inbox = Inbox()
    app = make_app(root, readonly=readonly)
    async with app.run_test(size=size, message_hook=inbox, notifications=notifications) as pilot:
        driver = Driver(pilot, inbox)
        await driver.loaded(jobs)
        if key is not None:
            await driver.select(key)
        yield driver


def drawn(widget: Widget) -> list[tuple[str, set[str]]]:
    """What `widget` draws, line by line: the text, and the actions a click there runs."""
    lines = []
    for y in range(widget.size.height):
        strip = widget.render_line(y)
        actions = {str(seg.style.meta["@click"]) for seg in strip if seg.style and "@click" in seg.style.meta}
        lines.append((strip.text, actions))
    return lines


def plain(static: Static) -> str:
    """What a Static shows, as plain text (its Rich renderables printed without styles)."""
    content = static.content
    if isinstance(content, str):
        return content
    console = Console(width=300, file=io.StringIO(), color_system=None, legacy_windows=False)
    console.print(content)
    return console.file.getvalue()  # type: ignore[attr-defined]
