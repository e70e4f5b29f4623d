"""The board: counts, the job list and the selected job's detail, live from `.gen/`.

Files are the source of truth. A watch worker turns `watchfiles` events into job keys and
re-derives just those with `Scanner.refresh`; a full scan runs at start, after a watch
failure and now and then as a fallback for filesystems that deliver no events (NFS).
Every key is one core call in a thread worker; its outcome comes back as a notification
with core's own message, and the watcher shows what changed on disk. Dialogs are imported
when first opened, so that the board's first frame does not wait for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Input, Static
from watchfiles import Change, awatch

from core.apply import apply_job
from core.board import BoardView, preflight, receipt_verdict
from core.config import load_config
from core.errors import GenjobError
from core.events import actor
from core.inspect_job import JobDetail, job_detail
from core.layout import Layout
from core.lifecycle import ACTIONS, STATE_ORDER, State, allowed
from core.queue import Enqueued, claim, reject, request_cancel, requeue
from core.replay import replay
from core.snapshot import JobRow, Scanner, keys_from_paths
from core.terminal import visible
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.reason import ReasonDialog
from tui.heap import release_free_memory
from tui.render import policy_text
from tui.widgets.counts import DIGITS, CountsBar
from tui.widgets.detail import DetailPane
from tui.widgets.job_table import JobTable

# Watch events are gathered this long (ms) before the board re-derives the keys they name.
DEBOUNCE_MS = 120
STEP_MS = 15
# How often (s) running and received jobs are re-derived without an event: a lease expires
# and the tree changes with no event under `.gen/`.
TICK_SECONDS = 2.0
# A full scan now and then catches what no event reported (other NFS clients' writes):
# every minute, or every FULL_SCAN_SHARE times as long as the last one took, if longer.
FULL_SCAN_SECONDS = 60.0
FULL_SCAN_SHARE = 30.0
DETAIL_DEBOUNCE = 0.12
# States that change with time alone: a lease expires, a holder dies, the tree moves on.
TIME_SENSITIVE = (State.RUNNING, State.RECEIVED, State.STALE, State.ORPHANED)
# Up to this many keys are re-derived on the event loop itself (a few ms, no thread hop
# for the GIL to bounce across); more go to a thread.
INLINE_REFRESH = 48
# Rows read per step of a full scan: small, so that the first ones show at once.
SCAN_BATCH = 512
NARROW = 140

VERBS = {
    "claim": "claim",
    "ship": "ship",
    "apply": "approve",
    "reject": "reject",
    "requeue": "requeue",
    "replay": "replay",
    "cancel": "cancel",
}


def _states_for(action: str) -> str:
    return ", ".join(s.value for s in STATE_ORDER if s in ACTIONS[action])


def _watch_filter(change: Change, path: str) -> bool:
    """Events worth a look: job files, leases, receipts, attempts, config; not temp or cache files."""
    name = os.path.basename(path)
    return not name.startswith(".tmp-") and f"{os.sep}cache{os.sep}" not in path


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
        self.scanning = True
        self.watching = "starting"
        self._pending: set[str] = set()
        self._wake = asyncio.Event()
        self._detail_timer: Timer | None = None
        self._filter_timer: Timer | None = None
        self._select_when_seen: str | None = None
        self.worker_id = f"board:{actor()}"

    # -- layout ----------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="status")
        yield CountsBar(id="counts")
        yield Input(placeholder="filter: key prefix, words of the instruction, worker, path", id="filter")
        with Horizontal(id="main"):
            yield JobTable(self.view, id="jobs")
            yield DetailPane(id="detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self.query_one(JobTable).focus()
        self._show_status()
        self._process()
        self._watch()
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

    # -- keeping up with the disk ------------------------------------------------------------
    @work(exclusive=True, group="watch", exit_on_error=False)
    async def _watch(self) -> None:
        """Feed the keys that file events name to `_process`, forever."""
        while True:
            try:
                self.watching = "watching"
                self._show_status()
                async for changes in awatch(
                    self.repo.gen,
                    watch_filter=_watch_filter,
                    debounce=DEBOUNCE_MS,
                    step=STEP_MS,
                    ignore_permission_denied=True,
                ):
                    paths = [p for _, p in changes]
                    if str(self.repo.config) in paths:
                        self._pending.add("*")
                    self._pending.update(keys_from_paths(self.repo, paths))
                    self._wake.set()
            except Exception as exc:
                self.watching = "polling"
                self._say(
                    f"watching .gen/ failed ({exc}); rescanning, retrying in 5s",
                    severity="warning",
                )
                self._pending.add("*")
                self._wake.set()
                await asyncio.sleep(5.0)

    @work(exclusive=True, group="process", exit_on_error=False)
    async def _process(self) -> None:
        """The only user of the scanner: a full scan, then incremental refreshes."""
        started = time.monotonic()
        scanner = await asyncio.to_thread(Scanner, self.repo)  # loads the index: off the loop
        await self._full_scan(scanner)
        every = max(FULL_SCAN_SECONDS, FULL_SCAN_SHARE * (time.monotonic() - started))
        last_full = last_tick = time.monotonic()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_SECONDS)
            self._wake.clear()
            keys, self._pending = self._pending, set()
            now = time.monotonic()
            if "*" in keys or now - last_full > every:
                await self._full_scan(scanner)
                took = time.monotonic() - now
                every = max(FULL_SCAN_SECONDS, FULL_SCAN_SHARE * took)
                last_full = last_tick = time.monotonic()
                continue
            if now - last_tick >= TICK_SECONDS:
                keys |= self.view.tracked
                last_tick = now
            if keys:
                try:
                    if len(keys) <= INLINE_REFRESH:
                        changed = scanner.refresh(keys)
                    else:
                        changed = await asyncio.to_thread(scanner.refresh, keys)
                except Exception as exc:
                    self._say(f"reading .gen/ failed: {exc}", severity="error")
                    continue
                self._apply(changed)

    async def _full_scan(self, scanner: Scanner) -> None:
        self.scanning = True
        self._show_status()
        batches = scanner.scan_batches(SCAN_BATCH)
        gathered: dict[str, JobRow] = {}
        shown_at = 0.0
        try:
            while (batch := await asyncio.to_thread(next, batches, None)) is not None:
                gathered.update(batch)
                if time.monotonic() - shown_at > 0.3:
                    self._apply(gathered)
                    gathered = {}
                    shown_at = time.monotonic()
            self._apply(gathered)
            gone = [k for k in self.view.rows if not scanner.found(k)]
            if gone:
                self._apply(dict.fromkeys(gone))
            self.signature_required, self.config_error = scanner.signature_required, scanner.config_error
            self.query_one(DetailPane).signature_required = self.signature_required
            await asyncio.to_thread(scanner.save_cache)
            await asyncio.to_thread(release_free_memory)
            # The rows live as long as the board: keep the cyclic GC from walking them
            # again and again (a pause that grows with the number of jobs).
            gc.collect()
            gc.freeze()
        except Exception as exc:
            self._say(f"scanning .gen/ failed: {exc}", severity="error")
        self.scanning = False
        self._show_status()

    def _apply(self, changed: Mapping[str, JobRow | None]) -> None:
        if not changed:
            return
        table = self.table
        selected = table.cursor_key
        reload = (
            selected is not None and selected in changed and changed[selected] != self.view.rows.get(selected)
        )
        received = [
            k
            for k, r in changed.items()
            if r is not None
            and r.state is State.RECEIVED
            and (r != self.view.rows.get(k) or k not in table.verdicts)
        ]
        table.apply(changed)
        if received:
            self._verdicts(received)
        self.query_one(CountsBar).set_counts(self.view.counts, self.view.states)
        wanted = self._select_when_seen
        if wanted and wanted in changed and table.select(wanted):
            self._select_when_seen = None
        if reload:
            self._schedule_detail()
        self._show_status()

    @work(thread=True, group="verdicts", exit_on_error=False)
    def _verdicts(self, keys: list[str]) -> None:
        """Verify received jobs' receipts for the list's ✔/✘ (hashing happens here, off the loop)."""
        for start in range(0, len(keys), 64):
            found = {k: receipt_verdict(self.repo, k) for k in keys[start : start + 64]}
            self.app.call_from_thread(self.table.set_verdicts, found)

    def request_refresh(self, keys: Iterable[str]) -> None:
        """Re-derive `keys` now (after our own change) without waiting for the event."""
        self._pending.update(keys)
        self._wake.set()

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
        self._load_detail(key)

    @work(thread=True, exclusive=True, group="detail", exit_on_error=False)
    def _load_detail(self, key: str) -> None:
        try:
            detail: JobDetail | str = job_detail(self.repo, key)
        except GenjobError as exc:
            detail = str(exc)
        except Exception as exc:
            detail = f"{key}: cannot read ({exc})"
        self.app.call_from_thread(self._detail_loaded, key, detail)

    def _detail_loaded(self, key: str, detail: JobDetail | str) -> None:
        if key != self.table.cursor_key:
            return
        pane = self.query_one(DetailPane)
        if isinstance(detail, str):
            pane.show_message(Text(visible(detail), style="bold red"))
        else:
            pane.show(detail)

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
        verb = VERBS[action]
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
        if got is None:
            return
        keys, skipped = got
        bulk = bool(self.table.marks)
        handler = getattr(self, f"_do_{action}")
        if not bulk:
            handler(keys)
            return
        verb = VERBS[action]
        body = Text(f"{verb} {len(keys)} marked job(s)?\n", style="bold")
        if skipped:
            body.append(f"{skipped} other marked job(s) are skipped: {verb} is for {_states_for(action)}\n")
        for key in keys[:12]:
            body.append(f"  {key}  {self.view.rows[key].state.value}\n", style="dim")
        if len(keys) > 12:
            body.append(f"  … and {len(keys) - 12} more\n", style="dim")

        def go(yes: bool | None) -> None:
            if yes:
                handler(keys)

        self.app.push_screen(ConfirmDialog(f"Bulk {verb}", body, yes=verb.capitalize(), danger=True), go)

    def _do_claim(self, keys: list[str]) -> None:
        @functools.cache
        def ttl() -> float:  # read in the action's thread, once for all its keys
            return self._policy_ttl()

        def one(key: str) -> str:
            c = claim(self.repo, self.worker_id, key, ttl(), pid=os.getpid())
            return f"claimed {key[:12]} (attempt {c.lease.token}, lease held by this board, ttl {ttl():g}s)"

        self._run("claim", keys, one)

    def _policy_ttl(self) -> float:
        try:
            return load_config(self.repo.config).policy.lease_ttl
        except GenjobError:
            return 120.0

    def _do_reject(self, keys: list[str]) -> None:
        body = Text(f"Reject {len(keys)} job(s)? " if len(keys) > 1 else f"Reject {keys[0]}? ")
        body.append("The receipt and outputs stay as evidence.", style="dim")

        def go(reason: str | None) -> None:
            if reason:
                self._run("reject", keys, lambda k: f"rejected {k[:12]}: {reject(self.repo, k, reason).name}")

        self.app.push_screen(ReasonDialog("Reject", body), go)

    def _do_requeue(self, keys: list[str]) -> None:
        def one(key: str) -> str:
            requeue(self.repo, key)
            return f"requeued {key[:12]}"

        body = Text(f"Put {keys[0]} back in the queue?\n", style="bold")
        body.append("Its worker is gone; the attempt is recorded and the job will run again.")
        self._confirm_one("requeue", keys, one, ConfirmDialog("Requeue", body, yes="Requeue"))

    def _do_replay(self, keys: list[str]) -> None:
        def one(key: str) -> str:
            res = replay(self.repo, key)
            if len(keys) == 1:
                self._select_when_seen = res.key
            return f"replayed {key[:12]} as {res.key[:12]}" + ("" if res.created else " (existed already)")

        self._run("replay", keys, one)

    def _do_cancel(self, keys: list[str]) -> None:
        def one(key: str) -> str:
            request_cancel(self.repo, key)
            return f"cancel requested for {key[:12]}: its worker ends it with an aborted receipt"

        body = Text(f"Cancel the running job {keys[0]}?\n", style="bold")
        body.append("The worker stops the generator and writes an aborted receipt.")
        self._confirm_one(
            "cancel", keys, one, ConfirmDialog("Cancel job", body, yes="Cancel job", danger=True)
        )

    def _confirm_one(
        self, action: str, keys: list[str], one: Callable[[str], str], dialog: ConfirmDialog
    ) -> None:
        """A single job asks with `dialog` first; a bulk action was confirmed with its count already."""
        if len(keys) > 1:
            self._run(action, keys, one)
            return
        self.app.push_screen(dialog, lambda yes: yes and self._run(action, keys, one))

    def _do_apply(self, keys: list[str]) -> None:
        def one(key: str) -> str:
            res = apply_job(self.repo, key)
            if res.already:
                return f"{key[:12]}: applied already"
            return f"applied {key[:12]}: {len(res.changed)} file(s) changed"

        if len(keys) > 1:
            self._run("apply", keys, one)
            return
        self._preflight(keys[0], one)

    @work(thread=True, group="actions", exit_on_error=False)
    def _preflight(self, key: str, one: Callable[[str], str]) -> None:
        from tui.dialogs.preflight import PreflightDialog

        try:
            p = preflight(job_detail(self.repo, key))
        except GenjobError as exc:
            self.app.call_from_thread(self._say, str(exc), severity="error")
            return

        def go(yes: bool | None) -> None:
            if yes:
                self._run("apply", [key], one)

        self.app.call_from_thread(self.app.push_screen, PreflightDialog(p), go)

    def _do_ship(self, keys: list[str]) -> None:
        if len(keys) > 1:
            self._say("ship one job at a time: unmark all (escape) and select one", severity="warning")
            return
        self._pick_host(keys[0])

    @work(thread=True, group="actions", exit_on_error=False)
    def _pick_host(self, key: str) -> None:
        """Read the hosts (off the event loop), then ship `key`, asking which host if several."""
        from tui.dialogs.host_picker import HostPicker
        from tui.dialogs.ship import ShipDialog

        try:
            hosts = load_config(self.repo.config).hosts
        except GenjobError as exc:
            self.app.call_from_thread(self._say, str(exc), severity="error")
            return

        def go(host: str | None) -> None:
            if host:
                self.app.push_screen(
                    ShipDialog(self.repo, key, host, self.worker_id), lambda _: self.request_refresh([key])
                )

        if len(hosts) > 1:
            self.app.call_from_thread(self.app.push_screen, HostPicker(hosts), go)
        else:
            self.app.call_from_thread(go, next(iter(hosts), None) or "local")

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
            self.request_refresh([res.key])

        self.app.push_screen(NewJobDialog(self.repo), done)

    @work(thread=True, group="actions", exit_on_error=False)
    def _run(self, action: str, keys: list[str], one: Callable[[str], str]) -> None:
        """Run one core call per key, then report what happened and refresh those keys."""
        done: list[str] = []
        failed: list[str] = []
        for key in keys:
            try:
                done.append(one(key))
            except GenjobError as exc:
                failed.append(str(exc))
            except OSError as exc:
                failed.append(f"{key[:12]}: {exc}")
        self.app.call_from_thread(self._report, action, done, failed)
        self.app.call_from_thread(self.request_refresh, keys)
        if self.table.marks:
            self.app.call_from_thread(self.table.clear_marks)

    def _report(self, action: str, done: list[str], failed: list[str]) -> None:
        if len(done) + len(failed) == 1:
            if done:
                self._say(done[0], title=VERBS[action])
            else:
                self._say(failed[0], title=f"{VERBS[action]} failed", severity="error")
            return
        text = f"{len(done)} done, {len(failed)} failed" + (f"\n{failed[0]}" if failed else "")
        self._say(text, title=f"bulk {VERBS[action]}", severity="error" if failed else "information")

    def _say(self, message: str, title: str = "", severity: SeverityLevel = "information") -> None:
        """A notification showing `message` literally (it may quote a job's own text)."""
        self.notify(visible(message, keep_newlines=True), title=title, severity=severity, markup=False)
