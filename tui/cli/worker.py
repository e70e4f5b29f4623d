"""`genjob ship` and `genjob worker`: the worker plane on the command line.

A run never depends on genjob's own terminal: the generator's output is written by a
thread of its own, dropped once that terminal is gone or has stopped reading, and a
closed terminal (SIGHUP) stops the run as SIGTERM and Ctrl-C do, with an aborted receipt.
"""

from __future__ import annotations

import asyncio
import codecs
import os
import queue
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import click

from core.model.terminal import visible
from core.remote.demo_generator import STAND_IN
from core.remote.rules import LineCap
from core.review.check_status import check_statuses
from core.review.verify import verify
from core.store.config import load_config
from core.store.job_keys import resolve_key
from core.store.layout import Layout
from core.store.queue import locate
from tui.cli.commands import layout_of, print_checks
from tui.cli.output import notifying, say, say_on_stderr

if TYPE_CHECKING:
    from core.store.config import Config
    from core.store.notify import Notifier
    from core.work.ship import ShipResult

T = TypeVar("T")


# What stops a run: Ctrl-C, SIGTERM, and SIGHUP (the terminal or the SSH session it ran in
# closed), each as the others, so the job ends with an aborted receipt, never ORPHANED.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_until_signal(make: Callable[[asyncio.Event], Awaitable[T]]) -> T:
    """Run a coroutine; a stop signal sets its stop event instead of killing it."""

    async def main() -> T:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, stop.set)
        return await make(stop)

    return asyncio.run(main())


