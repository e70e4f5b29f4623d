"""Notifications: the events an operator may want to hear of, sent to the channels they chose.

Four events (`NotifyEvent`): a receipt arrived, a check failed, a job waits for approval,
a run on a host failed. Three channels, each opted into event by event in `[notify]` of
the operator's own config.toml (never a repository's: its command runs with the
operator's rights): the terminal bell, a desktop notification through `notify-send`, and
a command run with the event as JSON on its stdin.

A `Notifier` never blocks its caller: `send` queues the event, and one thread of its own
rings, runs `notify-send` and the command (each with a timeout), one event after the
other. A failure is told through `said` and never stops the caller, nor the next event.
Event text may quote a generator or a check (a reason, a host's message): the desktop
gets it with every control character shown and its markup escaped; the command gets it
as JSON, ASCII only.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from core.errors import GenjobError
from core.model.terminal import one_line
from core.store.config import NotifyEvent, NotifySettings, load_operator_config

SCHEMA = "genjob.notify.v1"
EVENTS: tuple[str, ...] = get_args(NotifyEvent)
TITLES = {
    "receipt": "receipt arrived",
    "check_failed": "check failed",
    "approval": "waiting for approval",
    "host_failed": "host failed",
}
# Events waiting for the sender past this are dropped (and said once): a command that
# hangs until its timeout must not pile up memory behind it.
MAX_WAITING = 64
# How long `notify-send` may take, and the most of a failing command's stderr that is told.
DESKTOP_TIMEOUT = 10.0
FAULT_CHARS = 300

Said = Callable[[str], None]


@dataclass(frozen=True)
class Event:
    """One thing worth telling: its kind (one of EVENTS), the job, a line for a person,
    and the facts a script may want (host, status, check, reason)."""

    kind: str
    key: str
    text: str
    details: Mapping[str, str | int | None] = field(default_factory=dict)
    at: float = field(default_factory=time.time)

    def document(self, repository: Path, source: str) -> dict[str, Any]:
        """What the command reads on its stdin; `source` says which process saw it."""
        return {
            **self.details,
            "schema": SCHEMA,
            "event": self.kind,
            "key": self.key,
            "text": self.text,
            "repository": str(repository),
            "source": source,
            "at": self.at,
        }


def receipt_arrived(key: str, status: str | None, state: str | None = None, host: str | None = None) -> Event:
    """A receipt came in for `key` (its status when known; the job's state when read)."""
    said = (
        f"{key[:12]}: receipt {status or 'in'}"
        + (f" from {host}" if host else "")
        + (f", {state}" if state else "")
    )
    return Event("receipt", key, one_line(said), {"status": status, "state": state, "host": host})


def waiting_for_approval(key: str, why: str) -> Event:
    """`key` verifies (as far as its watcher knows) and waits for the operator to approve it."""
    return Event("approval", key, f"{key[:12]}: waits for your approval ({one_line(why)})", {"why": why})


def check_failed(key: str, name: str, text: str) -> Event:
    return Event("check_failed", key, one_line(text), {"check": name})


def host_failed(key: str, host: str, attempt: int, reason: str | None) -> Event:
    said = f"{key[:12]}: the run on {host} failed" + (f" ({one_line(reason)})" if reason else "")
    return Event("host_failed", key, said, {"host": host, "attempt": attempt, "reason": reason})


def desktop_argv(program: str, event: Event) -> list[str]:
    """`notify-send`'s argv: the text shown, never obeyed (no control character, no markup,
    no option: `--` ends them)."""
    body = html.escape(one_line(event.text), quote=False)
    return [program, "--app-name=genjob", "--", f"genjob: {TITLES[event.kind]}", body]


def _tail(data: bytes) -> str:
    return one_line(data.decode("utf-8", "replace").strip())[-FAULT_CHARS:]


class Notifier:
    """Sends each event to the channels that opted into it, from a thread of its own."""

    def __init__(
        self,
        settings: NotifySettings,
        repository: Path,
        source: str,
        *,
        bell: Callable[[], None],
        said: Said,
    ) -> None:
        self.settings = settings
        self.repository = repository
        self.source = source
        self.bell = bell
        self.said = said
        self._waiting: queue.Queue[Event | None] = queue.Queue(MAX_WAITING)
        self._thread: threading.Thread | None = None
        self._told: set[str] = set()  # faults said once only

    @classmethod
    def of_operator(cls, repository: Path, source: str, *, bell: Callable[[], None], said: Said) -> Notifier:
        """The operator's `[notify]`; a config that does not load is said, and sends nothing."""
        try:
            settings = load_operator_config().notify
        except GenjobError as exc:
            said(f"notifications are off: {exc}")
            settings = NotifySettings()
        return cls(settings, repository, source, bell=bell, said=said)

    def wanted(self, kind: str) -> bool:
        s = self.settings
        return (
            kind in s.bell.events
            or kind in s.desktop.events
            or (s.command is not None and kind in s.command.events)
        )

    def send(self, event: Event) -> None:
        """Queue `event` for its channels; never blocks."""
        if not self.wanted(event.kind):
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._deliver_all, name="genjob-notify", daemon=True)
            self._thread.start()
        try:
            self._waiting.put_nowait(event)
        except queue.Full:
            self._once("overflow", f"notifications: more than {MAX_WAITING} waiting; {event.kind} dropped")

    def close(self, wait: float | None = None) -> None:
        """Let the events waiting go out, for `wait` seconds at most (None: all of them)."""
        if self._thread is None:
            return
        deadline = None if wait is None else time.monotonic() + wait
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            self._waiting.put(None, timeout=left)
        except queue.Full:
            return
        self._thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def _once(self, what: str, text: str) -> None:
        if what not in self._told:
            self._told.add(what)
            self.said(text)

    def _deliver_all(self) -> None:
        while (event := self._waiting.get()) is not None:
            self.deliver(event)

    def deliver(self, event: Event) -> None:
        """Every channel that opted into `event`, in turn; a failure is said, never raised."""
        s = self.settings
        if event.kind in s.bell.events:
            try:
                self.bell()
            except Exception as exc:  # a bell that fails (the app closing) is the bell's only
                self.said(f"notify bell: {exc}")
        if event.kind in s.desktop.events:
            self._desktop(event)
        if s.command is not None and event.kind in s.command.events:
            self._command(event, s.command.run, s.command.timeout)

    def _desktop(self, event: Event) -> None:
        program = shutil.which("notify-send")
        if program is None:
            self._once("desktop", "notify desktop: notify-send is not on PATH; no desktop notifications")
            return
        self._run("notify-send", desktop_argv(program, event), b"", DESKTOP_TIMEOUT)

    def _command(self, event: Event, argv: list[str], timeout: float) -> None:
        doc = event.document(self.repository, self.source)
        data = json.dumps(doc, sort_keys=True, ensure_ascii=True).encode() + b"\n"
        self._run(f"notify command {argv[0]}", argv, data, timeout)

    def _run(self, what: str, argv: list[str], data: bytes, timeout: float) -> None:
        """Run `argv` with `data` on its stdin, in a session of its own (a Ctrl-C to genjob
        is not its), killed with everything it started once `timeout` passes."""
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            self.said(f"{what}: cannot run it ({exc.strerror or exc})")
            return
        try:
            _, err = proc.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            self.said(f"{what}: stopped after {timeout:g} s")
            return
        if proc.returncode != 0:
            tail = _tail(err)
            self.said(f"{what}: exit {proc.returncode}" + (f": {tail}" if tail else ""))
