"""The checks the board runs: on each receipt as it arrives (when the config says so), and
on the operator's request (`t`), at most `[check_runs] concurrency` at once.

`CheckRunner` renders nothing. Each check runs in an async worker through
`core.review.checks.run_check` (sandboxed, in a scratch tree, its record kept); the runner keeps
the output tail of the checks under way and posts what happens as messages: a check
started, its output moved on (at most a few times a second), it ended. A stop (`T`)
sets the run's event: the sandbox and every process in it are killed, and no record is
kept; however the check was started, it is not run by itself again on that receipt
until `t` asks for it or a new receipt comes. Leaving the board stops every check the
same way. `core.review.checks` (pydantic, the config model) is imported when a check
first runs, not with the board.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.timer import Timer
from textual.widget import Widget

from core.errors import GenjobError
from core.model.standing import CheckState, Standing
from core.remote.rules import TailBuffer
from core.store.layout import Layout
from tui.messages import CheckEnded, CheckOutput, CheckStarted

if TYPE_CHECKING:
    from core.review.checks import CheckRun

# How much of a running check's output the board keeps, and how often it shows more.
LIVE_TAIL_BYTES = 64 << 10
OUTPUT_EVERY = 0.25
# The states a check is run in by itself when a receipt arrives.
AUTO_STATES = (CheckState.NOT_RUN, CheckState.STALE)


@dataclass
class LiveCheck:
    """A check this board runs now (or that waits for a free slot)."""

    key: str
    name: str
    queued_at: float
    manual: bool  # asked for with `t` (not run by itself as a receipt arrived)
    started_at: float | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    tail: TailBuffer = field(default_factory=lambda: TailBuffer(LIVE_TAIL_BYTES))

    @property
    def output(self) -> str:
        return bytes(self.tail).decode("utf-8", errors="replace")


class CheckRunner(Widget):
    """Runs checks for the board and tells it how they go; renders nothing."""

    DEFAULT_CSS = "CheckRunner { display: none; }"

    def __init__(self, layout: Layout, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.repo = layout
        self.on_receipt = False  # until the config is read
        self.concurrency = 2
        self._slots = asyncio.Semaphore(self.concurrency)
        self.live: dict[tuple[str, str], LiveCheck] = {}
        # The checks run by themselves once for each receipt's outputs: never again in a loop.
        self._tried: set[tuple[str, str, str]] = set()
        # Each received job's outputs as last judged, and the checks `T` stopped with the
        # outputs they were stopped on (None: not judged yet): those wait for `t`.
        self._outputs: dict[str, str] = {}
        self._stopped: dict[tuple[str, str], str | None] = {}
        self._output_timers: dict[str, Timer] = {}
        self._output_at: dict[str, float] = {}

    def configure(self, on_receipt: bool, concurrency: int) -> None:
        """The config's `[check_runs]`: checks started from now on follow it."""
        self.on_receipt = on_receipt
        if concurrency != self.concurrency:
            self.concurrency = concurrency
            self._slots = asyncio.Semaphore(concurrency)

    def running(self, key: str) -> bool:
        """Whether this board runs (or waits to run) a check of `key`."""
        return any(k == key for k, _ in self.live)

    def live_for(self, key: str) -> dict[str, LiveCheck]:
        return {name: live for (k, name), live in self.live.items() if k == key}

    def consider(self, standings: Mapping[str, Standing]) -> None:
        """Run, once per receipt, the checks not run (or stale) of each job whose receipt
        verifies, when the config asks for that; never one `T` stopped on these outputs."""
        for key, standing in standings.items():
            if standing.outputs is not None:
                self._outputs[key] = standing.outputs
        if not self.on_receipt:
            return
        for key, standing in standings.items():
            if standing.verdict is not True or standing.outputs is None:
                continue
            names = []
            for check in standing.checks:
                tried = (key, check.name, standing.outputs)
                if (
                    check.state in AUTO_STATES
                    and tried not in self._tried
                    and (key, check.name) not in self.live
                    and not self._held(key, check.name, standing.outputs)
                ):
                    self._tried.add(tried)
                    names.append(check.name)
            if names:
                self.start(key, names, manual=False)

    def _held(self, key: str, name: str, outputs: str) -> bool:
        """Whether `T` stopped this check on these outputs (a new receipt lets it run)."""
        pair = (key, name)
        if pair not in self._stopped:
            return False
        at = self._stopped[pair]
        if at is not None and at != outputs:
            del self._stopped[pair]  # stopped on the last receipt, not this one
            return False
        self._stopped[pair] = outputs
        return True

    def start(self, key: str, names: Iterable[str], manual: bool = True) -> list[str]:
        """Run these checks of `key` (each once: one under way is not started again)."""
        started = []
        for name in names:
            if manual:
                self._stopped.pop((key, name), None)
            if (key, name) in self.live:
                continue
            live = self.live[(key, name)] = LiveCheck(key, name, time.time(), manual)
            self.run_worker(self._run(live), group="checks", exit_on_error=False)
            started.append(name)
        return started

    def stop(self, keys: Iterable[str]) -> int:
        """Stop every check of `keys` under way or waiting; how many there were."""
        wanted = set(keys)
        stopping = [live for (key, _), live in self.live.items() if key in wanted]
        for live in stopping:
            live.stop.set()
            self._stopped[(live.key, live.name)] = self._outputs.get(live.key)
        return len(stopping)

    async def _run(self, live: LiveCheck) -> None:
        from core.review.check_status import describe

        key, name = live.key, live.name

        def ended(passed: bool | None, text: str) -> None:
            self.post_message(CheckEnded(key, name, passed, text, live.manual))

        try:
            async with self._slots:
                if live.stop.is_set():
                    ended(None, f"check {name} stopped before it started")
                    return
                live.started_at = time.time()
                self.post_message(CheckStarted(key, name))
                run = await self._check(live)
        except GenjobError as exc:
            ended(None, f"check {name}: {exc}")
        except Exception as exc:
            ended(None, f"check {name} failed to run: {exc}")
        else:
            if run.record is None:
                ended(None, f"check {name} stopped; no record kept")
            else:
                ended(run.passed, f"check {name} {describe(run.record)}")
        finally:
            self.live.pop((key, name), None)
            timer = self._output_timers.pop(key, None)
            if timer is not None:
                timer.stop()

    async def _check(self, live: LiveCheck) -> CheckRun:
        from core.review.checks import checkable, run_check
        from core.store.config import load_config

        config = await asyncio.to_thread(load_config, self.repo.config)
        job, receipt, _ = await asyncio.to_thread(checkable, self.repo, live.key, config)

        def on_output(chunk: bytes) -> None:
            live.tail.add(chunk)
            self._output_moved(live.key)

        return await run_check(
            self.repo, job, receipt, live.name, config, on_output=on_output, cancel=live.stop
        )

    def _output_moved(self, key: str) -> None:
        """Tell the board, at most every `OUTPUT_EVERY` seconds per job."""
        if key in self._output_timers:
            return
        wait = self._output_at.get(key, 0.0) + OUTPUT_EVERY - time.monotonic()
        if wait <= 0:
            self._post_output(key)
            return
        self._output_timers[key] = self.set_timer(wait, lambda: self._post_output(key))

    def _post_output(self, key: str) -> None:
        self._output_timers.pop(key, None)
        self._output_at[key] = time.monotonic()
        self.post_message(CheckOutput(key))
