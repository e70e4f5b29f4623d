"""The board: counts, the job list and the selected job's detail, live from `.gen/`.

Files are the source of truth. The screen composes the widgets and routes messages: a
`BoardFeed` reports what is on disk (rows, verdicts, a job's detail), a `Dispatcher` runs
each key's action (`tui.actions.TABLE`) and reports its outcome, and the screen shows both.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Input, Static

from core.board_view import BoardView
from core.events import actor
from core.layout import Layout
from core.lifecycle import ACTIONS, STATE_ORDER, State, allowed
from core.queue import Enqueued
from core.terminal import visible
from tui.actions import TABLE, ActionDone, Dispatcher, Say
from tui.feed import TIME_SENSITIVE, BoardFeed
from tui.render import policy_text
from tui.widgets.counts import DIGITS, CountsBar
from tui.widgets.detail import DetailPane
from tui.widgets.job_table import JobTable

DETAIL_DEBOUNCE = 0.12
NARROW = 140


def _states_for(action: str) -> str:
    return ", ".join(s.value for s in STATE_ORDER if s in ACTIONS[action])


class BoardScreen(Screen[None]):
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("c", "job('claim')", "Claim", tooltip="Claim the selected queued job", id="claim"),
        Binding("s", "job('ship')", "Ship", tooltip="Ship a queued job to a generator host", id="ship"),
        Binding(
            "a", "job('apply')", "Approve", tooltip="Preflight, then apply a verified receipt", id="approve"
        ),
        Binding("x", "job('reject')", "Reject", tooltip="Reject a job, with a reason", id="reject"),
        Binding("r", "job('requeue')", "Requeue", tooltip="Requeue an orphaned job", id="requeue"),
        Binding(
            "R", "job('replay')", "Replay", tooltip="Replay a stale, failed or rejected job", id="replay"
        ),
        Binding("k", "job('cancel')", "Cancel", tooltip="Cancel a running job", id="cancel"),
        Binding("n", "new_job", "New", tooltip="Write a new job and queue it", id="new"),
        Binding("d", "diff", "Diff", tooltip="The selected job's diff, full screen", id="diff"),
        Binding("slash", "filter", "Filter", key_display="/", tooltip="Filter jobs by text", id="filter"),
        Binding(
            "left", "tab(-1)", "Prev tab", show=False, tooltip="The detail pane's previous tab", id="tab-prev"
        ),
        Binding(
            "right", "tab(1)", "Next tab", show=False, tooltip="The detail pane's next tab", id="tab-next"
        ),
        Binding("enter", "zoom", "Zoom", tooltip="Show the detail pane alone (again to go back)", id="zoom"),
        Binding("escape", "clear", "Clear", show=False, tooltip="Clear marks and filters", id="clear"),
        Binding("question_mark", "help", "Help", key_display="?", tooltip="Every key", id="help"),
        Binding("q", "app.quit", "Quit", tooltip="Quit the board", id="quit"),
        *(
            Binding(
                digit,
                f"toggle_state('{state.value}')",
                f"Only {state.value}",
                show=False,
                tooltip=f"Show or hide only {state.value} jobs",
                id=f"state-{state.value.lower()}",
            )
            for state, digit in DIGITS.items()
        ),
    ]

    def __init__(self, layout: Layout, readonly: bool = False) -> None:
        super().__init__()
        self.repo = layout
        self.readonly = readonly
        self.view = BoardView(track=TIME_SENSITIVE)
        self.signature_required = True
        self.config_error: str | None = None
        self.trusted_keys = -1  # not read yet
        self.scanning = True
        self.watching = "starting"
        self._detail_timer: Timer | None = None
        self._filter_timer: Timer | None = None
        self._select_when_seen: str | None = None
        self.worker_id = f"board:{actor()}"

    # -- layout ----------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield BoardFeed(self.repo, self.view, id="feed")
        yield Dispatcher(self.repo, self.worker_id, id="dispatcher")
        yield Static(id="status")
        yield CountsBar(id="counts")
        yield Input(placeholder="filter: key prefix, words of the instruction, worker, path", id="filter")
        with Horizontal(id="main"):
            yield JobTable(self.view, id="jobs")
            yield DetailPane(id="detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self.table.focus()
        self._show_status()
        self.set_interval(5.0, self._tick)

    def _tick(self) -> None:
        """Ages move on; so does a running job's heartbeat, which no row shows."""
        self.table.refresh()
        key = self.table.cursor_key
        row = self.view.rows.get(key) if key else None
        if row is not None and row.state is State.RUNNING:
            self._schedule_detail()

    def on_resize(self) -> None:
        self.set_class(self.size.width < NARROW, "narrow")

    @property
    def table(self) -> JobTable:
        return self.query_one(JobTable)

    @property
    def feed(self) -> BoardFeed:
        return self.query_one(BoardFeed)

    # -- what the feed reports -------------------------------------------------------------------
    @on(BoardFeed.RowsChanged)
    def _rows_changed(self, message: BoardFeed.RowsChanged) -> None:
        changed = message.changed
        table = self.table
        selected = table.cursor_key
        reload = (
            selected is not None and selected in changed and changed[selected] != self.view.rows.get(selected)
        )
        table.apply(changed)
        self.query_one(CountsBar).set_counts(self.view.counts, self.view.states)
        wanted = self._select_when_seen
        if wanted and wanted in changed and table.select(wanted):
            self._select_when_seen = None
        if reload:
            self._schedule_detail()
        self._show_status()

    @on(BoardFeed.VerdictsFound)
    def _verdicts_found(self, message: BoardFeed.VerdictsFound) -> None:
        self.table.set_verdicts(message.verdicts)

    @on(BoardFeed.Status)
    def _feed_status(self, message: BoardFeed.Status) -> None:
        self.scanning, self.watching = message.scanning, message.watching
        self._show_status()

    @on(BoardFeed.PolicyRead)
    def _policy_read(self, message: BoardFeed.PolicyRead) -> None:
        self.signature_required = message.signature_required
        self.config_error = message.config_error
        self.trusted_keys = message.trusted_keys
        self.query_one(DetailPane).signature_required = self.signature_required
        self._show_status()

    @on(BoardFeed.Trouble)
    def _trouble(self, message: BoardFeed.Trouble) -> None:
        self._say(message.text, severity=message.severity)

    @on(BoardFeed.DetailLoaded)
    def _detail_loaded(self, message: BoardFeed.DetailLoaded) -> None:
        if message.key != self.table.cursor_key:
            return
        pane = self.query_one(DetailPane)
        if isinstance(message.detail, str):
            pane.show_message(Text(visible(message.detail), style="bold red"))
        else:
            pane.show(message.detail)

    def _show_status(self) -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(" genjob ", style="bold reverse")
        text.append(" ")
        text.append(visible(str(self.repo.root)), style="bold")
        text.append("  ")
        text.append_text(policy_text(self.signature_required))
        if self.config_error:
            text.append("  config: ", style="bold red")
            text.append(visible(self.config_error), style="red")
        if self.readonly:
            text.append("  READ-ONLY ", style="bold black on yellow")
        if self.scanning:
            text.append(f"  scanning… {len(self.view.rows):,} jobs", style="yellow")
        else:
            text.append(f"  {self.watching}", style="green" if self.watching == "watching" else "yellow")
        marks = len(self.table.marks) if self.is_mounted else 0
        if marks:
            text.append(f"  {marks} marked", style="bold yellow")
        self.query_one("#status", Static).update(text, layout=False)

    # -- the selected job ------------------------------------------------------------------------
    @on(JobTable.CursorMoved)
    def _cursor_moved(self, event: JobTable.CursorMoved) -> None:
        if event.key is not None:
            self.query_one(DetailPane).loading(event.key)
        self._schedule_detail()

    @on(JobTable.MarksChanged)
    def _marks_changed(self) -> None:
        self._show_status()

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
        state = State(name)
        self.view.states = self.view.states ^ {state}
        self._refilter()

    def _refilter(self) -> None:
        self.table.apply(None)
        self.query_one(CountsBar).set_counts(self.view.counts, self.view.states)
        self._show_status()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_typed(self, event: Input.Changed) -> None:
        if self._filter_timer is not None:
            self._filter_timer.stop()
        value = event.value
        self._filter_timer = self.set_timer(0.15, lambda: self._set_text_filter(value))

    def _set_text_filter(self, value: str) -> None:
        self.view.text = value.strip().casefold()
        self._refilter()

    @on(Input.Submitted, "#filter")
    def _filter_done(self, event: Input.Submitted) -> None:
        self._set_text_filter(event.value)
        if not event.value.strip():
            event.input.display = False
        self.table.focus()

    def action_clear(self) -> None:
        box = self.query_one("#filter", Input)
        if box.has_focus:
            self.table.focus()
            if not box.value:
                box.display = False
            return
        if self.screen.maximized is not None:
            self.screen.minimize()
            return
        self.table.clear_marks()
        box.value = ""
        box.display = False
        self.view.states = frozenset()
        self.view.text = ""
        self._refilter()

    def action_tab(self, step: int) -> None:
        self.query_one(DetailPane).step_tab(step)

    def action_zoom(self) -> None:
        if self.maximized is not None:
            self.minimize()
        else:
            self.maximize(self.query_one(DetailPane), container=False)

    def action_help(self) -> None:
        from tui.screens.help import HelpScreen

        bindings = [b for b in self.BINDINGS if isinstance(b, Binding) and not b.id.startswith("state-")]
        marks = [b for b in JobTable.BINDINGS if isinstance(b, Binding) and b.id == "mark"]
        extra = [
            Binding(
                "1-9,0", "", "Show only one state (press again to undo; several combine)", key_display="1…0"
            ),
            Binding("up,down", "", "Move; pageup/pagedown, home/end jump", key_display="↑ ↓"),
            Binding("ctrl+p", "", "Command palette: every action by name", key_display="ctrl+p"),
        ]
        self.app.push_screen(HelpScreen([*bindings, *marks, *extra], self.readonly))

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
        table = self.table
        if table.marks:
            rows = [self.view.rows[k] for k in sorted(table.marks) if k in self.view.rows]
            ok = [r.key for r in rows if allowed(action, r.state)]
            if not ok:
                self._say(
                    f"none of the {len(rows)} marked jobs allows {verb}: it is for {_states_for(action)}",
                    severity="warning",
                )
                return None
            return ok, len(rows) - len(ok)
        key = table.cursor_key
        if key is None or key not in self.view.rows:
            self._say("no job selected", severity="warning")
            return None
        state = self.view.rows[key].state
        if not allowed(action, state):
            self._say(
                f"{key[:12]}: is {state.value}; {verb} is for {_states_for(action)}", severity="warning"
            )
            return None
        return [key], 0

    def action_job(self, action: str) -> None:
        got = self._targets(action)
        if got is not None:
            keys, skipped = got
            self.query_one(Dispatcher).dispatch(action, keys, bool(self.table.marks), skipped)

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
        self.table.clear_marks()

    @on(Say)
    def _said(self, message: Say) -> None:
        self._say(message.text, message.title, message.severity)

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
        self.notify(visible(message, keep_newlines=True), title=title, severity=severity, markup=False)