def hold_standard_fds() -> None:
    """Open /dev/null on each of stdin, stdout and stderr that is closed, as daemons do:
    otherwise the next file genjob opened would get that number, and what is written to
    stdout or stderr (by genjob or a program it starts) would land in it."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # the lowest free number: `fd` itself


# The longest line of generator output `genjob ship` streams; the rest is dropped as it comes.
MAX_LINE_CHARS = 4096
# The most output waiting for a terminal that reads slowly or not at all; past it, output
# is dropped until it has caught up.
MAX_WAITING_BYTES = 1 << 20
# How long the verdict waits for the output before it to reach the terminal.
DRAIN_WAIT = 2.0


class _Visible:
    """Generator output for the operator's terminal: UTF-8 decoded across chunk boundaries,
    CRLF shown as a plain line end (OpenSSH's client ends its own messages so), every other
    control and format character shown, so a generator can never drive the terminal, and
    each line cut at MAX_LINE_CHARS (the evidence in `.gen/logs/` keeps its tail as it came).

    A thread of its own writes it to stderr: the run never waits for the terminal. Once
    that fails (EPIPE, EIO: the reader or the terminal is gone), or when there is no stderr,
    the output is dropped; so is what comes while over MAX_WAITING_BYTES wait."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lines = LineCap(MAX_LINE_CHARS)
        self._cr = False  # the last chunk ended in "\r": a "\n" may follow
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._waiting = 0
        self._lock = threading.Lock()  # over `_waiting` and `_broken`
        self._broken = sys.stderr is None
        self._writer = threading.Thread(target=self._write_all, name="genjob-output", daemon=True)
        self._writer.start()

    def __call__(self, chunk: bytes) -> None:
        shown = visible(self._lines.feed(self._crlf(self._decoder.decode(chunk))), keep_newlines=True)
        with self._lock:
            if self._broken or not shown or self._waiting + len(shown) > MAX_WAITING_BYTES:
                return
            self._waiting += len(shown)
        self._queue.put(shown)

    def _crlf(self, text: str) -> str:
        """`text` with each CRLF as LF, across chunk boundaries: a CR at the end waits."""
        if self._cr:
            text = "\r" + text
        self._cr = text.endswith("\r")
        return (text[:-1] if self._cr else text).replace("\r\n", "\n")

    def _write_all(self) -> None:
        while (text := self._queue.get()) is not None:
            try:
                _write_stderr(text)
            except (OSError, ValueError):  # ValueError: a stream closed under it
                with self._lock:
                    self._broken = True
            with self._lock:
                self._waiting -= len(text)

    def close(self) -> None:
        """Let what waits reach the terminal, for DRAIN_WAIT at most, so the verdict comes after it."""
        self._queue.put(None)
        self._writer.join(DRAIN_WAIT)


def _write_stderr(text: str) -> None:
    """Write `text` to stderr: straight to its descriptor when it has one, so that no lock
    of `sys.stderr` is held while a terminal that stopped reading blocks the write."""
    stream = sys.stderr
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # a stream in memory (tests), or none
        stream.write(text)
        stream.flush()
        return
    view = memoryview(text.encode(stream.encoding or "utf-8", errors="backslashreplace"))
    while view:
        view = view[os.write(fd, view) :]


def _echo_visible(line: str) -> None:
    """A report line that may quote what a generator chose (file names, messages)."""
    say(visible(line))


@click.command("ship")
@click.argument("key")
@click.option(
    "--host",
    "hosts",
    multiple=True,
    help="The host from config.toml (default: local, or the only one). Repeatable with "
    "--candidates: the candidates are spread over the hosts in turn.",
)
@click.option(
    "--candidates",
    type=int,
    default=None,
    help="Run N attempts in parallel, each a candidate with its own signed receipt "
    "(default: the host's or the policy's `candidates`, else 1).",
)
@click.option("--worker", "worker_id", help="Worker id for the lease and receipt (default: user@host).")
@click.option("--quiet", "-q", is_flag=True, help="Do not stream the generator's output.")
@click.pass_context
def ship_cmd(
    ctx: click.Context,
    key: str,
    hosts: tuple[str, ...],
    candidates: int | None,
    worker_id: str | None,
    quiet: bool,
) -> None:
    """Claim a queued job, ship it to a generator host, and print the receipt's verdict.

    Ctrl-C or SIGTERM stops the remote generator; the job ends in an aborted receipt.
    Exit 0 when the receipt verifies, 1 otherwise (apply may still wait for required checks).
    With candidates: exit 0 when at least one candidate verifies.
    """
    from core.plan.overlaps import replay_waiting
    from core.store.config import candidate_hosts
    from core.work.ship import Hosts, run_events, ship

    hold_standard_fds()
    layout: Layout = layout_of(ctx)
    full = resolve_key(layout, key)
    config = load_config(layout.config)
    pool = Hosts(config)
    names = [pool.pick(n) for n in hosts] or [pool.pick(None)]
    with notifying(layout.root, "ship", said=say_on_stderr) as notifier:
        if len(candidate_hosts(config, names, candidates)) > 1:
            _ship_candidates(layout, full, names, candidates, worker_id, notifier)
            return
        shown = None if quiet else _Visible()
        try:
            res = run_until_signal(
                lambda stop: ship(
                    layout, full, names[0], shown, stop, worker_id=worker_id, replay=replay_waiting
                )
            )
        finally:
            if shown is not None:
                shown.close()
        for event in run_events(res):
            notifier.send(event)
        _shipped(layout, config, res, notifier)


def _shipped(layout: Layout, config: Config, res: ShipResult, notifier: Notifier) -> None:
    """What `ship` prints once its run ended: the verdict, notes on the host, and the
    receipt's verification and checks; a job that now waits on the operator is told."""
    from core.review.check_status import awaiting_approval
    from core.review.host_sandbox import LocalSandbox
    from core.review.verify import NOTHING_CHANGED

    if res.requeued:
        _echo_visible(f"{res.key}: {res.reason}; `genjob hosts --probe` tries the host again")
        sys.exit(1)
    _echo_visible(f"{res.key}: {res.status}" + (f" ({res.reason})" if res.reason else "") + f" on {res.host}")
    if res.unchanged:
        say(f"{res.key}: {NOTHING_CHANGED}; [policy] refuse_no_change = true rejects such a run")
    if not res.won:
        say(f"the lease was lost; this receipt was kept aside at {visible(str(res.receipt))}")
        sys.exit(1)
    host = config.hosts[res.host]
    if host.transport == "local" and not (confine := LocalSandbox.of(host)).sandboxed_now():
        say(f"note: {visible(res.host)} ran {confine.describe()}")
    if host.stand_in:
        say(
            f"note: {visible(res.host)} runs {STAND_IN}; "
            "`--host tidy` runs ruff, and `genjob help hosts` shows real model hosts"
        )
    job = locate(layout, res.key).job
    v = verify(layout, job, config)
    statuses = check_statuses(layout, job, config, v)
    print_checks(v, statuses)
    if (event := awaiting_approval(config, v, statuses)) is not None:
        notifier.send(event)
    sys.exit(0 if v.ok else 1)


def _ship_candidates(
    layout: Layout,
    key: str,
    names: list[str],
    how_many: int | None,
    worker_id: str | None,
    notifier: Notifier,
) -> None:
    """`ship --candidates`: a line as each candidate ends, then the candidates compared;
    a job with a candidate that verifies waits for the operator to choose one."""
    from core.plan.overlaps import replay_waiting
    from core.read.candidate_view import views
    from core.store.notify import waiting_for_approval
    from core.work.ship import run_events
    from core.work.ship_candidates import CandidateRequest, ship_candidates
    from tui.cli.candidates import print_candidates

    def ended(res: ShipResult) -> None:
        verdict = res.status + (f" ({res.reason})" if res.reason else "")
        verdict += ", but nothing changed" if res.unchanged else ""
        lost = "" if res.won else " (lease lost; kept aside)"
        _echo_visible(f"{res.key}: candidate {res.candidate} {verdict} on {res.host}{lost}")
        for event in run_events(res):
            notifier.send(event)

    results = run_until_signal(
        lambda stop: ship_candidates(
            layout,
            CandidateRequest(key, names, how_many),
            stop,
            worker_id=worker_id,
            on_candidate=ended,
            replay=replay_waiting,
        )
    )
    if not all(r.won for r in results):
        say("the lease was lost; what came late was kept aside under .gen/logs/")
        sys.exit(1)
    shown = views(layout, key)
    print_candidates(key, shown)
    verified = sum(1 for v in shown if v.ok)
    if verified:
        why = f"{verified} of {len(shown)} candidates verify; genjob candidates {key[:12]} compares them"
        notifier.send(waiting_for_approval(key, why))
    sys.exit(0 if verified else 1)


@click.command("worker")
@click.option("--host", "hosts", multiple=True, help="Only these hosts. Repeatable (default: all).")
@click.option("--once", is_flag=True, help="Stop when the queue is empty.")
@click.option("--worker", "worker_id", help="Worker id for leases and receipts (default: user@host).")
@click.pass_context
def worker_cmd(ctx: click.Context, hosts: tuple[str, ...], once: bool, worker_id: str | None) -> None:
    """Claim and ship jobs across hosts, up to each host's concurrency. Stops cleanly on SIGTERM."""
    from core.plan.overlaps import replay_waiting
    from core.work.worker import run_worker

    hold_standard_fds()
    layout: Layout = layout_of(ctx)
    with notifying(layout.root, "worker", said=_echo_visible) as notifier:
        results = run_until_signal(
            lambda stop: run_worker(
                layout,
                list(hosts) or None,
                once=once,
                stop=stop,
                report=_echo_visible,
                worker_id=worker_id,
                replay=replay_waiting,
                notify=notifier.send,
            )
        )
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no jobs"
    best_of = {r.key for r in results if r.candidate is not None}
    if best_of:
        summary += f" (counting each candidate: {len(best_of)} job(s) ran as candidates)"
    say(f"worker done: {summary}")
