"""`genjob worker`: a loop that claims queued jobs and ships them across hosts.

Each host runs at most its `concurrency` jobs at once over its one reused transport. A
job whose host or policy asks for `candidates` runs as that many candidates at once.
A stop (SIGTERM, Ctrl-C) ends the loop cleanly: nothing more is claimed, and jobs in
flight are stopped and end in `aborted` receipts, ready to replay.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from core.errors import GenjobError, NothingToClaim
from core.store.config import Config, load_config
from core.store.events import actor
from core.store.layout import Layout
from core.store.notify import Event
from core.store.queue import Claim, Claimer, Replayer
from core.work.ship import (
    Hosts,
    Shipment,
    ShipResult,
    refuse_over_budget,
    run_claimed,
    run_events,
    signing_key,
)
from core.work.ship_candidates import run_candidates
from core.work.spend import OverBudget, check_budget

Report = Callable[[str], None]
Notify = Callable[[Event], None]


# After a claim fails for another reason than an empty queue, the loop waits this long;
# and a host that could not start a run gets no claim for as long, so the job it gave
# back is not bounced straight to it again (`core.store.queue.MAX_HOST_FAILURES`).
CLAIM_RETRY = 5.0


def worker_spread(config: Config, name: str, names: Sequence[str]) -> list[str]:
    """Where the candidates of a job claimed for host `name` run: all on `name` when it
    sets its own `candidates`, else the policy's count over the worker's hosts, from `name`
    on; a single run on `name` when neither asks for more than one."""
    own = config.hosts[name].candidates
    if own:
        return [name] * own
    start = names.index(name)
    turn = [*names[start:], *names[:start]]
    return [turn[i % len(turn)] for i in range(config.policy.candidates)]


async def run_worker(
    layout: Layout,
    host_names: list[str] | None = None,
    *,
    once: bool = False,
    stop: asyncio.Event | None = None,
    report: Report = print,
    worker_id: str | None = None,
    poll: float = 0.5,
    replay: Replayer | None = None,
    notify: Notify | None = None,
) -> list[ShipResult]:
    """Claim and ship until `stop` is set (or, with `once`, until the queue is empty).

    `replay`: how a serialized job whose inputs moved is minted again before it is
    claimed (`core.store.queue.Claimer`); without it such a job is left queued.
    `notify`: told of each receipt the worker commits and each run a host failed."""
    config = load_config(layout.config)
    pool = Hosts(config)
    names = [pool.pick(n) for n in host_names] if host_names else sorted(config.hosts)
    if not names:
        held = config.held
        raise GenjobError(held.hint if held is not None else f"{layout.config}: no hosts configured")
    loop = _WorkerLoop(layout, config, pool, names, worker_id or actor(), report)
    loop.claimer.replay = replay
    loop.notify = notify
    report(f"worker {loop.worker}: hosts {', '.join(f'{n} (x{config.hosts[n].concurrency})' for n in names)}")
    try:
        await loop.run(stop or asyncio.Event(), once, poll)
    finally:
        await loop.finish()
    return loop.results


class _WorkerLoop:
    """One `run_worker`: its hosts, the jobs in flight on each, and the results so far."""

    def __init__(
        self, layout: Layout, config: Config, pool: Hosts, names: list[str], worker: str, report: Report
    ) -> None:
        self.layout = layout
        self.config = config
        self.pool = pool
        self.names = names
        self.worker = worker
        self.report = report
        self.key_pair = signing_key(config)
        self.claimer = Claimer(layout, worker, config.policy.lease_ttl)
        self.halt = asyncio.Event()  # set once the loop ends: every job still in flight aborts
        self.busy: dict[str, set[asyncio.Task[list[ShipResult]]]] = {n: set() for n in names}
        self.results: list[ShipResult] = []
        self.budget_said: dict[str, str] = {}
        self.skipped_said: dict[str, str] = {}
        self.notify: Notify | None = None
        self.resting: dict[str, float] = {}  # host -> the loop time it takes claims again

    async def run(self, stop: asyncio.Event, once: bool, poll: float) -> None:
        """Fill every host's free slots, then wait for a job to end, a stop, or the next poll."""
        while not stop.is_set():
            empty, failed = await self._fill(stop, once)
            running = self._running()
            if once and (empty or failed) and not running:
                break
            stopping = asyncio.ensure_future(stop.wait())
            wait = CLAIM_RETRY if failed else None if self._full() else poll
            await asyncio.wait([stopping, *running], timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            self._collect()

    async def _fill(self, stop: asyncio.Event, once: bool) -> tuple[bool, bool]:
        """Claim a job for each free slot of each host; returns whether the queue was found
        empty and whether a claim failed (or a host that could not start a run rests)."""
        empty = failed = rested = False
        now = asyncio.get_running_loop().time()
        for name in self.names:
            if self.resting.get(name, now) > now:
                rested = True  # with --once: the host failed; what it gave back stays queued
                continue
            slots = self.config.hosts[name].concurrency
            while len(self.busy[name]) < slots and not (stop.is_set() or failed):
                try:
                    check_budget(self.layout, self.config, name, None)
                    claim = await asyncio.to_thread(self.claimer.claim)
                    refuse = refuse_over_budget
                    await asyncio.to_thread(refuse, self.layout, self.config, name, claim, self.worker)
                except OverBudget as exc:
                    self._over_budget(name, str(exc))
                    empty = True  # nothing this host may take: with --once, the end
                    break
                except NothingToClaim:
                    empty = True
                    self._say_skipped()
                    break
                except (GenjobError, OSError) as exc:
                    # A full disk or a folder that cannot be written is the operator's
                    # to fix: say so, and try again later (with --once, stop claiming).
                    self.report(f"claim failed: {exc}" + ("" if once else f"; retrying in {CLAIM_RETRY:g}s"))
                    failed = True
                    break
                self._say_skipped()
                self.report(f"{claim.key} {name}: claimed (attempt {claim.lease.token})")
                self.busy[name].add(asyncio.create_task(self._ship(name, claim)))
        return empty, failed or rested

    def _say_skipped(self) -> None:
        """Say once each why a queued job was left unclaimed (a STALE one: replay it)."""
        for key, why in self.claimer.skipped.items():
            if self.skipped_said.get(key) != why:
                self.skipped_said[key] = why
                self.report(f"skipped: {why}")

    def _over_budget(self, name: str, why: str) -> None:
        """Say once per host and reason that its budget stops it."""
        if self.budget_said.get(name) != why:
            self.budget_said[name] = why
            self.report(f"{name}: {why}")

    async def _ship(self, name: str, claim: Claim) -> list[ShipResult]:
        """Run one claimed job on host `name`: once, or as the candidates its settings ask for."""
        shipment = Shipment(self.layout, claim, name, self.pool, self.key_pair, self.worker)
        spread = worker_spread(self.config, name, self.names)
        stopped = "interrupted: the worker was stopped"
        if len(spread) > 1:
            return await run_candidates(
                shipment, spread, self.halt, cancel_reason=stopped, on_candidate=self._ended
            )
        res = await run_claimed(shipment, None, self.halt, cancel_reason=stopped)
        self._ended(res)
        return [res]

    def _ended(self, res: ShipResult) -> None:
        if self.notify is not None:
            for event in run_events(res):
                self.notify(event)
        if res.requeued:
            self.resting[res.host] = asyncio.get_running_loop().time() + CLAIM_RETRY
            self.report(f"{res.key} {res.host}: {res.reason}")
            return
        verdict = res.status + (f": {res.reason}" if res.reason else "")
        verdict += ", but nothing changed" if res.unchanged else ""
        if not res.won:
            verdict += " (lease lost; receipt kept aside)"
        which = "" if res.candidate is None else f" candidate {res.candidate}"
        self.report(f"{res.key} {res.host} attempt {res.attempt}{which}: {verdict}")

    def _running(self) -> set[asyncio.Task[list[ShipResult]]]:
        return set().union(*self.busy.values())

    def _full(self) -> bool:
        return all(len(self.busy[n]) >= self.config.hosts[n].concurrency for n in self.names)

    def _collect(self) -> None:
        """Move finished jobs out of `busy`, keeping each one's result."""
        for name in self.names:
            for task in [t for t in self.busy[name] if t.done()]:
                self.busy[name].discard(task)
                if task.cancelled():
                    self.report(f"{name}: a job task was cancelled before its receipt was committed")
                elif task.exception() is not None:
                    self.report(f"{name}: {task.exception()}")
                else:
                    self.results.extend(task.result())

    async def finish(self) -> None:
        """Stop every job still in flight (each ends in an `aborted` receipt), keep their
        results and close the hosts' transports."""
        self.halt.set()
        running = self._running()
        try:
            if running:
                self.report(f"stopping: {len(running)} job(s) in flight end as aborted")
                try:
                    await asyncio.wait(running)
                except asyncio.CancelledError:
                    # Cancelled while waiting: cancelling a job commits the same receipt, sooner.
                    for task in running:
                        task.cancel()
                    await asyncio.wait(running)
                    raise
        finally:
            self._collect()
            with contextlib.suppress(Exception):
                await self.pool.close()


@dataclass(frozen=True)
class BatchEvent:
    """One step of `ship_batch` for one job: "started" on a host, "finished" (with its
    result), "refused" before any claim (with the reason), or "skipped" (stopped first)."""

    key: str
    phase: str
    host: str | None = None
    text: str = ""
    result: ShipResult | None = None


async def ship_batch(
    layout: Layout,
    keys: Sequence[str],
    host_names: Sequence[str] | None = None,
    *,
    worker_id: str | None = None,
    claimed: Mapping[str, Claim] | None = None,
    on_event: Callable[[BatchEvent], None] | None = None,
    cancel: asyncio.Event | None = None,
    replay: Replayer | None = None,
) -> list[ShipResult]:
    """Ship each of `keys` (claiming it, or taking it from `claimed`) across `host_names`
    (default: the default host), each host running at most its `concurrency` at once;
    `replay` mints a serialized job whose inputs moved again before its claim.

    A job that cannot be claimed is reported and skipped; setting `cancel` stops the jobs
    in flight (each ends in an `aborted` receipt) and starts no more.
    """
    config = load_config(layout.config)
    pool = Hosts(config)
    names = [pool.pick(n) for n in host_names] if host_names else [pool.pick(None)]
    key_pair = signing_key(config)
    worker = worker_id or actor()
    claimer = Claimer(layout, worker, config.policy.lease_ttl, replay=replay)
    held = dict(claimed or {})
    todo = deque(keys)
    stop = cancel or asyncio.Event()
    results: list[ShipResult] = []

    def report(event: BatchEvent) -> None:
        if on_event is not None:
            on_event(event)

    async def slot(name: str) -> None:
        while todo and not stop.is_set():
            key = todo.popleft()
            claim = held.pop(key, None)
            try:
                check_budget(layout, config, name, key)
                if claim is None:
                    claim = await asyncio.to_thread(claimer.claim, key)
            except (GenjobError, OSError) as exc:
                report(BatchEvent(key, "refused", name, str(exc)))
                continue
            report(BatchEvent(key, "started", name, f"attempt {claim.lease.token}"))
            res = await run_claimed(Shipment(layout, claim, name, pool, key_pair, worker), None, stop)
            results.append(res)
            report(BatchEvent(key, "finished", name, res.reason or "", res))

    try:
        await asyncio.gather(*(slot(n) for n in names for _ in range(config.hosts[n].concurrency)))
    finally:
        with contextlib.suppress(Exception):
            await pool.close()
    for key in todo:
        report(BatchEvent(key, "skipped", None, "not started: the batch was stopped"))
    return results
