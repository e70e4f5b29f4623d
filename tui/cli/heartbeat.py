"""`genjob heartbeat`: keep a claim made by `genjob claim` alive from a CI step.

`genjob heartbeat KEY --worker ID` renews the lease once. `genjob heartbeat KEY --worker
ID -- CMD...` runs CMD and renews the lease while it runs, then exits with CMD's status,
as `timeout` or `flock` wrap a command: the lease lives exactly as long as the work, with
no loop in the background for a failing step to leave behind, and CMD's exit status is
the step's. A lost lease (requeued, or claimed again) stops CMD: its work no longer counts.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from types import FrameType

import click

from core.errors import BadInput, WrongState
from core.model.freshness import MAX_TTL
from core.model.terminal import visible
from core.store.job_keys import resolve_key
from core.store.layout import Layout
from core.store.lease import Lease, read_lease
from core.store.queue import heartbeat, renew_claim
from tui.cli.commands import layout_of
from tui.cli.output import say

# Signals passed on to CMD: a CI runner stopping the step, or its terminal gone. Ctrl-C
# reaches CMD by itself (the terminal signals the whole foreground process group).
PASSED_ON = (signal.SIGTERM, signal.SIGHUP)
# How long CMD has to stop after a lost lease before it is killed.
STOP_GRACE = 10.0


@click.command("heartbeat")
@click.argument("key")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--worker", required=True, help="The worker id the job was claimed with (`genjob claim --worker`)."
)
@click.option(
    "--ttl",
    type=click.FloatRange(min=0, max=MAX_TTL, min_open=True),
    default=None,
    help=f"Set the lease's ttl to this many seconds, at most {MAX_TTL:g} (default: keep it).",
)
@click.option(
    "--every",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="With -- CMD: renew every this many seconds (default: a third of the ttl).",
)
@click.pass_context
def heartbeat_cmd(
    ctx: click.Context,
    key: str,
    command: tuple[str, ...],
    worker: str,
    ttl: float | None,
    every: float | None,
) -> None:
    """Renew the lease of KEY, claimed by --worker; with `-- CMD...`, run CMD and keep
    renewing while it runs, then exit with its status.

    Refused, with nothing renewed, when KEY is not claimed, is claimed by another worker
    id, or its lease has lapsed (the job is ORPHANED)."""
    layout = layout_of(ctx)
    full = resolve_key(layout, key)
    if every is not None and not command:
        raise BadInput("heartbeat --every is the interval while a command runs: give it `-- CMD`")
    if command and shutil.which(command[0]) is None:
        raise BadInput(f"{command[0]}: no such program to run (not on PATH, or not executable)")
    if every is not None:
        held = read_lease(layout, full)
        lasts = ttl if ttl is not None else held.ttl if held is not None else MAX_TTL
        if every >= lasts:
            raise BadInput(f"--every {every:g}: not under the lease's ttl of {lasts:g} s, so it would lapse")
    lease = renew_claim(layout, full, worker, os.getppid(), ttl)
    if not command:
        say(f"{full}: lease renewed for {visible(worker)}, ttl {lease.ttl:g}s", err=True)
        return
    sys.exit(run_beating(layout, full, lease, command, every or min(lease.ttl, MAX_TTL) / 3))


def run_beating(layout: Layout, key: str, lease: Lease, command: tuple[str, ...], every: float) -> int:
    """Run `command`, renewing `lease` every `every` seconds until it exits; its exit
    status (128 + N for a signal N, as a shell says it). A lost lease stops it."""
    try:
        proc = subprocess.Popen(command)
    except OSError as exc:
        raise BadInput(f"{command[0]}: cannot run it ({exc.strerror})") from None

    def pass_on(signum: int, _frame: FrameType | None) -> None:
        proc.send_signal(signum)

    before = {sig: signal.signal(sig, pass_on) for sig in PASSED_ON}
    try:
        while True:
            try:
                code = proc.wait(timeout=every)
            except subprocess.TimeoutExpired:
                if heartbeat(layout, key, lease.token, lease.worker):
                    continue
                raise WrongState(
                    f"{key}: the lease is no longer {lease.worker}'s (requeued, or claimed again); "
                    f"stopped {command[0]}"
                ) from None
            return 128 - code if code < 0 else code
    except BaseException:  # a lost lease, a fault renewing it, Ctrl-C: CMD never outlives it
        stop(proc)
        raise
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after STOP_GRACE seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=STOP_GRACE)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
