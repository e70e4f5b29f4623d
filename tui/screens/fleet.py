"""`h`: the fleet, one row per configured host, live; `p` probes every host.

The rows are `core.work.fleet.HostView`s, read in a thread every REFRESH seconds (and after a
probe) and posted back as a message; every cell is a `Text`, so nothing a host or a
config says is read as markup.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static

from core.errors import GenjobError
from core.model.terminal import age, visible
from core.store.config import load_config
from core.store.layout import Layout
from core.work.fleet import HostView, Note, fleet
from tui.widgets.key_bar import Hint, KeyBar
from tui.widgets.sized_table import fill

REFRESH = 2.0
COLUMNS = ("host", "transport", "conc", "now", "rtt", "last error")
# Cells cut (with …) to this many characters so that every column fits at 80 columns; the
# lines under the table show the highlighted host's name, transport and last error whole.
HOST_SHOWN = 12
TRANSPORT_SHOWN = 20
ERROR_SHOWN = 16


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def host_cells(view: HostView, now: float) -> tuple[Text, ...]:
    """One host's row: every value made visible, the busy and the failing in colour."""
    busy = len(view.running)
    rtt = Text("-", style="dim")
    if view.rtt is not None and view.rtt_at is not None:
        rtt = Text(f"{view.rtt:.2f}s {age(now - view.rtt_at)}")
    error = host_error(view, now)
    if len(error.plain) > ERROR_SHOWN:
        error = error[: ERROR_SHOWN - 1] + Text("…", style=error.style)
    return (
        Text(_cut(visible(view.name), HOST_SHOWN), style="bold", no_wrap=True),
        _transport(view),
        Text(str(view.concurrency), justify="right"),
        Text(str(busy), justify="right", style="bold yellow" if busy else "dim"),
        rtt,
        error,
    )


def host_error(view: HostView, now: float) -> Text:
    """The host's last error (or what it lacks) whole, as the line under the table shows it."""
    return _missing(view) or _error(view.last_error, view.last_ok, now)


def host_detail(view: HostView, now: float) -> Text:
    """The lines under the table: the highlighted host's whole name, transport, target and
    sandbox, and its last error."""
    text = Text(visible(view.name), style="bold")
    text.append(f"  {view.transport}{' (stand-in)' if view.stand_in else ''} · {visible(view.target)}\n")
    if view.isolation is not None:
        text.append(f"{view.isolation}\n", style="green" if view.sandboxed else "bold red")
    text.append("last error: ")
    text.append_text(host_error(view, now))
    return text


def _missing(view: HostView) -> Text | None:
    """What the host lacks to run at all, ahead of its last error: a run there would fail."""
    return None if view.missing is None else Text(visible(view.missing), style="bold red")


def _transport(view: HostView) -> Text:
    """The transport's kind and where it goes, short: a local host's sandbox (in red when
    its runs are not sandboxed), a remote one's target cut to fit."""
    text = Text(f"{view.transport} · ", no_wrap=True)
    if view.sandboxed is True:
        text.append("bwrap", style="green")
    elif view.sandboxed is False:
        text.append("UNSANDBOXED", style="bold red")
    else:
        text.append(_cut(visible(view.target), TRANSPORT_SHOWN - len(text.plain)))
    return text


def _error(error: Note | None, ok: Note | None, now: float) -> Text:
    if error is None:
        return Text("-", style="dim")
    what = "probe" if error.key is None else f"{error.key[:8]} #{error.attempt}"
    # An error older than the last success is history: shown, not alarming.
    style = "dim" if ok is not None and ok.at > error.at else "red"
    return Text(f"{age(now - error.at)} {what}: {visible(error.reason or error.status)}", style=style)


class FleetScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "p", "probe", "Probe", tooltip="Time an empty job on every host, there and back", id="fleet.probe"
        ),
        Binding("escape,q,h", "close", "Back", id="fleet.close"),
        Binding("question_mark", "help", "Help", key_display="?", id="fleet.help"),
    ]

    @dataclass
    class Read(Message):
        """The hosts, as read."""

        views: list[HostView]

    @dataclass
    class Unreadable(Message):
        """The config or the fleet's notes could not be read: why."""

        error: str

    def __init__(self, layout: Layout, readonly: bool = False) -> None:
        super().__init__()
        self.repo = layout
        self.readonly = readonly
        self.views: list[HostView] = []
        self.probing = False

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-title")
        yield DataTable(id="fleet-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="fleet-detail")
        yield KeyBar(id="fleet-keys")

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        fill(table, COLUMNS, [])
        table.focus()
        probe = [] if self.readonly else [Hint("p", "Probe every host", "probe")]
        self.query_one(KeyBar).show(probe, [Hint("esc", "Back to the board", "close")])
        self._title()
        self.reload()
        self.set_interval(REFRESH, self.reload)

    def _title(self, error: str | None = None) -> None:
        text = Text(" Hosts ", style="bold reverse")
        text.append(f"  {len(self.views)} configured", style="bold")
        if self.probing:
            text.append("  probing…", style="yellow")
        if error:
            text.append(f"  {visible(error)}", style="bold red")
        self.query_one("#fleet-title", Static).update(text)

    def reload(self) -> None:
        """Read the hosts again, off the loop."""
        self._read(self.repo)

    @work(thread=True, exclusive=True, group="fleet-read")
    def _read(self, layout: Layout) -> None:
        try:
            views = fleet(layout, load_config(layout.config))
        except GenjobError as exc:
            self.post_message(self.Unreadable(str(exc)))
            return
        self.post_message(self.Read(views))

    @on(Unreadable)
    def _unreadable(self, message: Unreadable) -> None:
        self._title(message.error)

    @on(Read)
    def _read_done(self, message: Read) -> None:
        self.show(message.views)

    def show(self, views: list[HostView]) -> None:
        self.views = views
        now = time.time()
        fill(self.query_one(DataTable), COLUMNS, [(view.name, host_cells(view, now)) for view in views])
        self._title()
        self._show_detail()

    @on(DataTable.RowHighlighted)
    def _show_detail(self) -> None:
        row = self.query_one(DataTable).cursor_row
        view = self.views[row] if 0 <= row < len(self.views) else None
        detail = host_detail(view, time.time()) if view else Text("")
        self.query_one("#fleet-detail", Static).update(detail)

    @work(exclusive=True, group="fleet-probe")
    async def action_probe(self) -> None:
        """Probe every host at once through its own transport, then show the times."""
        if self.readonly:
            self.notify(
                "read-only board: probes run jobs on the hosts, so they are off",
                severity="warning",
                markup=False,
            )
            return
        from core.work.fleet import probe
        from core.work.ship import Hosts  # the transports: only when a probe runs

        try:
            pool = await asyncio.to_thread(lambda: Hosts(load_config(self.repo.config)))
        except GenjobError as exc:
            self._title(str(exc))
            return
        self.probing = True
        self._title()
        try:
            await asyncio.gather(*(probe(self.repo, n, pool.transport(n)) for n in pool.config.hosts))
        finally:
            await pool.close()
            self.probing = False
        self.reload()

    def action_help(self) -> None:
        from tui.screens.help import HelpScreen, screen_keys

        self.app.push_screen(HelpScreen(screen_keys(self.BINDINGS), self.readonly))

    def action_close(self) -> None:
        self.dismiss(None)
