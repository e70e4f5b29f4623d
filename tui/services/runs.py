"""The ships this board started: each a task of the board, not of the dialog that shows it.

A model host's run can last many minutes, so a run goes on whether its dialog is open or
not: `escape` hides the dialog, the job stays RUNNING in the list, and `s` on it shows the
dialog again with the output so far. Stopping a run is its own action, always confirmed.
Marked jobs shipped together are one `BoardBatch`, kept and shown the same way: `s` on any
of its jobs shows its dialog, and stopping it stops every job in flight.

A run keeps the newest MAX_HISTORY_BYTES of the generator's output, so that a dialog
opened later can show it; each open dialog holds what it has not drawn yet in its own
bounded buffer (`tui.dialogs.ship.Unshown`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from rich.style import Style
from rich.text import Text

from core.errors import GenjobError
from core.model.contract import ReceiptStatus
from core.model.terminal import visible
from core.remote.demo_generator import stand_in_note
from core.store.layout import Layout

if TYPE_CHECKING:
    from core.store.queue import Claim
    from core.work.ship import ShipResult
    from core.work.worker import BatchEvent

MAX_HISTORY_BYTES = 1 << 20

OK = Style(color="green", bold=True)
BAD = Style(color="red", bold=True)
BUSY = Style(color="yellow", bold=True)
QUIET = Style(dim=True)


class RunViewer(Protocol):
    """What shows a run: told of each piece of output and of each change of status."""

    def run_output(self, data: bytes) -> None: ...

    def run_changed(self) -> None: ...


@dataclass
class BoardRun:
    """One ship this board runs: its status, the output so far, and who is watching."""

    key: str
    host: str | None
    claimed: Claim | None = None
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    status: Text = field(default_factory=lambda: Text("starting…", style="dim"))
    done: bool = False
    succeeded: bool = False
    stopping: bool = False
    # Set once the run is over, however it ended (a cancelled task included).
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    results: list[ShipResult] = field(default_factory=list)  # each run's, as it ended
    _history: bytearray = field(default_factory=bytearray)
    _viewers: list[RunViewer] = field(default_factory=list)

    @property
    def where(self) -> str:
        return visible(self.host or "the default host")

    def output(self, data: bytes) -> None:
        """Called on the event loop as output arrives."""
        self._history += data
        if len(self._history) > MAX_HISTORY_BYTES:
            # Keep the newest half: trimming then waits for as much again.
            del self._history[: len(self._history) - MAX_HISTORY_BYTES // 2]
        for viewer in self._viewers:
            viewer.run_output(data)

    def set_status(self, text: Text) -> None:
        self.status = text
        for viewer in self._viewers:
            viewer.run_changed()

    def stop(self) -> None:
        """Ask the runner to stop the generator: the job ends with an aborted receipt."""
        if not self.done and not self.stopping:
            self.stopping = True
            self.cancel.set()
            self.set_status(Text("stopping: the runner stops the generator…", style="bold yellow"))

    def finish(self, text: Text, ok: bool) -> None:
        self.done, self.succeeded = True, ok
        self.set_status(text)

    def watch(self, viewer: RunViewer) -> None:
        """Show `viewer` the output so far, then each piece as it comes."""
        self._viewers.append(viewer)
        if self._history:
            viewer.run_output(bytes(self._history))

    def unwatch(self, viewer: RunViewer) -> None:
        if viewer in self._viewers:
            self._viewers.remove(viewer)

    @property
    def watched(self) -> bool:
        return bool(self._viewers)


async def drive(layout: Layout, run: BoardRun, worker_id: str) -> None:
    """Ship `run`'s job (as candidates when the host or policy asks), keeping `run` told."""
    from core.plan.overlaps import replay_waiting
    from core.work.ship import ship  # asyncssh is slow to import: only when shipping

    run.set_status(Text(f"claiming and shipping to {run.where}…", style="bold"))
    try:
        spread, stand_ins = await asyncio.to_thread(_plan, layout, run.host)
        if len(spread) > 1:
            await _drive_candidates(layout, run, spread, worker_id)
            return
        result = await ship(
            layout,
            run.key,
            run.host,
            on_output=run.output,
            cancel=run.cancel,
            worker_id=worker_id,
            claimed=run.claimed,
            replay=replay_waiting,
        )
    except GenjobError as exc:
        run.finish(Text(visible(str(exc)), style="bold red"), False)
        return
    except Exception as exc:
        run.finish(Text(visible(f"ship failed: {exc}"), style="bold red"), False)
        return
    run.results.append(result)
    ok = result.status == ReceiptStatus.OK and result.won
    text = Text(visible(describe(result), keep_newlines=True), style="bold green" if ok else "bold yellow")
    if result.host in stand_ins:
        text.append(f"\nNote: {stand_in_note([visible(result.host)])}.", style="yellow")
    run.finish(text, ok)


