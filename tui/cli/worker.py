"""`genjob ship` and `genjob worker`: the worker plane on the command line."""

from __future__ import annotations

import asyncio
import codecs
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

import click

from core.model.terminal import visible
from core.remote.demo_generator import STAND_IN
from core.remote.rules import LineCap
from core.review.check_status import check_statuses
from core.review.verify import verify
from core.store.config import load_config
from core.store.layout import Layout
from core.store.queue import locate
from tui.cli.commands import layout_of, print_checks, resolve_key
from tui.cli.output import say

T = TypeVar("T")


def run_until_signal(make: Callable[[asyncio.Event], Awaitable[T]]) -> T:
    """Run a coroutine; SIGINT and SIGTERM set its stop event instead of killing it."""

    async def main() -> T:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await make(stop)

    return asyncio.run(main())


# The longest line of generator output `genjob ship` streams; the rest is dropped as it comes.
MAX_LINE_CHARS = 4096


class _Visible:
    """Generator output for the operator's terminal: UTF-8 decoded across chunk boundaries,
    every control and format character shown, so a generator can never drive the terminal,
    and each line cut at MAX_LINE_CHARS (the evidence in `.gen/logs/` keeps its tail as it came)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lines = LineCap(MAX_LINE_CHARS)

    def __call__(self, chunk: bytes) -> None:
        shown = self._lines.feed(self._decoder.decode(chunk))
        if shown:
            sys.stderr.write(visible(shown, keep_newlines=True))
            sys.stderr.flush()


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
    from core.review.host_sandbox import LocalSandbox
    from core.store.config import candidate_hosts
    from core.work.ship import Hosts, ship

    layout: Layout = layout_of(ctx)
    full = resolve_key(layout, key)
    config = load_config(layout.config)
    pool = Hosts(config)
    names = [pool.pick(n) for n in hosts] or [pool.pick(None)]
    if len(candidate_hosts(config, names, candidates)) > 1:
        _ship_candidates(layout, full, names, candidates, worker_id)
        return
    res = run_until_signal(
        lambda stop: ship(layout, full, names[0], None if quiet else _Visible(), stop, worker_id=worker_id)
    )
    _echo_visible(f"{res.key}: {res.status}" + (f" ({res.reason})" if res.reason else "") + f" on {res.host}")
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
    job = locate(layout, full).job
    v = verify(layout, job, config)
    print_checks(v, check_statuses(layout, job, config, v))
    sys.exit(0 if v.ok else 1)


def _ship_candidates(
    layout: Layout, key: str, names: list[str], how_many: int | None, worker_id: str | None
) -> None:
    """`ship --candidates`: a line as each candidate ends, then the candidates compared."""
    from core.read.candidate_view import views
    from core.work.ship import ShipResult
    from core.work.ship_candidates import CandidateRequest, ship_candidates
    from tui.cli.candidates import print_candidates

    def ended(res: ShipResult) -> None:
        verdict = res.status + (f" ({res.reason})" if res.reason else "")
        lost = "" if res.won else " (lease lost; kept aside)"
        _echo_visible(f"{res.key}: candidate {res.candidate} {verdict} on {res.host}{lost}")

    results = run_until_signal(
        lambda stop: ship_candidates(
            layout, CandidateRequest(key, names, how_many), stop, worker_id=worker_id, on_candidate=ended
        )
    )
    if not all(r.won for r in results):
        say("the lease was lost; what came late was kept aside under .gen/logs/")
        sys.exit(1)
    shown = views(layout, key)
    print_candidates(key, shown)
    sys.exit(0 if any(v.ok for v in shown) else 1)


@click.command("worker")
@click.option("--host", "hosts", multiple=True, help="Only these hosts. Repeatable (default: all).")
@click.option("--once", is_flag=True, help="Stop when the queue is empty.")
@click.option("--worker", "worker_id", help="Worker id for leases and receipts (default: user@host).")
@click.pass_context
def worker_cmd(ctx: click.Context, hosts: tuple[str, ...], once: bool, worker_id: str | None) -> None:
    """Claim and ship jobs across hosts, up to each host's concurrency. Stops cleanly on SIGTERM."""
    from core.work.worker import run_worker

    layout: Layout = layout_of(ctx)
    results = run_until_signal(
        lambda stop: run_worker(
            layout, list(hosts) or None, once=once, stop=stop, report=_echo_visible, worker_id=worker_id
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
