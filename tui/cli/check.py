"""`genjob check`: run the configured checks on a receipt's outputs, sandboxed, and keep the records."""

from __future__ import annotations

import asyncio
import codecs
import sys
from typing import Any

import click

from core.review.check_status import awaiting_approval, check_statuses, describe
from core.review.checks import CheckRun, run_checks
from core.review.verify import verify
from core.store.config import load_config
from core.store.job_keys import resolve_key
from core.store.layout import Layout
from core.store.notify import Notifier, check_failed
from core.store.queue import locate
from tui.cli.commands import layout_of
from tui.cli.output import notifying, print_json, say, say_on_stderr


@click.command("check")
@click.argument("key")
@click.option(
    "--name", "names", multiple=True, help="Run only this check (repeatable; default: every check)."
)
@click.option(
    "--candidate", type=int, default=None, help="Run them on best-of-N candidate N instead of the receipt."
)
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON instead of their output.")
@click.pass_context
def check_cmd(
    ctx: click.Context, key: str, names: tuple[str, ...], candidate: int | None, as_json: bool
) -> None:
    """Run the checks of config.toml on KEY's receipt, in a sandboxed scratch tree.

    Each check's output streams as it runs; its record (bound to these exact outputs and
    base) goes to .gen/checks/KEY/ (a candidate's: .gen/checks/KEY/candidate-N/). Exit 0
    only when every check run passed.
    """
    layout = layout_of(ctx)
    key = resolve_key(layout, key)
    stream = _Stream(quiet=as_json)
    with notifying(layout.root, "check", said=say_on_stderr) as notifier:

        def done(run: CheckRun) -> None:
            stream.done(run)
            if run.record is not None and not run.passed:
                on = "" if candidate is None else f" on candidate {candidate}"
                notifier.send(check_failed(key, run.name, f"check {run.name}{on} {describe(run.record)}"))

        runs = asyncio.run(
            run_checks(
                layout,
                key,
                names,
                on_start=stream.start,
                on_output=stream.output,
                on_done=done,
                candidate=candidate,
            )
        )
        if as_json:
            print_json([_run_dict(r) for r in runs])
        passed = bool(runs) and all(r.passed for r in runs)
        if passed and candidate is None and notifier.wanted("approval"):
            _tell_if_waiting(layout, key, notifier)
        sys.exit(0 if passed else 1)


def _tell_if_waiting(layout: Layout, key: str, notifier: Notifier) -> None:
    """Checks that passed may leave the job ready, waiting on the operator alone: tell it."""
    config = load_config(layout.config)
    job = locate(layout, key).job
    v = verify(layout, job, config)
    if (event := awaiting_approval(config, v, check_statuses(layout, job, config, v))) is not None:
        notifier.send(event)


class _Stream:
    """A running check's output, printed as it comes (made visible, split UTF-8 joined)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.at_line_start = True

    def start(self, name: str) -> None:
        self.end()
        if not self.quiet:
            say(f"== check {name}: running")

    def output(self, name: str, chunk: bytes) -> None:
        if self.quiet:
            return
        text = self.decoder.decode(chunk)
        if text:
            say(text, nl=False)
            self.at_line_start = text.endswith("\n")

    def done(self, run: CheckRun) -> None:
        self.end()
        if not self.quiet:
            _report(run)

    def end(self) -> None:
        tail = self.decoder.decode(b"", final=True)
        self.decoder.reset()
        if self.quiet:
            return
        if tail:
            say(tail, nl=False)
            self.at_line_start = tail.endswith("\n")
        if not self.at_line_start:
            say()
            self.at_line_start = True


def _report(run: CheckRun) -> None:
    if run.record is None:
        say(f"== check {run.name}: stopped before it finished; no record kept")
        return
    say(f"== check {run.name}: {describe(run.record)}")
    made = "hard links under an overlay" if run.scratch == "overlay" else "copies"
    say(f"   {run.sandbox}; scratch tree of {made}")
    if not run.record.sandboxed:
        say(f'genjob: check {run.name} ran UNSANDBOXED (sandbox = "none" in config.toml)', err=True)


def _run_dict(run: CheckRun) -> dict[str, Any]:
    return {
        "name": run.name,
        "passed": run.passed,
        "stopped": run.record is None,
        "sandbox": run.sandbox,
        "scratch": run.scratch,
        "record": run.record.document() if run.record else None,
    }