def _plan(layout: Layout, host: str | None) -> tuple[list[str], set[str]]:
    """The host of each run (one, unless the host or the policy asks for candidates), and
    which configured hosts run the stand-in generator."""
    from core.store.config import candidate_hosts, load_config
    from core.work.ship import Hosts

    config = load_config(layout.config)
    stand_ins = {name for name, h in config.hosts.items() if h.stand_in}
    return candidate_hosts(config, [Hosts(config).pick(host)]), stand_ins


async def _drive_candidates(layout: Layout, run: BoardRun, spread: list[str], worker_id: str) -> None:
    """Best-of-N: a line in the output as each candidate ends; then `a` compares them."""
    from core.plan.overlaps import replay_waiting
    from core.work.ship_candidates import CandidateRequest, ship_candidates

    run.set_status(Text(f"running {len(spread)} candidates on {visible(spread[0])}…", style="bold"))

    def ended(res: ShipResult) -> None:
        run.results.append(res)
        why = f" ({res.reason})" if res.reason else ""
        lost = "" if res.won else "; the lease was lost, so it was kept aside"
        run.output(f"[genjob] candidate {res.candidate} on {res.host}: {res.status}{why}{lost}\n".encode())

    results = await ship_candidates(
        layout,
        CandidateRequest(run.key, spread, len(spread), claimed=run.claimed),
        run.cancel,
        worker_id=worker_id,
        on_candidate=ended,
        replay=replay_waiting,
    )
    ok = sum(1 for r in results if r.status == ReceiptStatus.OK and r.won)
    line = f"{len(results)} candidates of {run.key[:12]}: {ok} came back ok."
    if ok:
        line += "\nNext: a shows them side by side; approve one there."
    run.finish(Text(line, style="bold green" if ok else "bold yellow"), ok > 0)


def describe(result: ShipResult) -> str:
    """One line about how a ship ended, and the next step."""
    if result.requeued:
        return (
            f"{result.key[:12]}: {result.reason}.\nNext: h shows the host; fix it, then ship the job again."
        )
    line = f"{result.key[:12]} on {result.host}, attempt {result.attempt}: receipt {result.status}"
    if result.reason:
        line += f" ({result.reason})"
    if not result.won:
        return line + "; the lease was lost, so the receipt was kept aside as evidence"
    if result.status == ReceiptStatus.OK and result.unchanged:
        nothing = "nothing changed (every output equals its input)"
        return line + f", but {nothing}.\nNext: replay it once the cause is fixed."
    if result.status == ReceiptStatus.OK:
        return line + f", {len(result.outputs)} output file(s).\nNext: a opens the approve preflight."
    if result.status == ReceiptStatus.ABORTED:
        return line + ".\nNext: replay the job (R on the board) to run it again."
    return line + ".\nNext: replay the job (R on the board) once the cause is fixed."


def ended_line(run: BoardRun) -> str:
    """The toast for a run that ended while its dialog was hidden: how, and what next."""
    return " ".join(line for line in run.status.plain.splitlines() if line)


class BatchViewer(Protocol):
    """What shows a batch: told each time a job's line or the batch's status changes."""

    def batch_changed(self) -> None: ...


