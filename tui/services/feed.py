"""What the board reads from `.gen/`, delivered as typed messages.

`BoardFeed` is a widget that shows nothing: it owns the `Scanner` and keeps up with the
disk. A watch worker turns `watchfiles` events into job keys; a process worker re-derives
just those with `Scanner.refresh`, runs a full scan at start, after a watch failure and
now and then as a fallback for filesystems that deliver no events (NFS), and re-derives
the jobs whose state changes with time alone. Receipts are verified for the list's ✔/✘
and a job's detail is read in thread workers. Every result is a message that bubbles to
the screen; no worker touches a widget. What verifies and judges receipts (pydantic, the
config model, cryptography) is imported by those workers when they first run, after the
board's first frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from textual import work
from textual.widget import Widget

from core.errors import GenjobError
from core.model.contract import KEY_RE
from core.model.lifecycle import State
from core.read.board_view import BoardView
from core.read.snapshot import JobRow, Scanner, keys_from_paths
from core.remote.rules import cut_lines
from core.store.layout import Layout
from tui.messages import (
    ChecksConfigured,
    ChecksFound,
    DetailLoaded,
    FeedStatus,
    PolicyRead,
    RowsChanged,
    Trouble,
    VerdictsFound,
)
from tui.services.heap import release_free_memory

if TYPE_CHECKING:
    from watchfiles import Change

    from core.read.inspect_job import JobDetail
    from core.store.config import Config

# Watch events are gathered this long (ms) before the board re-derives the keys they name.
DEBOUNCE_MS = 120
STEP_MS = 15
# How often (s) time-sensitive jobs are re-derived without an event: a lease expires and
# the tree changes with no event under `.gen/`.
TICK_SECONDS = 2.0
# A full scan now and then catches what no event reported (other NFS clients' writes):
# every minute, or every FULL_SCAN_SHARE times as long as the last one took, if longer.
FULL_SCAN_SECONDS = 60.0
FULL_SCAN_SHARE = 30.0
# States that change with time alone: a lease expires, a holder dies, the tree moves on.
TIME_SENSITIVE = (State.RUNNING, State.RECEIVED, State.STALE, State.ORPHANED)
# Up to this many keys are re-derived on the event loop itself (a few ms, no thread hop
# for the GIL to bounce across); more go to a thread.
INLINE_REFRESH = 48
# Rows read per step of a full scan: small, so that the first ones show at once.
SCAN_BATCH = 512
# The longest the config waits for the board's first rows to be painted (`rows_shown`).
FIRST_PAINT_WAIT = 2.0
# Receipts verified per message while a scan finds many.
VERDICT_BATCH = 64
# The longest line of a job's generator log the detail shows (the log is the host's to
# write: one line can be its whole tail); longer ones are cut there, marked.
LOG_LINE_CHARS = 2000


def _watch_filter(change: Change, path: str) -> bool:
    """Events worth a look: job files, leases, receipts, attempts, check records, config;
    not temp or cache files, nor the scratch trees checks run in (thousands of links each)."""
    name = os.path.basename(path)
    return (
        not name.startswith(".tmp-")
        and f"{os.sep}cache{os.sep}" not in path
        and f"{os.sep}scratch{os.sep}" not in path
        and not path.endswith(f"{os.sep}scratch")
    )


def check_keys(layout: Layout, paths: Iterable[str]) -> set[str]:
    """The jobs whose check records (or runs under way) these changed paths belong to."""
    base = str(layout.checks) + os.sep
    keys = set()
    for path in paths:
        if path.startswith(base):
            key = path[len(base) :].split(os.sep, 1)[0]
            if KEY_RE.fullmatch(key):
                keys.add(key)
    return keys


class BoardFeed(Widget):
    """Reads `.gen/` for one board and posts what it finds; it renders nothing."""

    DEFAULT_CSS = "BoardFeed { display: none; }"

    def __init__(self, layout: Layout, view: BoardView, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.repo = layout
        # The board's read-model, read (on the event loop) for the keys to tick and to drop.
        self.view = view
        self._pending: set[str] = set()
        self._wake = asyncio.Event()
        self._judged: dict[str, JobRow] = {}  # the received rows whose verdict was asked for
        self._scanning = True
        self._watching = "starting"
        # Set once the board has painted the first rows: until then nothing that imports the
        # config model or verifies receipts runs, since those imports (pydantic) hold the GIL
        # for about a tenth of a second and would hold back that first paint.
        self._rows_shown = asyncio.Event()
        self._judge_later: list[str] = []

    def _status(self, scanning: bool | None = None, watching: str | None = None) -> None:
        self._scanning = self._scanning if scanning is None else scanning
        self._watching = watching or self._watching
        self.post_message(FeedStatus(self._scanning, self._watching))

    def on_mount(self) -> None:
        self._process()
        self._watch()

    def rows_shown(self) -> None:
        """The board has painted rows: the verdicts and the config may be read now."""
        if self._rows_shown.is_set():
            return
        self._rows_shown.set()
        if self._judge_later:
            self._verdicts(self._judge_later)
            self._judge_later = []

    def refresh_keys(self, keys: Iterable[str]) -> None:
        """Re-derive `keys` now (after the board's own change) without waiting for the event."""
        self._pending.update(keys)
        self._wake.set()

    # -- following the disk ------------------------------------------------------------------
    @work(exclusive=True, group="watch", exit_on_error=False)
    async def _watch(self) -> None:
        """Feed the keys that file events name to `_process`, forever."""
        from watchfiles import awatch  # here, not before the first frame

        while True:
            try:
                self._status(watching="watching")
                async for changes in awatch(
                    self.repo.gen,
                    watch_filter=_watch_filter,
                    debounce=DEBOUNCE_MS,
                    step=STEP_MS,
                    ignore_permission_denied=True,
                ):
                    paths = [p for _, p in changes]
                    if str(self.repo.config) in paths or any(
                        os.path.dirname(p) == str(self.repo.trusted_keys) for p in paths
                    ):
                        self._pending.add("*")
                    self._pending.update(keys_from_paths(self.repo, paths))
                    self._wake.set()
                    judged = [k for k in check_keys(self.repo, paths) if k in self.view.rows]
                    if judged:
                        self.judge(judged)
            except Exception as exc:
                self._status(watching="polling")
                self.post_message(Trouble(f"watching .gen/ failed ({exc}); rescanning, retrying in 5s"))
                self._pending.add("*")
                self._wake.set()
                await asyncio.sleep(5.0)

    @work(exclusive=True, group="process", exit_on_error=False)
    async def _process(self) -> None:
        """The only user of the scanner: a full scan, then incremental refreshes."""
        started = time.monotonic()
        scanner = Scanner(self.repo)  # the index loads with the first batch, off the loop
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
                    self.post_message(Trouble(f"reading .gen/ failed: {exc}", "error"))
                    continue
                self._emit(changed)

    async def _full_scan(self, scanner: Scanner) -> None:
        self._status(scanning=True)
        batches = scanner.scan_batches(SCAN_BATCH)
        gathered: dict[str, JobRow] = {}
        shown_at = 0.0
        any_rows = False
        try:
            while (batch := await asyncio.to_thread(next, batches, None)) is not None:
                any_rows = any_rows or bool(batch)
                gathered.update(batch)
                if time.monotonic() - shown_at > 0.3:
                    self._emit(gathered)
                    gathered = {}
                    shown_at = time.monotonic()
            self._emit(gathered)
            gone = [k for k in self.view.rows if not scanner.found(k)]
            if gone:
                self._emit(dict.fromkeys(gone))
            trusted = await asyncio.to_thread(self._count_trusted)
            policy = (scanner.signature_required, scanner.config_error, trusted, scanner.config_held)
            self.post_message(PolicyRead(*policy, scanner.protected_paths))
            if any_rows and not self._rows_shown.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._rows_shown.wait(), FIRST_PAINT_WAIT)
                self.rows_shown()  # as if they were, when the board never says so
            await self._read_checks()
            await asyncio.to_thread(scanner.save_cache)
            await asyncio.to_thread(release_free_memory)
            # The rows live as long as the board: keep the cyclic GC from walking them
            # again and again (a pause that grows with the number of jobs).
            gc.collect()
            gc.freeze()
        except Exception as exc:
            self.post_message(Trouble(f"scanning .gen/ failed: {exc}", "error"))
        self._status(scanning=False)

    async def _read_checks(self) -> None:
        from core.store.config import load_config

        try:
            config = await asyncio.to_thread(load_config, self.repo.config)
        except GenjobError:
            return  # the status line says what is wrong with the config
        checks = config.checks
        self.post_message(
            ChecksConfigured(
                tuple(checks),
                tuple(n for n, c in checks.items() if c.sandbox == "none"),
                config.check_runs.on_receipt,
                config.check_runs.concurrency,
            )
        )

    def _count_trusted(self) -> int:
        """The pinned keys that count (the detail pane verifies each signature properly)."""
        from core.store.signing import trust_anchors

        try:
            return len(trust_anchors(self.repo.trusted_keys, self.repo.root).keys)
        except (OSError, GenjobError):
            return 0

    def _emit(self, changed: Mapping[str, JobRow | None]) -> None:
        if not changed:
            return
        self.post_message(RowsChanged(changed))
        judge = []
        for key, row in changed.items():
            if row is not None and row.state is State.RECEIVED:
                if self._judged.get(key) != row:
                    self._judged[key] = row
                    judge.append(key)
            else:
                self._judged.pop(key, None)
        if judge and not self._rows_shown.is_set():
            self._judge_later.extend(judge)
        elif judge:
            self._verdicts(judge)

    def judge(self, keys: Iterable[str]) -> None:
        """Verify these jobs' receipts and judge their checks again (a check ended, say)."""
        self._verdicts(list(keys))

    @work(thread=True, group="verdicts", exit_on_error=False)
    def _verdicts(self, keys: list[str]) -> None:
        """Verify received jobs' receipts for the list's ✔/✘ and judge their checks (hashing
        happens here, off the loop)."""
        from core.read.preflight import receipt_verdict
        from core.review.check_status import receipt_standing
        from core.store.config import load_config

        try:
            config: Config | None = load_config(self.repo.config)
        except GenjobError:
            config = None
        for start in range(0, len(keys), VERDICT_BATCH):
            batch = keys[start : start + VERDICT_BATCH]
            if config is None or not config.checks:
                self.post_message(VerdictsFound({k: receipt_verdict(self.repo, k) for k in batch}))
                continue
            standings = {k: receipt_standing(self.repo, k, config) for k in batch}
            self.post_message(VerdictsFound({k: s.verdict for k, s in standings.items()}))
            self.post_message(ChecksFound(standings))

    # -- one job ----------------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="detail", exit_on_error=False)
    def load_detail(self, key: str) -> None:
        """Read, verify and diff one job; the answer is a `DetailLoaded`."""
        from core.read.inspect_job import job_detail

        try:
            found = job_detail(self.repo, key)
            found.log_tail = cut_lines(found.log_tail, LOG_LINE_CHARS)
            detail: JobDetail | str = found
        except GenjobError as exc:
            detail = str(exc)
        except Exception as exc:
            detail = f"{key}: cannot read ({exc})"
        self.post_message(DetailLoaded(key, detail))
