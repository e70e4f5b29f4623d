"""The board: counts, the job list and the selected job's detail, live from `.gen/`.

Files are the source of truth. The screen composes the widgets and routes messages: a
`BoardFeed` reports what is on disk (rows, verdicts, checks, a job's detail), a
`Dispatcher` runs each key's action (`tui.services.actions.TABLE`) and reports its outcome, a
`CheckRunner` runs checks (as receipts arrive, and on `t`) and reports how they go, and
the screen shows all three.

Movement is the arrow keys (and page up/down, home/end), and `j`/`k`/`g`/`G` as in k9s,
lazygit and less; stopping a run is `ctrl+k`, as in k9s, always confirmed. The job list
holds the focus: after a dialog, the full-screen diff or an un-zoom it has it again, and
the filter box takes it only while it is shown.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

from rich.style import Style
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Input, Static

from core.errors import GenjobError
from core.model.lifecycle import STATE_ORDER, State
from core.model.standing import Standing
from core.model.terminal import visible
from core.read.board_view import BoardView
from core.store.events import actor
from core.store.layout import Layout
from tui import render
from tui.messages import (
    ActionDone,
    CheckEnded,
    CheckOutput,
    ChecksConfigured,
    ChecksFound,
    CheckStarted,
    DetailLoaded,
    FeedStatus,
    NamesListed,
    PlaneRead,
    PolicyRead,
    RowsChanged,
    RunEnded,
    Say,
    SearchFound,
    StampsRead,
    Trouble,
    VerdictsFound,
)
from tui.notes import board_note
from tui.services.actions import STATES_FOR, TABLE, Dispatcher, may
from tui.services.check_runner import CheckRunner
from tui.services.feed import TIME_SENSITIVE, BoardFeed
from tui.services.notices import Notices
from tui.text import counted, in_repo
from tui.widgets.counts import DIGITS, READY_KEY, CountsBar
from tui.widgets.detail import DetailPane
from tui.widgets.job_table import JobTable
from tui.widgets.key_bar import Hint, KeyBar

if TYPE_CHECKING:
    from core.read.plane_view import PlaneView
    from core.store.queue import Enqueued
    from tui.dialogs.quit import QuitChoice

DETAIL_DEBOUNCE = 0.12
# The states of the jobs in flight: a change among them may change the apply plane.
IN_FLIGHT = frozenset({State.QUEUED, State.RUNNING, State.ORPHANED, State.RECEIVED, State.STALE})
NARROW = 140
# Relative times tick this often (s); a running job's detail is read again every RELOAD.
TICK = 1.0
RELOAD = 5.0
# The least rest between two reads of the apply plane (s).
PLANE_REST = 0.2

# The board's actions on jobs, most useful first: the order of their hints.
JOB_ACTIONS = (
    "apply",
    "checks",
    "stop_checks",
    "ship",
    "claim",
    "cancel",
    "requeue",
    "replay",
    "reject",
    "discard",
)
# What to do with a job in each state: the hint a refusal ends with.
NEXT_STEP = {
    State.QUEUED: "claim (c) or ship (s) it",
    State.RUNNING: "wait for its receipt, or stop it (ctrl+k)",
    State.ORPHANED: "its worker is gone: requeue it (r)",
    State.RECEIVED: "approve (a) or reject (x) it",
    State.STALE: "replay it (R) over the tree as it is now",
    State.FAILED: "replay it (R) once the cause is fixed",
    State.APPLIED: "it is done",
    State.REJECTED: "replay it (R) to try again",
    State.INVALID: "discard it (D): its bad files are kept as evidence",
    State.INCONSISTENT: "run `genjob recover` (the Job tab names the rule)",
}


def _states_for(action: str) -> str:
    return ", ".join(s.value for s in STATE_ORDER if s in STATES_FOR[action])


class FilterBox(Input):
    """The text filter; it takes the focus only while shown, so typing never goes to a hidden box."""

    def allow_focus(self) -> bool:
        return self.display and super().allow_focus()


class BoardScreen(Screen[None]):
    AUTO_FOCUS = "#jobs"
    # Escape is the board's own (`clear`): it un-zooms and gives the list the focus back,
    # where Textual's minimize would leave the focus nowhere.
    ESCAPE_TO_MINIMIZE = False
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "a", "job('apply')", "Approve", tooltip="Preflight, then apply a verified receipt", id="approve"
        ),
        Binding(
            "s", "job('ship')", "Ship", tooltip="Ship a queued job (or one this board claimed)", id="ship"
        ),
        Binding("c", "job('claim')", "Claim", tooltip="Claim a queued job: this board holds it", id="claim"),
        Binding(
            "ctrl+k", "job('cancel')", "Stop", tooltip="Stop a running job (it ends aborted)", id="cancel"
        ),
        Binding("r", "job('requeue')", "Requeue", tooltip="Requeue an orphaned job", id="requeue"),
        Binding(
            "R", "job('replay')", "Replay", tooltip="Replay a stale, failed or rejected job", id="replay"
        ),
        Binding("x", "job('reject')", "Reject", tooltip="Reject a job, with a reason", id="reject"),
        Binding(
            "t",
            "job('checks')",
            "Checks",
            tooltip="Run a received job's checks again, sandboxed",
            id="checks",
        ),
        Binding(
            "T", "job('stop_checks')", "Stop checks", tooltip="Stop the checks running", id="stop_checks"
        ),
        Binding("D", "job('discard')", "Discard", tooltip="Set an INVALID job's files aside", id="discard"),
        Binding("n", "new_job", "New", tooltip="Write a new job and queue it", id="new"),
        Binding("d", "diff", "Diff", tooltip="The selected job's diff, full screen", id="diff"),
        Binding(
            "h",
            "hosts",
            "Hosts",
            tooltip="The fleet: each host's runs now, last error, round trip",
            id="hosts",
        ),
        Binding("slash", "filter", "Filter", key_display="/", tooltip="Filter jobs by text", id="filter"),
        Binding(
            READY_KEY,
            "toggle_ready",
            "Ready",
            tooltip="Show or hide only the jobs apply --ready would apply now, in its order",
            id="ready",
        ),
        Binding(
            "left", "tab(-1)", "Prev tab", key_display="←", tooltip="The detail's previous tab", id="tab-prev"
        ),
        Binding(
            "right", "tab(1)", "Next tab", key_display="→", tooltip="The detail's next tab", id="tab-next"
        ),
        Binding("enter", "zoom", "Zoom", tooltip="The detail pane alone (again to go back)", id="zoom"),
        Binding("escape", "clear", "Clear", tooltip="Close the filter; clear marks and filters", id="clear"),
        Binding("question_mark", "help", "Help", key_display="?", tooltip="Every key", id="help"),
        Binding("q", "app.quit", "Quit", tooltip="Quit the board (asks first while it runs jobs)", id="quit"),
        Binding("j", "move(1)", "Down", show=False, id="move-down"),
        Binding("k", "move(-1)", "Up", show=False, id="move-up"),
        Binding("g", "to_edge(0)", "First job", show=False, id="move-first"),
        Binding("G", "to_edge(1)", "Last job", show=False, id="move-last"),
        *(
            Binding(
                digit,
                f"toggle_state('{state.value}')",
                f"Only {state.value}",
                tooltip=f"Show or hide only {state.value} jobs",
                id=f"state-{state.value.lower()}",
            )
            for state, digit in DIGITS.items()
        ),
    ]
    # The bindings that change something: hidden (and refused) on a read-only board.
    CHANGES = frozenset(
        {
            "approve",
            "ship",
            "claim",
            "cancel",
            "requeue",
            "replay",
            "reject",
            "discard",
            "new",
            "checks",
            "stop_checks",
        }
    )

    def __init__(self, layout: Layout, readonly: bool = False) -> None:
        super().__init__()
        self.repo = layout
        self.readonly = readonly
        self.view = BoardView(track=TIME_SENSITIVE)
        self.signature_required = True
        self.config_error: str | None = None
        self.config_held: str | None = None
        self.trusted_keys = -1  # not read yet
        self.scanning = True
        self.watching = "starting"
        self._detail_timer: Timer | None = None
        self._filter_timer: Timer | None = None
        self._select_when_seen: str | None = None
        self.searching: tuple[int, int] | None = None  # a text filter's search: (read, of)
        self._loaded_at = 0.0
        self.worker_id = f"board:{actor()}"
        # Where each judged job's receipt and checks stand, and the checks that run unsandboxed.
        self.standings: dict[str, Standing] = {}
        self.unsandboxed: tuple[str, ...] = ()
        # The apply plane as last read (None: not yet), and whether something it depends on
        # changed since. It is read in a thread, one read at a time, and after a read rests
        # as long as that read took (at least PLANE_REST): at most half a thread's time,
        # however large the queue.
        self.plane: PlaneView | None = None
        self._plane_dirty = True
        self._plane_reading = False
        self._plane_began = 0.0
        self._plane_rests_until = 0.0
        self._plane_timer: Timer | None = None
        # Whether the feed has read the policy, which it does once the first rows are
        # painted: the apply plane and the notifier wait for it (the plane parses every job
        # in flight, the notifier imports the config model: either would hold that paint back).
        self._up = False

    # -- layout ----------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        # Sized before the widgets are styled, not restyled once they are (on_resize).
        self.set_class(self.app.size.width < NARROW, "narrow")
        yield BoardFeed(self.repo, self.view, id="feed")
        runner = CheckRunner(self.repo, id="check-runner")
        yield runner
        yield Dispatcher(self.repo, self.worker_id, runner, id="dispatcher")
        yield Notices(self.repo, id="notices")
        yield Static(id="status")
        yield CountsBar(id="counts")
        yield FilterBox(placeholder="filter: key prefix, words of the instruction, worker, path", id="filter")
        with Horizontal(id="main"):
            yield JobTable(self.view, id="jobs")
            yield DetailPane(self.repo.root, id="detail")
        yield KeyBar(id="keys")

    def on_mount(self) -> None:
        self.query_one(FilterBox).display = False
        self._focus_list()
        self._show_status()
        self._show_keys()
        self.set_interval(TICK, self._tick)

    def _focus_list(self) -> None:
        self.table.focus(scroll_visible=False)

    def on_screen_resume(self) -> None:
        """Back from a dialog or the diff: the list has the focus again."""
        if self.maximized is None and not self.query_one(FilterBox).has_focus:
            self._focus_list()
        self._show_keys()

    def _tick(self) -> None:
        """Ages move on, and so do the detail's relative times; a running job's heartbeat
        is read again now and then."""
        self.table.refresh()
        self.query_one(DetailPane).tick()
        key = self.table.cursor_key
        row = self.view.rows.get(key) if key else None
        if row is not None and row.state is State.RUNNING and time.monotonic() - self._loaded_at > RELOAD:
            self._schedule_detail()

    @work(thread=True, group="plane", exit_on_error=False)
    def _read_plane(self) -> None:
        """The apply plane, read off the loop (it verifies every receipt and reads every
        job in flight); a config that cannot be read leaves the last one shown."""
        from core.read.plane_view import plane_view

        try:
            plane: PlaneView | None = plane_view(self.repo)
        except (GenjobError, OSError):
            plane = None
        self.post_message(PlaneRead(plane))

    @property
    def plane_settled(self) -> bool:
        """Whether the apply plane shown was read after the last change it depends on."""
        return not self._plane_dirty and not self._plane_reading

    def _plane_moved(self) -> None:
        """Something the apply plane depends on changed: it is read again once it may be."""
        self._plane_dirty = True
        self._next_plane_read()

    def _next_plane_read(self) -> None:
        if not (self._up and self._plane_dirty) or self._plane_reading or self._plane_timer:
            return
        wait = self._plane_rests_until - time.monotonic()
        if wait > 0:
            self._plane_timer = self.set_timer(wait, self._plane_rested)
            return
        self._plane_dirty, self._plane_reading = False, True
        self._plane_began = time.monotonic()
        self._read_plane()

    def _plane_rested(self) -> None:
        self._plane_timer = None
        self._next_plane_read()

    def on_resize(self) -> None:
        self.set_class(self.size.width < NARROW, "narrow")

    @property
    def table(self) -> JobTable:
        return self.query_one(JobTable)

    @property
    def feed(self) -> BoardFeed:
        return self.query_one(BoardFeed)

    @property
    def dispatcher(self) -> Dispatcher:
        return self.query_one(Dispatcher)

    @property
    def checks(self) -> CheckRunner:
        return self.query_one(CheckRunner)

    # -- what the feed reports -------------------------------------------------------------------
    @on(NamesListed)
    def _names_listed(self, message: NamesListed) -> None:
        """Every job by name: the list starts again from them (the rows read stay)."""
        self.view.set_listing(message.listing)
        self._plane_moved()
        self._refilter()

    @on(StampsRead)
    def _stamps_read(self, message: StampsRead) -> None:
        """The queue's files stat'ed: its jobs go newest first, the cursor on its job."""
        self.view.set_stamps(message.stamps)
        self.table.apply(None)

    @on(JobTable.WindowShown)
    def _window_shown(self, message: JobTable.WindowShown) -> None:
        self.feed.want(message.keys, message.window)

    @on(SearchFound)
    def _search_found(self, message: SearchFound) -> None:
        if message.needle != self.view.text:
            return
        self.view.found(message.needle, message.rows)
        self.searching = None if message.done == message.total else (message.done, message.total)
        self.table.apply(None)
        self._show_status()
        self._show_empty()

    @on(RowsChanged)
    def _rows_changed(self, message: RowsChanged) -> None:
        changed = message.changed
        table = self.table
        selected = table.cursor_key
        reload = (
            selected is not None and selected in changed and changed[selected] != self.view.rows.get(selected)
        )
        before = {key: self.view.where.get(key) for key in changed}
        if any(b in IN_FLIGHT for b in before.values()) or any(
            r is not None and r.state in IN_FLIGHT for r in changed.values()
        ):
            self._plane_moved()
        table.apply(changed)
        self.query_one(Notices).rows_changed(before, changed)
        self._show_counts()
        wanted = self._select_when_seen
        if wanted and wanted in changed and table.select(wanted):
            self._select_when_seen = None
        if reload:
            self._schedule_detail()
        self._show_status()
        self._show_empty()
        if reload or selected != table.cursor_key:
            self._show_keys()

    @on(JobTable.FirstRowsDrawn)
    def _rows_painted(self) -> None:
        """The first rows are on the screen: the feed may go on to its slower reads, and
        the detail pane may mount its tabs."""
        self.feed.rows_shown()
        self.call_later(self.query_one(DetailPane).build)

    @on(VerdictsFound)
    def _verdicts_found(self, message: VerdictsFound) -> None:
        self.table.set_verdicts(message.verdicts)

    @on(ChecksFound)
    def _checks_found(self, message: ChecksFound) -> None:
        before = {k: self.standings.get(k) for k in message.standings}
        self.standings.update(message.standings)
        self._plane_moved()
        self._show_check_marks(message.standings)
        self.checks.consider(message.standings)
        selected = self.table.cursor_key
        if selected in message.standings and before[selected] != message.standings[selected]:
            self._schedule_detail()

    @on(ChecksConfigured)
    def _checks_configured(self, message: ChecksConfigured) -> None:
        self.checks.configure(message.on_receipt and not self.readonly, message.concurrency)
        # Receipts judged before the config was read are considered now (once each).
        rows = self.view.rows
        self.checks.consider(
            {k: s for k, s in self.standings.items() if (row := rows.get(k)) and row.state is State.RECEIVED}
        )
        self.table.show_check_column(bool(message.names))
        self.unsandboxed = message.unsandboxed
        self._show_status()

    def _show_check_marks(self, keys: Iterable[str]) -> None:
        """The list's check marks of `keys`: each check as judged, or running on this board."""
        marks: dict[str, str | None] = {}
        for key in keys:
            standing = self.standings.get(key)
            marks[key] = render.check_marks(standing.checks, self.checks.live_for(key)) if standing else None
        self.table.set_checks(marks)

    def _preflight_moved(self, key: str) -> None:
        """An open preflight of `key` reads its job again: a check of it started or ended."""
        from tui.dialogs.preflight import PreflightDialog

        screen = self.app.screen
        if isinstance(screen, PreflightDialog) and screen.preflight.key == key:
            screen.reread()

    @on(CheckStarted)
    @on(CheckOutput)
    def _check_moved(self, message: CheckStarted | CheckOutput) -> None:
        if isinstance(message, CheckStarted):
            self._show_check_marks([message.key])
            self._show_keys()
            self._preflight_moved(message.key)
        if message.key == self.table.cursor_key:
            self.query_one(DetailPane).show_checks(self.checks.live_for(message.key))

    @on(CheckEnded)
    def _check_ended(self, message: CheckEnded) -> None:
        severity: SeverityLevel = (
            "information" if message.passed else "error" if message.passed is False else "warning"
        )
        self._say(message.text, title=f"{message.key[:12]}", severity=severity)
        self.query_one(Notices).check_ended(message.key, message.name, message.passed, message.text)
        self._show_check_marks([message.key])
        self._preflight_moved(message.key)
        self._plane_moved()
        self.feed.judge([message.key])
        if message.key == self.table.cursor_key:
            self.query_one(DetailPane).show_checks(self.checks.live_for(message.key))
            self._schedule_detail()
        self._show_keys()

    @on(RunEnded)
    def _run_ended(self, message: RunEnded) -> None:
        self.query_one(Notices).runs_ended(message.results)

    @on(FeedStatus)
    def _feed_status(self, message: FeedStatus) -> None:
        self.scanning, self.watching = message.scanning, message.watching
        self._show_status()
        self._show_empty()

    @on(PolicyRead)
    def _policy_read(self, message: PolicyRead) -> None:
        self.signature_required = message.signature_required
        self.config_error = message.config_error
        self.config_held = message.config_held
        self.trusted_keys = message.trusted_keys
        if not self._up:
            self._up = True
            self.query_one(Notices).load()
        self._plane_moved()
        self.table.set_protected(message.protected)
        pane = self.query_one(DetailPane)
        pane.signature_required = self.signature_required
        if not self.view.where:  # else the first rows drawn are the moment
            self.call_later(pane.build)
        self._show_status()
        self._show_empty()

    @on(PlaneRead)
    def _plane_read(self, message: PlaneRead) -> None:
        """The ready jobs' places in the queue and the overlaps, on the list and in the
        detail; the ready filter follows the new order."""
        self._plane_reading = False
        now = time.monotonic()
        self._plane_rests_until = now + max(PLANE_REST, now - self._plane_began)
        self._next_plane_read()
        plane = message.plane
        if plane is None:
            return
        self.plane = plane
        self.table.set_plane({k: i for i, k in enumerate(plane.ready, 1)}, plane.flight.overlapping())
        if self.view.only is not None:
            self.view.set_filter(only=plane.ready)
            self._refilter()
        else:
            self._show_counts()
        self._show_plane()

    def _show_plane(self) -> None:
        """What the apply plane says of the job under the cursor, atop its Job tab."""
        key = self.table.cursor_key
        lines = self.plane.lines(key) if self.plane is not None and key is not None else []
        self.query_one(DetailPane).set_plane(lines)

    @on(Trouble)
    def _trouble(self, message: Trouble) -> None:
        self._say(message.text, severity=message.severity)

    @on(DetailLoaded)
    def _detail_loaded(self, message: DetailLoaded) -> None:
        if message.key != self.table.cursor_key:
            return
        self._loaded_at = time.monotonic()
        pane = self.query_one(DetailPane)
        pane.live = self.checks.live_for(message.key)
        if isinstance(message.detail, str):
            pane.show_message(Text(visible(in_repo(message.detail, self.repo.root)), style="bold red"))
        else:
            pane.show(message.detail)

    @property
    def untrusted(self) -> bool:
        """Signatures are required, and no key is pinned: nothing can be approved."""
        return self.signature_required and self.trusted_keys == 0

    def _show_status(self) -> None:
        """One line: the repository, then what limits the operator, most pressing first."""
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(" genjob ", style="bold reverse")
        text.append(" ")
        text.append(visible(self.repo.root.name or str(self.repo.root)), style="bold")
        if self.readonly:
            text.append("  READ-ONLY: changes are off ", style="bold black on yellow")
        if self.config_error:
            text.append("  config: ", style="bold red")
            text.append(visible(self.config_error), style="red")
        if self.config_held:
            text.append("  config waits for approval, runs nothing: genjob allow", style="bold red")
        if self.untrusted:
            text.append("  no trusted key: genjob trust", style="bold red")
        text.append("  ")
        if self.signature_required:
            text.append("signatures required", style=Style(color="green", bold=True))
        else:
            text.append("signatures NOT required", style=Style(color="black", bgcolor="yellow", bold=True))
        if self.unsandboxed:
            text.append("  ")
            text.append(
                f"checks UNSANDBOXED: {', '.join(self.unsandboxed)}",
                style=Style(color="black", bgcolor="yellow", bold=True),
            )
        marks = len(self.table.marks) if self.is_mounted else 0
        if marks:
            text.append(f"  {marks} marked", style="bold yellow")
        if self.searching is not None:
            text.append(f"  searching… {self.searching[0]:,} of {self.searching[1]:,}", style="yellow")
        if self.scanning:
            text.append(f"  scanning… {counted(len(self.view.where), 'job')}", style="yellow")
        else:
            text.append(f"  {self.watching}", style="green" if self.watching == "watching" else "yellow")
        self.query_one("#status", Static).update(text, layout=False)

    def _show_empty(self) -> None:
        """What the list says when it shows no job: how to make one, or that the filter hides all."""
        lines: list[tuple[str, bool]] = []
        if self.scanning:
            lines.append(("reading .gen/…", False))
        elif self.view.where and self.view.only is not None and not self.view.text and not self.view.states:
            lines.append(("No job is ready for apply --ready now: p shows every job again.", False))
        elif self.view.where and self.searching is not None:
            lines.append((f"searching… {self.searching[0]:,} of {self.searching[1]:,} jobs read", False))
        elif self.view.where:
            lines.append(("No job matches the filter: escape clears it.", False))
        else:
            lines += [
                ("No jobs yet.", False),
                ("", False),
                (
                    "n writes one here; or, in a shell:" if not self.readonly else "Mint one in a shell:",
                    False,
                ),
                ('  genjob mint -m "Add a timeout to fetch_user" src/user.py', False),
                ("then s ships it to a generator host and a approves its receipt.", False),
            ]
        if self.config_held and not self.scanning:
            lines += [("", False), (self.config_held, True)]
        if self.untrusted and not self.scanning:
            lines += [
                ("", False),
                ("Signatures are required, but no key is trusted: nothing can be approved.", True),
                ("  genjob keygen", True),
                ("  genjob trust ~/.config/genjob/worker_ed25519.pub", True),
            ]
        self.table.empty = lines
        self.table.refresh()
        # With no job at all there is no detail to show: the list takes the room.
        self.query_one(DetailPane).display = bool(self.view.where) or self.scanning

    # -- the key hints ----------------------------------------------------------------------------
    def _hints(self) -> list[Hint]:
        """The keys worth showing now: the actions the selected (or marked) jobs allow, then
        the board's own; on a read-only board, nothing that changes anything."""
        by_id = {b.id: b for b in self.BINDINGS if isinstance(b, Binding)}
        hints = []
        if not self.readonly:
            for action in JOB_ACTIONS:
                if self._applies(action):
                    b = by_id["approve" if action == "apply" else action]
                    hints.append(Hint(b.key_display or b.key, b.description, b.action))
        selected = self.table.cursor_key is not None
        for ident in ("diff", "zoom", "filter", "new", "hosts", "ready"):
            if (self.readonly and ident in self.CHANGES) or (ident in ("diff", "zoom") and not selected):
                continue
            b = by_id[ident]
            hints.append(Hint(b.key_display or b.key, b.description, b.action))
        if not self.readonly:
            hints.append(Hint("space", "Mark", "mark"))
        return hints

    def _applies(self, action: str) -> bool:
        where = self.view.where
        d = self.dispatcher
        if self.table.marks:
            return any(k in where and may(d, action, k, where[k]) for k in self.table.marks)
        key = self.table.cursor_key
        return key is not None and key in where and may(d, action, key, where[key])

    def _show_keys(self) -> None:
        kept = [Hint("?", "Help", "help"), Hint("q", "Quit", "app.quit")]
        self.query_one(KeyBar).show(self._hints(), kept)

    def action_mark(self) -> None:
        self.table.action_mark()

    # -- the selected job ------------------------------------------------------------------------
    @on(JobTable.CursorMoved)
    def _cursor_moved(self, event: JobTable.CursorMoved) -> None:
        if event.key is not None:
            self.query_one(DetailPane).show_loading(event.key)
        self._show_plane()
        self._schedule_detail()
        self._show_keys()

    @on(JobTable.MarksChanged)
    def _marks_changed(self) -> None:
        if self.readonly and self.table.marks:
            # Marks only gather jobs for an action, and a read-only board runs none.
            self.table.clear_marks()
            self._say("read-only board: nothing to mark jobs for", severity="warning")
        self._show_status()
        self._show_keys()

    def _schedule_detail(self) -> None:
        if self._detail_timer is not None:
            self._detail_timer.stop()
        self._detail_timer = self.set_timer(DETAIL_DEBOUNCE, self._load_detail_now)

    def _load_detail_now(self) -> None:
        key = self.table.cursor_key
        if key is None:
            self.query_one(DetailPane).show_message(Text("no job selected", style="dim"))
            return
        self.feed.load_detail(key)

    # -- filters -------------------------------------------------------------------------------
    @on(CountsBar.Toggled)
    def _chip(self, event: CountsBar.Toggled) -> None:
        self.action_toggle_state(event.state.value)

    def action_toggle_state(self, name: str) -> None:
        self.view.set_filter(states=self.view.states ^ {State(name)})
        self._search()
        self._refilter()

    def _show_counts(self) -> None:
        bar = self.query_one(CountsBar)
        bar.set_counts(self.view.counts, self.view.states, self.view.unread)
        bar.set_ready(None if self.plane is None else len(self.plane.ready), self.view.only is not None)

    @on(CountsBar.ReadyToggled)
    def _ready_chip(self) -> None:
        self.action_toggle_ready()

    def action_toggle_ready(self) -> None:
        """Show only the jobs `genjob apply --ready` would apply now, in the order it would
        take them (again: every job)."""
        if self.plane is None:
            self._say("the apply plane is still being read", severity="warning")
            return
        self.view.set_filter(only=None if self.view.only is not None else self.plane.ready)
        self._refilter()

    def _refilter(self) -> None:
        self.table.apply(None)
        self._show_counts()
        self._show_status()
        self._show_empty()
        self._show_keys()

    def action_filter(self) -> None:
        box = self.query_one(FilterBox)
        box.display = True
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_typed(self, event: Input.Changed) -> None:
        if self._filter_timer is not None:
            self._filter_timer.stop()
        value = event.value
        self._filter_timer = self.set_timer(0.15, lambda: self._set_text_filter(value))

    def _set_text_filter(self, value: str) -> None:
        self.view.set_filter(text=value)
        self._search()
        self._refilter()

    def _search(self) -> None:
        """Have the feed read what a text filter must read to know which jobs it matches."""
        keys = self.view.to_search()
        self.searching = (0, len(keys)) if keys else None
        if self.view.text:
            self.feed.search(self.view.text, keys)

    @on(Input.Submitted, "#filter")
    def _filter_done(self, event: Input.Submitted) -> None:
        self._set_text_filter(event.value)
        if not event.value.strip():
            event.input.display = False
        self._focus_list()

    def action_clear(self) -> None:
        """Escape: close what is open (the key panel, the filter box, a zoom), else clear
        marks and filters."""
        box = self.query_one(FilterBox)
        if self.app.screen.query("HelpPanel"):
            self.app.action_hide_help_panel()
            return
        if box.has_focus:
            if not box.value:
                box.display = False
            self._focus_list()
            return
        if self.maximized is not None:
            self.minimize()
            self._focus_list()
            return
        self.table.clear_marks()
        box.value = ""
        box.display = False
        self.view.set_filter(states=(), text="", only=None)
        self._search()
        self._refilter()
        self._focus_list()

    def action_tab(self, step: int) -> None:
        self.query_one(DetailPane).step_tab(step)

    def action_zoom(self) -> None:
        if self.maximized is not None:
            self.minimize()
            self._focus_list()
        else:
            self.maximize(self.query_one(DetailPane), container=False)

    def help_bindings(self) -> list[Binding]:
        """Every key the help lists (on a read-only board, none that changes anything)."""
        keys = [
            b
            for b in self.BINDINGS
            if isinstance(b, Binding)
            and not (b.id or "").startswith(("state-", "move-"))
            and not (self.readonly and b.id in self.CHANGES)
        ]
        marks = [
            b for b in JobTable.BINDINGS if isinstance(b, Binding) and b.id == "mark" and not self.readonly
        ]
        extra = [
            Binding("1-9,0", "", "Show only one state (again to undo; several combine)", key_display="1…0"),
            Binding("up,down,j,k", "", "Move the cursor", key_display="↑ ↓ j k"),
            Binding("pageup,pagedown", "", "Move a page", key_display="pgup pgdn"),
            Binding("home,end,g,G", "", "The first or the last job", key_display="home end g G"),
            Binding("ctrl+p", "", "Command palette: every action by name", key_display="ctrl+p"),
        ]
        return [*keys, *marks, *extra]

    def action_move(self, step: int) -> None:
        self.table.action_cursor(step)

    def action_to_edge(self, end: int) -> None:
        self.table.action_edge(end)

    def ask_quit(self) -> None:
        """Quit; while this board runs jobs or holds claims, first ask what becomes of them."""
        from tui.dialogs.quit import QuitDialog

        d = self.dispatcher
        runs, waiting, claims = d.running_keys(), d.waiting_keys(), list(d.idle_claims())
        if not runs and not waiting and not claims:
            self.app.exit()
            return

        def answered(choice: QuitChoice | None) -> None:
            if choice is not None:
                d.quit_with(choice)

        self.app.push_screen(QuitDialog(runs, claims, len(waiting)), answered)

    def action_help(self) -> None:
        from tui.screens.help import HelpScreen

        self.app.push_screen(HelpScreen(self.help_bindings(), self.readonly))

    def action_hosts(self) -> None:
        from tui.screens.fleet import FleetScreen

        self.app.push_screen(FleetScreen(self.repo, self.readonly))

    def action_diff(self) -> None:
        from tui.screens.diff import DiffScreen

        key = self.table.cursor_key
        detail = self.query_one(DetailPane).detail
        if key is None:
            self._say("no job selected", severity="warning")
        elif detail is None or detail.row.key != key:
            self._say("the job's detail is still loading", severity="warning")
        else:
            self.app.push_screen(DiffScreen(detail))

    # -- actions ----------------------------------------------------------------------------------
    def _targets(self, action: str) -> tuple[list[str], int] | None:
        """The keys an action applies to (the marked jobs, or the one under the cursor) and
        how many marked jobs it skips; None, after telling why, when there is nothing to do."""
        verb = TABLE[action].verb
        if self.readonly:
            self._say(f"read-only board: {verb} refused", severity="warning")
            return None
        table, d = self.table, self.dispatcher
        where = self.view.where
        if table.marks:
            marked = [k for k in sorted(table.marks) if k in where]
            ok = [k for k in marked if may(d, action, k, where[k])]
            if not ok:
                self._say(
                    f"none of the {len(marked)} marked jobs allows {verb}: it is for {_states_for(action)}",
                    severity="warning",
                )
                return None
            return ok, len(marked) - len(ok)
        key = table.cursor_key
        if key is None or key not in where:
            self._say("no job selected", severity="warning")
            return None
        state = where[key]
        if may(d, action, key, state):
            return [key], 0
        if action == "apply" and state is State.STALE:
            d.offer_merge(key)
        elif action == "ship" and state is State.RUNNING:
            self._say(
                f"{key[:12]}: is RUNNING, held by another worker; {NEXT_STEP[state]}", severity="warning"
            )
        else:
            refused = f"{key[:12]}: is {state.value}; {verb} is for {_states_for(action)}"
            self._say(f"{refused}. Next: {NEXT_STEP[state]}", severity="warning")
        return None

    def action_job(self, action: str) -> None:
        got = self._targets(action)
        if got is not None:
            keys, skipped = got
            self.dispatcher.dispatch(action, keys, bool(self.table.marks), skipped)

    @on(ActionDone)
    def _action_done(self, message: ActionDone) -> None:
        """Report what happened, re-derive the jobs it touched, and put the marks away."""
        done, failed, verb = message.done, message.failed, message.verb
        if len(done) + len(failed) == 1:
            if done:
                self._say(done[0], title=verb)
            else:
                self._say(failed[0], title=f"{verb} failed", severity="error")
        elif done or failed:
            text = f"{len(done)} done, {len(failed)} failed" + (f"\n{failed[0]}" if failed else "")
            self._say(text, title=f"bulk {verb}", severity="error" if failed else "information")
        if message.select is not None:
            self._select_when_seen = message.select
        self.feed.refresh_keys(message.keys)
        self._plane_moved()
        self.table.clear_marks()
        self._show_keys()

    @on(Say)
    def _said(self, message: Say) -> None:
        self._say(message.text, message.title, message.severity)

    def action_recover(self) -> None:
        """`genjob recover` from the palette: each line it reports is a notification."""
        if self.readonly:
            self._say("read-only board: recover refused", severity="warning")
            return
        self.run_worker(self._recover, thread=True, group="actions")

    def _recover(self) -> None:
        from core.review.recover import recover

        try:
            report = recover(self.repo)
        except (GenjobError, OSError) as exc:
            self.post_message(Say(str(exc), "error", "recover failed"))
            return
        for line in report.done:
            self.post_message(Say(line, "information", "recover"))
        for line in report.left:
            self.post_message(Say(line, "error", "recover: left to do"))
        if not report.lines:
            self.post_message(Say("nothing to recover", "information", "recover"))

    def action_new_job(self) -> None:
        from tui.dialogs.new_job import NewJobDialog

        if self.readonly:
            self._say("read-only board: new job refused", severity="warning")
            return

        def done(res: Enqueued | None) -> None:
            if res is None:
                return
            self._select_when_seen = res.key
            note = "queued" if res.created else f"exists already ({res.folder})"
            self._say(f"{res.key[:12]}: {note}")
            self.feed.refresh_keys([res.key])

        self.app.push_screen(NewJobDialog(self.repo), done)

    def _say(self, message: str, title: str = "", severity: SeverityLevel = "information") -> None:
        """A notification showing `message` literally (it may quote a job's own text)."""
        shown = visible(in_repo(message, self.repo.root), keep_newlines=True)
        self.app.post_message(board_note(shown, title, severity, self.app.NOTIFICATION_TIMEOUT))