@dataclass(eq=False)
class BoardBatch:
    """Marked jobs this board ships together across `hosts` (None: the default host), each
    host at its concurrency: a line per job, the counts so far, and who is watching."""

    keys: list[str]
    hosts: list[str] | None
    claimed: dict[str, Claim] = field(default_factory=dict)
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    done: bool = False
    stopping: bool = False
    # Set once the batch is over, however it ended (a cancelled task included).
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    # The batch's end, said (its counts, or why it could not run); None while it runs.
    outcome: Text | None = None
    lines: dict[str, tuple[str, Style]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    results: list[ShipResult] = field(default_factory=list)  # each job's, as it ended
    _viewers: list[BatchViewer] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lines = {k: ("waiting", QUIET) for k in self.keys}
        self.counts = {**dict.fromkeys(ReceiptStatus, 0), "refused": 0, "skipped": 0}

    @property
    def where(self) -> str:
        return ", ".join(map(visible, self.hosts)) if self.hosts else "the default host"

    @property
    def running(self) -> list[str]:
        """The jobs in flight now: claimed and shipped, no receipt yet."""
        return [k for k, (line, _) in self.lines.items() if line.startswith("running")]

    @property
    def waiting(self) -> list[str]:
        return [k for k, (line, _) in self.lines.items() if line == "waiting"]

    @property
    def status(self) -> Text:
        """One line: how far the batch is, stopping, or how it ended."""
        if self.outcome is not None:
            return self.outcome
        if self.stopping:
            return Text("stopping: every job in flight ends in an aborted receipt…", style="bold yellow")
        finished = sum(self.counts.values())
        running, waiting = len(self.running), len(self.waiting)
        return Text(
            f"{finished} of {len(self.keys)} done · {running} running · {waiting} waiting", style="bold"
        )

    def event(self, event: BatchEvent) -> None:
        """Called on the event loop as `ship_batch` moves a job on."""
        if event.phase == "started":
            self.lines[event.key] = (f"running on {event.host} ({event.text})", BUSY)
        elif event.phase == "finished" and event.result is not None:
            self.results.append(event.result)
            status = event.result.status
            self.counts[status] = self.counts.get(status, 0) + 1
            why = f": {event.text}" if event.text else ""
            self.lines[event.key] = (
                f"{status} on {event.host}{why}",
                OK if status == ReceiptStatus.OK else BAD,
            )
        else:
            self.counts[event.phase] = self.counts.get(event.phase, 0) + 1
            style = BAD if event.phase == "refused" else QUIET
            self.lines[event.key] = (f"{event.phase}: {event.text}", style)
        self._tell()

    def stop(self) -> None:
        """Stop every job in flight (each ends in an aborted receipt) and start no more."""
        if not self.done and not self.stopping:
            self.stopping = True
            self.cancel.set()
            self._tell()

    def finish(self, text: Text) -> None:
        self.done, self.outcome = True, text
        self._tell()

    @property
    def succeeded(self) -> bool:
        """Whether every job of the batch came back with an ok receipt."""
        return self.counts[ReceiptStatus.OK] == len(self.keys)

    @property
    def tally(self) -> str:
        """The counts: ok, failed (rejected or aborted), refused, and those never started."""
        failed = self.counts[ReceiptStatus.REJECTED] + self.counts[ReceiptStatus.ABORTED]
        line = f"{self.counts[ReceiptStatus.OK]} ok, {failed} failed, {self.counts['refused']} refused"
        skipped = self.counts["skipped"]
        return line + (f", {skipped} not started" if skipped else "")

    def summary(self) -> Text:
        text = Text(self.tally, style=OK if self.succeeded else BUSY)
        if self.counts[ReceiptStatus.OK]:
            text.append(
                "\nNext: approve each received job with a (mark them and a approves them all).", QUIET
            )
        return text

    def _tell(self) -> None:
        for viewer in self._viewers:
            viewer.batch_changed()

    def watch(self, viewer: BatchViewer) -> None:
        self._viewers.append(viewer)

    def unwatch(self, viewer: BatchViewer) -> None:
        if viewer in self._viewers:
            self._viewers.remove(viewer)

    @property
    def watched(self) -> bool:
        return bool(self._viewers)


async def drive_batch(layout: Layout, batch: BoardBatch, worker_id: str) -> None:
    """Ship `batch`'s jobs with `core.work.worker.ship_batch`, keeping `batch` told."""
    from core.plan.overlaps import replay_waiting
    from core.work.worker import ship_batch  # asyncssh is slow to import: only when shipping

    try:
        await ship_batch(
            layout,
            batch.keys,
            batch.hosts,
            worker_id=worker_id,
            claimed=batch.claimed,
            on_event=batch.event,
            cancel=batch.cancel,
            replay=replay_waiting,
        )
    except GenjobError as exc:
        batch.finish(Text(visible(str(exc)), style="bold red"))
        return
    except Exception as exc:
        batch.finish(Text(visible(f"shipping failed: {exc}"), style="bold red"))
        return
    batch.finish(batch.summary())


def batch_ended_line(batch: BoardBatch) -> str:
    """The toast for a batch that ended while its dialog was hidden: its counts."""
    said = " ".join(line for line in batch.status.plain.splitlines() if line)
    return f"batch of {len(batch.keys)} jobs ended: {said}"
