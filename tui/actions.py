"""What each key does to the jobs it is pressed on: one table from action to core call.

Every entry of `TABLE` says how an action asks (a confirm, a reason, a preflight, a
host) and which core call it makes for each key. `Dispatcher` runs an entry in an async
worker: dialogs are awaited with `push_screen_wait`, core calls run in a thread, and the
outcome comes back to the screen as an `ActionDone` message. Dialogs are imported when
first opened, so that the board's first frame does not wait for them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text
from textual import work
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.widget import Widget

from core.apply import apply_job
from core.config import load_config
from core.errors import GenjobError
from core.inspect_job import job_detail
from core.layout import Layout
from core.preflight import preflight
from core.queue import claim, reject, request_cancel, requeue
from core.replay import replay
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.reason import ReasonDialog

# How many keys a bulk confirm lists before "… and N more".
LISTED = 12

# An action's question before it runs: the answer its core call needs, or None to stop.
Ask = Callable[["Dispatcher", list[str], bool], Awaitable[Any]]
# One key's core call, run in a thread: returns the line that reports it.
Call = Callable[["Dispatcher", str, Any], "str | Done"]
# An action that runs in a dialog of its own instead of key by key (shipping).
Run = Callable[["Dispatcher", list[str], Any], Awaitable[None]]


@dataclass(frozen=True)
class JobAction:
    verb: str
    ask: Ask | None = None
    call: Call | None = None
    run: Run | None = None


@dataclass(frozen=True)
class Done:
    """A key's report, and a job to put the cursor on (a replay's new job)."""

    text: str
    select: str | None = None


@dataclass
class ActionDone(Message):
    """An action ran: one line per job done or failed; `keys` changed on disk."""

    verb: str
    done: list[str]
    failed: list[str]
    keys: list[str]
    select: str | None = None


@dataclass
class Say(Message):
    """A line for the operator (a refusal, a note), shown literally."""

    text: str
    severity: SeverityLevel = "information"
    title: str = ""


@dataclass
class Outcome:
    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    select: str | None = None


class Dispatcher(Widget):
    """Runs the board's actions; renders nothing. `worker_id` is who the board claims as."""

    DEFAULT_CSS = "Dispatcher { display: none; }"

    def __init__(self, layout: Layout, worker_id: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.repo = layout
        self.worker_id = worker_id

    @work(group="actions", exit_on_error=False)
    async def dispatch(self, name: str, keys: list[str], bulk: bool, skipped: int = 0) -> None:
        """Ask what `name` needs, then run it on `keys` (a bulk action confirms its count first)."""
        action = TABLE[name]
        if bulk and not await self.confirm_bulk(action.verb, name, keys, skipped):
            return
        answer: Any = True
        if action.ask is not None:
            answer = await action.ask(self, keys, bulk)
            if answer is None or answer is False:
                return
        if action.run is not None:
            await action.run(self, keys, answer)
            return
        assert action.call is not None
        outcome = await asyncio.to_thread(self._each, action.call, keys, answer)
        self.post_message(ActionDone(action.verb, outcome.done, outcome.failed, keys, outcome.select))

    def _each(self, call: Call, keys: list[str], answer: Any) -> Outcome:
        outcome = Outcome()
        for key in keys:
            try:
                res = call(self, key, answer)
            except GenjobError as exc:
                outcome.failed.append(str(exc))
            except OSError as exc:
                outcome.failed.append(f"{key[:12]}: {exc}")
            else:
                outcome.done.append(res if isinstance(res, str) else res.text)
                if isinstance(res, Done) and len(keys) == 1:
                    outcome.select = res.select
        return outcome

    async def ask(self, dialog: Any) -> Any:
        """Show `dialog` and wait for its answer."""
        return await self.app.push_screen_wait(dialog)

    async def confirm_bulk(self, verb: str, name: str, keys: list[str], skipped: int) -> bool:
        body = Text(f"{verb} {len(keys)} marked job(s)?\n", style="bold")
        if skipped:
            body.append(f"{skipped} other marked job(s) are skipped: {verb} does not apply to them\n")
        for key in keys[:LISTED]:
            body.append(f"  {key}\n", style="dim")
        if len(keys) > LISTED:
            body.append(f"  … and {len(keys) - LISTED} more\n", style="dim")
        return bool(await self.ask(ConfirmDialog(f"Bulk {verb}", body, yes=verb.capitalize(), danger=True)))

    def lease_ttl(self) -> float:
        try:
            return load_config(self.repo.config).policy.lease_ttl
        except GenjobError:
            return 120.0


# -- the actions ------------------------------------------------------------------------------
def _claim(d: Dispatcher, key: str, _: Any) -> str:
    ttl = d.lease_ttl()
    c = claim(d.repo, d.worker_id, key, ttl, pid=os.getpid())
    return f"claimed {key[:12]} (attempt {c.lease.token}, lease held by this board, ttl {ttl:g}s)"


async def _ask_reason(d: Dispatcher, keys: list[str], bulk: bool) -> str | None:
    body = Text(f"Reject {len(keys)} job(s)? " if bulk else f"Reject {keys[0]}? ")
    body.append("The receipt and outputs stay as evidence.", style="dim")
    return await d.ask(ReasonDialog("Reject", body))


def _reject(d: Dispatcher, key: str, reason: str) -> str:
    return f"rejected {key[:12]}: {reject(d.repo, key, reason).name}"


async def _ask_requeue(d: Dispatcher, keys: list[str], bulk: bool) -> bool:
    if bulk:
        return True
    body = Text(f"Put {keys[0]} back in the queue?\n", style="bold")
    body.append("Its worker is gone; the attempt is recorded and the job will run again.")
    return bool(await d.ask(ConfirmDialog("Requeue", body, yes="Requeue")))


def _requeue(d: Dispatcher, key: str, _: Any) -> str:
    requeue(d.repo, key)
    return f"requeued {key[:12]}"


def _replay(d: Dispatcher, key: str, _: Any) -> Done:
    res = replay(d.repo, key)
    note = "" if res.created else " (existed already)"
    return Done(f"replayed {key[:12]} as {res.key[:12]}{note}", select=res.key)


async def _ask_cancel(d: Dispatcher, keys: list[str], bulk: bool) -> bool:
    if bulk:
        return True
    body = Text(f"Cancel the running job {keys[0]}?\n", style="bold")
    body.append("The worker stops the generator and writes an aborted receipt.")
    return bool(await d.ask(ConfirmDialog("Cancel job", body, yes="Cancel job", danger=True)))


def _cancel(d: Dispatcher, key: str, _: Any) -> str:
    request_cancel(d.repo, key)
    return f"cancel requested for {key[:12]}: its worker ends it with an aborted receipt"


async def _ask_preflight(d: Dispatcher, keys: list[str], bulk: bool) -> bool | None:
    if bulk:
        return True
    from tui.dialogs.preflight import PreflightDialog

    try:
        p = await asyncio.to_thread(lambda: preflight(job_detail(d.repo, keys[0])))
    except GenjobError as exc:
        d.post_message(Say(str(exc), "error"))
        return None
    return await d.ask(PreflightDialog(p))


def _apply(d: Dispatcher, key: str, _: Any) -> str:
    res = apply_job(d.repo, key)
    if res.already:
        return f"{key[:12]}: applied already"
    return f"applied {key[:12]}: {len(res.changed)} file(s) changed"


async def _ask_host(d: Dispatcher, keys: list[str], bulk: bool) -> str | None:
    """The host to ship to: the only one, or the one picked (hosts are read off the loop)."""
    from tui.dialogs.host_picker import HostPicker

    if bulk:
        d.post_message(Say("ship one job at a time: unmark all (escape) and select one", "warning"))
        return None
    try:
        hosts = await asyncio.to_thread(lambda: load_config(d.repo.config).hosts)
    except GenjobError as exc:
        d.post_message(Say(str(exc), "error"))
        return None
    if len(hosts) > 1:
        return await d.ask(HostPicker(hosts))
    return next(iter(hosts), None) or "local"


async def _ship(d: Dispatcher, keys: list[str], host: str) -> None:
    from tui.dialogs.ship import ShipDialog

    await d.ask(ShipDialog(d.repo, keys[0], host, d.worker_id))
    d.post_message(ActionDone("ship", [], [], keys))


TABLE: dict[str, JobAction] = {
    "claim": JobAction("claim", call=_claim),
    "ship": JobAction("ship", ask=_ask_host, run=_ship),
    "apply": JobAction("approve", ask=_ask_preflight, call=_apply),
    "reject": JobAction("reject", ask=_ask_reason, call=_reject),
    "requeue": JobAction("requeue", ask=_ask_requeue, call=_requeue),
    "replay": JobAction("replay", call=_replay),
    "cancel": JobAction("cancel", ask=_ask_cancel, call=_cancel),
}
