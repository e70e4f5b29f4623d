"""What the board reads from `.gen/`, delivered as typed messages.

`BoardFeed` is a widget that shows nothing: it keeps up with the disk for the board's
read-model (`core.read.board_view`). A full scan lists the state folders (names only:
`NamesListed`; the first scan those of unfinished jobs before the finished ones), reads
the operator's jobs (in running/, with a receipt or candidates), or every job of a small
queue (`READ_WHOLE`), and, once the first rows are painted, stats the queue's files for
its order (`StampsRead`); it runs at start, after a watch failure and now and then as a
fallback for filesystems that deliver no events (NFS). Other jobs are read when their
rows come into view (`want`, with their attempts files) or a text filter searches them
(`search`). A watch worker turns `watchfiles` events into job keys, and only those are
read again; the jobs whose state changes with time alone are re-derived on a tick.
Receipts are verified for the list's ✔/✘ and a job's detail is read in thread workers.
Every result is a message that bubbles to the screen; no worker touches a widget, and
the event loop reads no file. What verifies and judges receipts (pydantic, the config
model, cryptography) is imported once the board's first frame is drawn.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from textual import work
from textual.widget import Widget
from textual.worker import get_current_worker

from core.errors import GenjobError
from core.model.contract import KEY_RE
from core.model.lifecycle import State
from core.read.board_view import BoardView, board_listing, row_matches
from core.read.snapshot import JobRow, policy_stamps, read_policy, refresh
from core.remote.rules import cut_lines
from core.store.layout import Layout
from tui.messages import (
    ChecksConfigured,
    ChecksFound,
    DetailLoaded,
    FeedStatus,
    NamesListed,
    PolicyRead,
    RowsChanged,
    SearchFound,
    StampsRead,
    Trouble,
    VerdictsFound,
)
from tui.services.heap import release_free_memory

if TYPE_CHECKING:
    from watchfiles import Change

    from core.read.inspect_job import JobDetail
    from core.store.config import Config

# The folders of `.gen/` watched alone, and those whose entries are folders (watched recursively).
FLAT_FOLDERS = ("queue", "running", "receipts", "attempts", "trusted_keys", "logs", "fleet")
# The folders jobs end in, watched alone once the first rows are painted: a watch set up
# reads its whole folder (most of a million names), and a job that ends there leaves a
# folder watched from the start.
FINAL_FOLDERS = ("applied", "rejected")
NESTED_FOLDERS = ("candidates", "checks")
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
# The operator's jobs read per step of a full scan, and documents per step of a search.
SCAN_BATCH = 512
# A queue of at most this many jobs is read whole on each full scan (a few ms a hundred):
# its counts are exact, not the names' guess, and no row waits to be scrolled to.
READ_WHOLE = 2000
# A search reports what it found at most this often (s), and when it ends.
SEARCH_REPORT_SECONDS = 0.25
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


def keys_from_paths(layout: Layout, paths: Iterable[str | Path]) -> set[str]:
    """The job keys that changed files under `.gen/` belong to."""
    keys = set()
    gen, candidates = str(layout.gen) + os.sep, str(layout.candidates) + os.sep
    for p in map(str, paths):
        if p.startswith(candidates):  # .gen/candidates/<key>/<n>/...: the key is the first part
            keys.add(p[len(candidates) :].split(os.sep, 1)[0])
        elif p.startswith(gen):
            keys.add(os.path.basename(p).split(".", 1)[0])
    return {key for key in keys if KEY_RE.fullmatch(key)}


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
        # The board's read-model, read (on the event loop) for the keys to tick and those shown.
        self.view = view
        self._pending: set[str] = set()  # named by events, or by the board's own changes
        self._wanted: set[str] = set()  # in view and not read in full: read with their attempts
        self._window: list[str] = []  # the jobs in view
        self._policy_stamps: list[int] = []  # of the files the policy shown was read from
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
        self._watch(FLAT_FOLDERS, top=True)
        self._watch(NESTED_FOLDERS, recursive=True)

    def rows_shown(self) -> None:
        """The board has painted rows: the verdicts and the config may be read now."""
        if self._rows_shown.is_set():
            return
        self._rows_shown.set()
        self._watch(FINAL_FOLDERS)
        if self._judge_later:
            self._verdicts(self._judge_later)
            self._judge_later = []

    def refresh_keys(self, keys: Iterable[str]) -> None:
        """Re-derive `keys` now (after the board's own change) without waiting for the event."""
        self._pending.update(keys)
        self._wake.set()

    def want(self, keys: Iterable[str], window: Iterable[str] = ()) -> None:
        """Read these jobs in full, attempts included: their rows are in view (`window`:
        all those in view, whose queued jobs are read again on each tick)."""
        self._window = list(window)
        new = set(keys) - self._wanted
        if new:
            self._wanted |= new
            self._wake.set()

    # -- following the disk ------------------------------------------------------------------
    @work(group="watch", exit_on_error=False)
    async def _watch(self, names: tuple[str, ...], *, recursive: bool = False, top: bool = False) -> None:
        """Feed the keys that file events name to `_process`, forever: the folders `names`
        of `.gen/`, each watched alone (a recursive watch walks every file, seconds at a
        million jobs, holding the GIL) or, for folders of folders, `recursive`ly; with `top`,
        `.gen/` itself too, and a folder of `names` made since is watched from then on."""
        from watchfiles import awatch  # here, not before the first frame

        gen = self.repo.gen
        while True:
            watched = [gen / name for name in names if (gen / name).is_dir()]
            if not top and not watched:
                await asyncio.sleep(5.0)  # none made yet
                continue
            try:
                self._status(watching="watching")
                async for changes in awatch(
                    *([gen] if top else []),
                    *watched,
                    watch_filter=_watch_filter,
                    debounce=DEBOUNCE_MS,
                    step=STEP_MS,
                    recursive=recursive,
                    ignore_permission_denied=True,
                ):
                    paths = [p for _, p in changes]
                    self._heard(paths)
                    made = {gen / name for name in names} & set(map(Path, paths))
                    if top and not made.issubset(watched):
                        break  # a folder made since: watch it too
            except Exception as exc:
                self._status(watching="polling")
                self.post_message(Trouble(f"watching .gen/ failed ({exc}); rescanning, retrying in 5s"))
                self._pending.add("*")
                self._wake.set()
                await asyncio.sleep(5.0)

    def _heard(self, paths: list[str]) -> None:
        """What changed paths mean: keys to read again, receipts to judge, or a full scan."""
        if str(self.repo.config) in paths or any(
            os.path.dirname(p) == str(self.repo.trusted_keys) for p in paths
        ):
            self._pending.add("*")
        self._pending.update(keys_from_paths(self.repo, paths))
        self._wake.set()
        judged = [k for k in check_keys(self.repo, paths) if k in self.view.rows]
        if judged:
            self.judge(judged)

    @work(exclusive=True, group="process", exit_on_error=False)
    async def _process(self) -> None:
        """The only reader of job files: a full scan, then the keys named since."""
        started = time.monotonic()
        await self._full_scan()
        every = max(FULL_SCAN_SECONDS, FULL_SCAN_SHARE * (time.monotonic() - started))
        last_full = last_tick = time.monotonic()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), TICK_SECONDS)
            self._wake.clear()
            keys, self._pending = self._pending, set()
            now = time.monotonic()
            if "*" in keys or now - last_full > every:
                await self._full_scan()
                every = max(FULL_SCAN_SECONDS, FULL_SCAN_SHARE * (time.monotonic() - now))
                last_full = last_tick = time.monotonic()
                continue
            if now - last_tick >= TICK_SECONDS:
                # A queued job in view goes STALE when its inputs move, with no event in .gen/.
                where = self.view.where
                keys |= self.view.tracked | {k for k in self._window if where.get(k) is State.QUEUED}
                last_tick = now
                if await asyncio.to_thread(policy_stamps, self.repo) != self._policy_stamps:
                    await self._read_policy()
            # Named keys are read in full too: a row read without its attempts would be read
            # again the moment it comes into view (new jobs, at the top, do at once).
            keys |= self._wanted
            self._wanted = set()
            try:
                if len(keys) <= INLINE_REFRESH:
                    changed = refresh(self.repo, keys, attempts=True)
                else:
                    changed = await asyncio.to_thread(refresh, self.repo, keys, attempts=True)
            except Exception as exc:
                self.post_message(Trouble(f"reading .gen/ failed: {exc}", "error"))
                continue
            self._emit(changed)

    async def _read_policy(self) -> None:
        """Post the policy the board is shown under, and keep the stamps of its files: the
        operator's config and pins live outside `.gen/`, where no file event comes from, so
        each tick looks at them (`genjob allow` in another terminal shows within a tick)."""
        self._policy_stamps = await asyncio.to_thread(policy_stamps, self.repo)
        policy, _ = await asyncio.to_thread(read_policy, self.repo)
        trusted = await asyncio.to_thread(self._count_trusted)
        signature, fault, _, held, protected = policy
        self.post_message(PolicyRead(signature, fault, trusted, held, protected))

    async def _full_scan(self) -> None:
        self._status(scanning=True)
        gen = str(self.repo.gen)
        first = not self._rows_shown.is_set()
        try:
            if first:
                # The first rows come from the folders of the jobs that need the operator;
                # the finished jobs' (most of a large .gen/) are listed after.
                early = await asyncio.to_thread(board_listing, gen, finished=False)
                self.post_message(NamesListed(early))
                await self._read(early.operators)
            listing = await asyncio.to_thread(board_listing, gen)
            self.post_message(NamesListed(listing))
            if not first:
                await self._read(listing.operators)
            if len(listing.where) <= READ_WHOLE:
                await self._read(list(listing.where.keys() - set(listing.operators)), attempts=True)
            if not self._rows_shown.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._rows_shown.wait(), FIRST_PAINT_WAIT)
                self.rows_shown()  # as if they were, when the board never says so
            if listing.groups[State.QUEUED]:
                from core.store.queue import queue_stamps  # here: it loads the job model (pydantic)

                self.post_message(StampsRead(await asyncio.to_thread(queue_stamps, self.repo)))
            await self._read_policy()
            await self._read_checks()
            # What the listing built and dropped, handed back to the system.
            await asyncio.to_thread(release_free_memory)
        except Exception as exc:
            self.post_message(Trouble(f"scanning .gen/ failed: {exc}", "error"))
        self._status(scanning=False)

    async def _read(self, keys: list[str], *, attempts: bool = False) -> None:
        """Read `keys` in batches, each in a thread, and post the rows."""
        for start in range(0, len(keys), SCAN_BATCH):
            batch = keys[start : start + SCAN_BATCH]
            self._emit(await asyncio.to_thread(refresh, self.repo, batch, attempts=attempts))

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

    # -- a text filter ------------------------------------------------------------------------
    def search(self, needle: str, keys: list[str]) -> None:
        """Read the documents of `keys` for the jobs a text filter matches, reporting as it goes."""
        self._search(needle, keys)

    @work(thread=True, exclusive=True, group="search", exit_on_error=False)
    def _search(self, needle: str, keys: list[str]) -> None:
        worker = get_current_worker()
        found: list[JobRow] = []
        reported = time.monotonic()
        for start in range(0, len(keys), SCAN_BATCH):
            if worker.is_cancelled:
                return
            rows = refresh(self.repo, keys[start : start + SCAN_BATCH]).values()
            found += [row for row in rows if row is not None and row_matches(row, needle)]
            done = min(start + SCAN_BATCH, len(keys))
            if done == len(keys) or time.monotonic() - reported > SEARCH_REPORT_SECONDS:
                self.post_message(SearchFound(needle, found, done, len(keys)))
                found, reported = [], time.monotonic()
        if not keys:
            self.post_message(SearchFound(needle, [], 0, 0))

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
