"""What each key does to the jobs it is pressed on: one table from action to core call.

Every entry of `TABLE` says how an action asks (a confirm, a reason, a preflight, a
host) and which core call it makes for each key. `Dispatcher` runs an entry in an async
worker: dialogs are awaited with `push_screen_wait`, core calls run in a thread, and the
outcome comes back to the screen as an `ActionDone` message. Dialogs, and the core calls
that load pydantic, the config model or cryptography, are imported when first used, so
that the board's first frame does not wait for them.

The board is a worker too: a job it claims (`c`) is held by it, its lease heartbeated
while the board is open, until it ships it (`s`) or a stop (`ctrl+k`, or `genjob cancel`)
ends it with an aborted receipt. A ship is a run of the board's (`tui.services.runs`),
and so is a batch of marked jobs shipped together: its dialog only shows it, and hiding
the dialog leaves it running.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from rich.text import Text
from textual import on, work
from textual.widget import Widget

from core.errors import GenjobError
from core.model.lifecycle import ACTIONS, DISCARDABLE, State
from core.model.standing import Standing, approvable
from core.model.terminal import visible
from core.store.layout import Layout
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.quit import QuitChoice
from tui.dialogs.reason import ReasonDialog
from tui.messages import ActionDone, ChecksWanted, Held, Released, RunEnded, Say
from tui.services.check_runner import CheckRunner
from tui.services.runs import BoardBatch, BoardRun, batch_ended_line, drive, drive_batch, ended_line
from tui.text import counted

if TYPE_CHECKING:
    from textual.screen import Screen

    from core.store.config import Config
    from core.store.queue import Claim
    from tui.dialogs.preflight import Approval, TrustOwnKey

# What a dialog answers, as `Dispatcher.ask` returns it.
Answer = TypeVar("Answer")
# How many keys a bulk confirm lists before "… and N more".
LISTED = 12
# How often (s) the board looks at the claims it holds: cancel requests and heartbeats.
HOLD_CHECK = 1.0

# An action's question before it runs: the answer its core call needs, or None to stop.
Ask = Callable[["Dispatcher", list[str], bool], Awaitable[Any]]
# One key's core call, run in a thread: returns the line that reports it.
Call = Callable[["Dispatcher", str, Any], "str | Done"]
# An action that runs in a dialog of its own instead of key by key (shipping).
Run = Callable[["Dispatcher", list[str], Any], Awaitable[None]]
# A bulk action's own confirm instead of the count's: the marked jobs it runs on (None:
# none), told how many other marked jobs were skipped already.
Narrow = Callable[["Dispatcher", list[str], int], Awaitable["list[str] | None"]]


@dataclass(frozen=True)
class JobAction:
    verb: str
    ask: Ask | None = None
    call: Call | None = None
    run: Run | None = None
    narrow: Narrow | None = None


@dataclass(frozen=True)
class Done:
    """A key's report, and a job to put the cursor on (a replay's new job)."""

    text: str
    select: str | None = None


@dataclass
class Outcome:
    done: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    select: str | None = None


class Dispatcher(Widget):
    """Runs the board's actions and keeps the claims the board holds; renders nothing."""

    DEFAULT_CSS = "Dispatcher { display: none; }"

    def __init__(self, layout: Layout, worker_id: str, checks: CheckRunner, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.repo = layout
        self.worker_id = worker_id
        self.checks = checks
        # Jobs this board claimed and holds (its pid is in their lease), as last heartbeated;
        # a job being shipped is heartbeated by its ship instead. Changed on the loop only.
        self.held: dict[str, Claim] = {}
        self.shipping: set[str] = set()
        # The single-job ships this board runs, by key; a run leaves once it ended and no
        # dialog shows it.
        self.runs: dict[str, BoardRun] = {}
        # The batches this board ships, by each of their keys; a batch leaves once its end
        # has been shown in its dialog.
        self.batches: dict[str, BoardBatch] = {}

    def on_mount(self) -> None:
        self.set_interval(HOLD_CHECK, self._keep_held)

    @work(group="actions", exit_on_error=False)
    async def dispatch(self, name: str, keys: list[str], bulk: bool, skipped: int = 0) -> None:
        """Ask what `name` needs, then run it on `keys` (a bulk action confirms its count first)."""
        action = TABLE[name]
        if name == "ship" and not bulk and keys[0] in self.runs:
            await self.show_run(self.runs[keys[0]])
            return
        if name == "ship" and not bulk and keys[0] in self.batches:
            await self.show_batch(self.batches[keys[0]])
            return
        if bulk and action.narrow is not None:
            narrowed = await action.narrow(self, keys, skipped)
            if not narrowed:
                return
            keys = narrowed
        elif bulk and not await self.confirm_bulk(action.verb, keys, skipped):
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

    async def ask(self, dialog: Screen[Answer]) -> Answer:
        """Show `dialog` and wait for its answer."""
        return await self.app.push_screen_wait(dialog)

    async def confirm_bulk(self, verb: str, keys: list[str], skipped: int) -> bool:
        body = Text(f"{verb.capitalize()} {counted(len(keys), 'marked job')}?\n", style="bold")
        if skipped:
            others = "1 other marked job is" if skipped == 1 else f"{skipped} other marked jobs are"
            body.append(f"{others} skipped: {verb} does not apply to them\n")
        for key in keys[:LISTED]:
            body.append(f"  {key}\n", style="dim")
        if len(keys) > LISTED:
            body.append(f"  … and {len(keys) - LISTED} more\n", style="dim")
        dialog = ConfirmDialog(f"Bulk {verb}", body, yes=verb.capitalize(), danger=True)
        return await self.ask(dialog)

    def lease_ttl(self) -> float:
        try:
            return _config(self.repo).policy.lease_ttl
        except GenjobError:
            return 120.0

    def holds(self, key: str) -> bool:
        """Whether this board claimed `key` and holds it still (so it may ship or stop it)."""
        return key in self.held

    # -- the runs this board ships -----------------------------------------------------------------
    def start_run(self, key: str, host: str | None) -> BoardRun:
        """Ship `key` as a run of the board's: it goes on whatever its dialog does."""
        run = BoardRun(key, host, self.held.get(key))
        self.runs[key] = run
        self.shipping.add(key)
        self.run_worker(self._drive(run), group="runs", exit_on_error=False)
        return run

    async def _drive(self, run: BoardRun) -> None:
        try:
            await drive(self.repo, run, self.worker_id)
        finally:
            run.ended.set()
            self.shipping.discard(run.key)
            self.held.pop(run.key, None)
            if not run.watched:
                self.runs.pop(run.key, None)
                if run.done:
                    self.post_message(Say(ended_line(run), "information" if run.succeeded else "warning"))
            self.post_message(RunEnded(run.key, tuple(run.results)))
            self.post_message(ActionDone("ship", [], [], [run.key]))

    async def show_run(self, run: BoardRun) -> None:
        """The run's dialog until it is hidden or closed; then its next step."""
        from tui.dialogs.ship import ShipDialog

        answer = await self.ask(ShipDialog(run))
        if run.done:
            self.runs.pop(run.key, None)
        if answer == "hidden":
            self.post_message(
                Say(f"{run.key[:12]}: the run goes on; s shows it again, ctrl+k stops it", title="ship")
            )
        elif answer == "approve":
            self.dispatch("apply", [run.key], False)

    def start_batch(self, keys: list[str], hosts: list[str] | None) -> BoardBatch:
        """Ship `keys` as one batch of the board's: it goes on whatever its dialog does."""
        batch = BoardBatch(keys, hosts, {k: self.held[k] for k in keys if k in self.held})
        self.batches.update(dict.fromkeys(keys, batch))
        self.shipping.update(keys)
        self.run_worker(self._drive_batch(batch), group="runs", exit_on_error=False)
        # The marks have done their work: `s` on a job of the batch now shows the batch.
        self.post_message(ActionDone("ship", [], [], keys))
        return batch

    async def _drive_batch(self, batch: BoardBatch) -> None:
        try:
            await drive_batch(self.repo, batch, self.worker_id)
        finally:
            batch.ended.set()
            self.shipping.difference_update(batch.keys)
            for key in batch.keys:
                self.held.pop(key, None)
            if batch.done and not batch.watched:
                line = batch_ended_line(batch)
                self.post_message(Say(line, "information" if batch.succeeded else "warning", "ship"))
            self.post_message(RunEnded(batch.keys[0], tuple(batch.results)))
            self.post_message(ActionDone("ship", [], [], batch.keys))

    async def show_batch(self, batch: BoardBatch) -> None:
        """The batch's dialog until it is hidden or closed; once its end was shown, the
        batch is forgotten."""
        from tui.dialogs.bulk_ship import BulkShipDialog

        answer = await self.ask(BulkShipDialog(batch))
        if batch.done:
            for key in batch.keys:
                if self.batches.get(key) is batch:
                    del self.batches[key]
        if answer == "hidden":
            self.post_message(
                Say(
                    f"{counted(len(batch.keys), 'job')}: the batch goes on; s on any of them shows it "
                    "again, ctrl+k stops it",
                    title="ship",
                )
            )

    def live_runs(self) -> list[BoardRun]:
        return [r for r in self.runs.values() if not r.ended.is_set()]

    def live_batches(self) -> list[BoardBatch]:
        return [b for b in dict.fromkeys(self.batches.values()) if not b.ended.is_set()]

    def in_flight(self, key: str) -> bool:
        """Whether this board ships `key` now, alone or in a batch."""
        run, batch = self.runs.get(key), self.batches.get(key)
        return (run is not None and not run.ended.is_set()) or (
            batch is not None and not batch.ended.is_set()
        )

    def running_keys(self) -> list[str]:
        """The jobs this board has in flight: its single runs, and each batch's running jobs."""
        return [*(r.key for r in self.live_runs()), *(k for b in self.live_batches() for k in b.running)]

    def waiting_keys(self) -> list[str]:
        """The jobs of this board's batches that wait for a free slot on a host."""
        return [k for b in self.live_batches() for k in b.waiting]

    def idle_claims(self) -> dict[str, Claim]:
        """The claims this board holds and is not shipping."""
        return {k: c for k, c in self.held.items() if k not in self.shipping}

    # -- quitting with jobs in hand ------------------------------------------------------------------
    @work(group="quit", exclusive=True, exit_on_error=False)
    async def quit_with(self, choice: QuitChoice) -> None:
        """Stop the runs or wait for them; give the idle claims back, or leave them held."""
        runs: list[BoardRun | BoardBatch] = [*self.live_runs(), *self.live_batches()]
        going = len(self.running_keys()) + (len(self.waiting_keys()) if choice == "wait" else 0)
        idle = self.idle_claims()
        if choice != "leave":
            failed = await asyncio.to_thread(self._release, idle)
            for key in idle:
                self.held.pop(key, None)
            for line in failed:
                self.post_message(Say(line, "error", "release"))
        if choice != "wait":
            for run in runs:
                run.stop()
        if runs:
            self.post_message(
                Say(f"quitting once {_runs(going)} ended; q again to leave them instead", title="quit")
            )
            await asyncio.gather(*(run.ended.wait() for run in runs))
        self.app.exit(message=left_behind(list(idle)) if choice == "leave" else None)

    def _release(self, claims: dict[str, Claim]) -> list[str]:
        from core.store.queue import release

        failed = []
        for key, c in claims.items():
            try:
                release(self.repo, key, c.lease.token, self.worker_id)
            except (GenjobError, OSError) as exc:
                failed.append(f"{key[:12]}: giving the claim back failed: {exc}")
        return failed

    @work(group="actions", exit_on_error=False)
    async def offer_merge(self, key: str) -> None:
        """`a` on a STALE job: its merge preflight, read off the loop. A clean merge is
        offered as "Merge and apply" (or a replay); one that conflicts, or cannot be made,
        shows why and offers the replay."""
        from core.read.preflight import merge_preflight
        from tui.dialogs.next_step import NextStepDialog
        from tui.dialogs.preflight import MergeDialog
        from tui.render import unmergeable_text

        try:
            p = await asyncio.to_thread(merge_preflight, self.repo, key)
        except GenjobError as exc:
            self.post_message(Say(str(exc), "error"))
            return
        if p.clean:
            answer = await self.ask(MergeDialog(p))
            if answer is not None:
                self.dispatch(answer, [key], False)
            return
        body = Text(f"{key} is STALE: the tree moved on since the job was minted.\n\n", style="bold")
        body.append_text(unmergeable_text(p))
        body.append(
            "\n\nApply writes only over the exact files the generator saw. Replay mints the same "
            "instruction again over the tree as it is now (a new job, queued); this one stays "
            "as it is, as evidence."
        )
        if await self.ask(NextStepDialog("Approve: the job is stale", body, "Replay", "R")):
            self.dispatch("replay", [key], False)

    # -- the claims this board holds -----------------------------------------------------------
    def _keep_held(self) -> None:
        idle = {k: c for k, c in self.held.items() if k not in self.shipping}
        if idle:
            self._tend(idle)

    @work(thread=True, group="held", exclusive=True, exit_on_error=False)
    def _tend(self, held: dict[str, Claim]) -> None:
        """Honour a cancel of a held job (an aborted receipt); heartbeat the others every
        third of their ttl; let go of a job whose lease is no longer ours."""
        from core.store.queue import cancel_requested, heartbeat
        from core.work.ship import abort_claim

        for key, c in held.items():
            try:
                if cancel_requested(self.repo, key):
                    abort_claim(self.repo, c, "cancelled by the operator", self.worker_id)
                    self.post_message(Released(key))
                    self.post_message(
                        ActionDone("cancel", [f"stopped {key[:12]}: aborted receipt"], [], [key])
                    )
                    continue
                now = time.time()
                if now - c.lease.heartbeat >= c.lease.ttl / 3:
                    if heartbeat(self.repo, key, c.lease.token, self.worker_id):
                        beaten = c.lease.model_copy(update={"heartbeat": now})
                        self.post_message(Held(dataclasses.replace(c, lease=beaten)))
                    else:
                        self.post_message(Released(key))
            except (GenjobError, OSError) as exc:
                self.post_message(Say(f"{key[:12]}: keeping the claim failed: {exc}", "error"))

    @on(ChecksWanted)
    def _checks_wanted(self, message: ChecksWanted) -> None:
        self.checks.start(message.key, message.names)

    @on(Held)
    def _held(self, message: Held) -> None:
        self.held[message.claim.key] = message.claim

    @on(Released)
    def _released(self, message: Released) -> None:
        self.held.pop(message.key, None)


def _runs(n: int) -> str:
    return f"{counted(n, 'run')} {'has' if n == 1 else 'have'}"


def left_behind(claims: list[str]) -> str:
    """What the board says as it quits leaving claims held."""
    lines = [
        f"genjob: left {counted(len(claims), 'job')} RUNNING: each turns ORPHANED once its lease lapses,",
        "then `genjob requeue KEY` (or another board's r) puts it back in the queue:",
    ]
    return "\n".join([*lines, *(f"  {k}" for k in claims)])


def _config(layout: Layout) -> Config:
    """The repository's config.toml; the config model (pydantic) loads on the first call,
    after the board's first frame."""
    from core.store.config import load_config

    return load_config(layout.config)


# -- the actions ------------------------------------------------------------------------------
def _claim(d: Dispatcher, key: str, _: Any) -> str:
    from core.plan.overlaps import replay_waiting
    from core.store.queue import claim

    ttl = d.lease_ttl()
    c = claim(d.repo, d.worker_id, key, ttl, pid=os.getpid(), replay=replay_waiting)
    d.post_message(Held(c))
    return f"claimed {key[:12]} (attempt {c.lease.token}); this board holds it: s ships it, ctrl+k stops it"


async def _ask_reason(d: Dispatcher, keys: list[str], bulk: bool) -> str | None:
    body = Text(f"Reject {counted(len(keys), 'job')}? " if bulk else f"Reject {keys[0]}? ")
    body.append("The receipt and outputs stay as evidence.", style="dim")
    return await d.ask(ReasonDialog("Reject", body))


def _reject(d: Dispatcher, key: str, reason: str) -> str:
    from core.store.queue import reject

    return f"rejected {key[:12]}: {reject(d.repo, key, reason).name}"


async def _ask_requeue(d: Dispatcher, keys: list[str], bulk: bool) -> bool:
    if bulk:
        return True
    body = Text(f"Put {keys[0]} back in the queue?\n", style="bold")
    body.append("Its worker is gone; the attempt is recorded and the job will run again.")
    return await d.ask(ConfirmDialog("Requeue", body, yes="Requeue"))


def _requeue(d: Dispatcher, key: str, _: Any) -> str:
    from core.store.queue import requeue

    cleanups = requeue(d.repo, key).cleanups
    return "; ".join([f"requeued {key[:12]}", *(c.line for c in cleanups)])


def _replay(d: Dispatcher, key: str, _: Any) -> Done:
    from core.plan.replay import replay

    res = replay(d.repo, key)
    note = "" if res.created else " (existed already)"
    return Done(f"replayed {key[:12]} as {res.key[:12]}{note}", select=res.key)


async def _ask_cancel(d: Dispatcher, keys: list[str], bulk: bool) -> frozenset[str] | None:
    """Confirm (one job), and say which of `keys` the board holds (it stops those itself)."""
    held = frozenset(k for k in keys if d.holds(k))
    if bulk:
        return held
    batch = d.batches.get(keys[0])
    if batch is not None and not batch.ended.is_set():
        from tui.dialogs.bulk_ship import stop_batch_confirm

        if await d.ask(stop_batch_confirm(batch)):
            batch.stop()
            d.post_message(Say(f"stopping the batch of {counted(len(batch.keys), 'job')}", title="stop"))
        return None
    run = d.runs.get(keys[0])
    body = Text(f"Stop the running job {keys[0]}?\n", style="bold")
    if run is not None:
        body.append("This board runs it: the runner stops the generator and it ends with an aborted receipt.")
    elif d.holds(keys[0]):
        body.append("This board holds it: it ends now with an aborted receipt, ready to replay.")
    else:
        body.append(
            "Its worker is asked to stop the generator and write an aborted receipt; the Lease tab "
            "shows the request until it does."
        )
    dialog = ConfirmDialog("Stop job", body, yes="Stop job", no="Keep running", danger=True)
    if not await d.ask(dialog):
        return None
    if run is not None:
        run.stop()
        d.post_message(Say(f"stopping {keys[0][:12]}: the runner stops the generator", title="stop"))
        return None
    return held


def _cancel(d: Dispatcher, key: str, held: frozenset[str]) -> str:
    from core.store.queue import request_cancel

    cleanups = request_cancel(d.repo, key).cleanups
    if cleanups:
        return "; ".join(
            [f"cancel requested for {key[:12]}, whose worker is gone", *(c.line for c in cleanups)]
        )
    if key in held:
        return f"stopping {key[:12]}: this board holds it and writes the aborted receipt"
    return f"cancel requested for {key[:12]}: its worker ends it with an aborted receipt"


async def _ask_preflight(d: Dispatcher, keys: list[str], bulk: bool) -> Approval | None:
    """A single job's preflight (read off the loop); a bulk approve commits by the config,
    in a git work tree (as the preflight offers a commit only there)."""
    from core.read.inspect_job import job_detail
    from core.read.preflight import preflight
    from tui.dialogs.preflight import Approval, PreflightDialog, TrustOwnKey

    if bulk:
        try:
            commit = (await asyncio.to_thread(_config, d.repo)).policy.commit_on_approve
        except GenjobError:
            commit = False
        if commit:
            from core.store.repo import is_git_work_tree

            commit = await asyncio.to_thread(is_git_work_tree, d.repo.root)
        return Approval(commit)
    if await asyncio.to_thread(_awaits_a_choice, d.repo, keys[0]):
        from tui.screens.candidates import CandidatesScreen

        chosen = await d.ask(CandidatesScreen(d.repo, keys[0]))
        return chosen if isinstance(chosen, Approval) else None
    while True:
        try:
            p = await asyncio.to_thread(lambda: preflight(d.repo, job_detail(d.repo, keys[0])))
        except GenjobError as exc:
            d.post_message(Say(str(exc), "error"))
            return None
        answer = await d.ask(PreflightDialog(p, d.repo.root, d.repo))
        if not isinstance(answer, TrustOwnKey):
            return answer if isinstance(answer, Approval) else None
        if not await _trust_own_key(d, answer):
            return None


async def _trust_own_key(d: Dispatcher, asked: TrustOwnKey) -> bool:
    """One confirm, then pin this machine's own worker key for the repository (the core
    finds the key itself: nothing the board read names it); whether it was pinned."""
    from core.store.signing import trust_own_worker_key

    body = Text()
    body.append("Pin this machine's own worker key for this repository?\n\n", style="bold")
    body.append(f"  {asked.fingerprint}\n  {visible(asked.path)}\n\n")
    body.append("Receipts it signs then verify here, as after: genjob trust <its .pub file>", style="dim")
    if not await d.ask(ConfirmDialog("Trust this machine's key", body, yes="Trust it")):
        return False
    try:
        dest, fp = await asyncio.to_thread(trust_own_worker_key, d.repo)
    except (GenjobError, OSError) as exc:
        d.post_message(Say(str(exc), "error"))
        return False
    d.post_message(Say(f"pinned {fp} ({dest.relative_to(d.repo.root)})"))
    return True


async def _approvable(d: Dispatcher, keys: list[str], skipped: int) -> list[str] | None:
    """Bulk approve: the marked jobs whose receipts verify and whose required checks passed,
    after one confirm that says how many pass, how many are left out and why."""
    try:
        standings = await asyncio.to_thread(_standings, d.repo, keys)
    except GenjobError as exc:
        d.post_message(Say(str(exc), "error"))
        return None
    ok, left = approvable(standings)
    marked = len(keys) + skipped
    body = Text()
    if ok:
        body.append(f"Approve {len(ok)} of {counted(marked, 'marked job')}: ", style="bold")
        body.append("their receipts verify and their required checks passed on these exact outputs.\n")
    else:
        body.append(f"None of the {counted(marked, 'marked job')} may be approved now.\n", style="bold")
    body.append("".join(f"  {key}\n" for key in ok[:LISTED]), style="dim")
    if len(ok) > LISTED:
        body.append(f"  … and {len(ok) - LISTED} more\n", style="dim")
    if left or skipped:
        body.append(f"\n{sum(map(len, left.values())) + skipped} left out:\n")
    if skipped:
        body.append(f"  {skipped}: not RECEIVED (approve is for RECEIVED jobs)\n", style="yellow")
    for why, which in left.items():
        body.append(f"  {len(which)}: {why}: ", style="yellow")
        more = " …" if len(which) > LISTED else ""
        body.append(" ".join(k[:12] for k in which[:LISTED]) + more + "\n", style="dim")
    if not ok:
        d.post_message(Say(body.plain.strip(), "warning", "bulk approve"))
        return None
    dialog = ConfirmDialog("Bulk approve", body, yes=f"Approve {len(ok)}", danger=True)
    return ok if await d.ask(dialog) else None


def _standings(repo: Layout, keys: list[str]) -> dict[str, Standing]:
    from core.review.check_status import receipt_standing

    config = _config(repo)
    return {key: receipt_standing(repo, key, config) for key in keys}


def _awaits_a_choice(layout: Layout, key: str) -> bool:
    """Whether `key` has best-of-N candidates and no receipt yet: approving it is choosing one."""
    from core.store import candidate_store

    return not layout.receipt(key).exists() and candidate_store.count(layout, key) > 0


def _apply(d: Dispatcher, key: str, approval: Approval) -> str:
    from core.review import candidates

    if approval.choose_only and approval.candidate is not None:
        choice = candidates.choose(d.repo, key, approval.candidate)
        names = [n for n in _config(d.repo).checks if n not in choice.carried]
        chose = f"chose candidate {approval.candidate} of {key[:12]}"
        if not names:
            return f"{chose}: its checks ran on these bytes already; approve applies it"
        d.post_message(ChecksWanted(key, names))
        return f"{chose}: its checks run now; approve applies it once they pass"
    if approval.candidate is not None:
        res = candidates.apply_choice(
            d.repo, key, approval.candidate, commit=approval.commit, protected=approval.protected
        )
        line = (
            f"chose candidate {approval.candidate} of {key[:12]} and applied it: {len(res.changed)} file(s)"
        )
        return line + (f", committed {res.commit[:12]}" if res.commit else "")
    res = candidates.apply_choice(d.repo, key, None, commit=approval.commit, protected=approval.protected)
    if res.already:
        return f"{key[:12]}: applied already"
    line = f"applied {key[:12]}: {len(res.changed)} file(s) changed"
    return line + (f", committed {res.commit[:12]}" if res.commit else "")


def _merge(d: Dispatcher, key: str, _: Any) -> str:
    """Merge a STALE receipt over the tree and apply it: run in a thread (the required checks
    run on the merged bytes first, with an event loop of their own)."""
    from core.review.merge import apply_merged

    res = apply_merged(d.repo, key)
    if res.already:
        return f"{key[:12]}: applied already"
    return f"merged and applied {key[:12]}: {len(res.changed)} file(s) changed"


def _discard(d: Dispatcher, key: str, _: Any) -> str:
    from core.review.discard import discard

    done = discard(d.repo, key)
    where = d.repo.log_dir(key).relative_to(d.repo.root)
    return f"discarded {key[:12]}: {len(done.moved)} file(s) kept as evidence in {where}/"


async def _ask_discard(d: Dispatcher, keys: list[str], bulk: bool) -> bool:
    if bulk:
        return True
    body = Text(f"Discard the INVALID job {keys[0]}?\n", style="bold")
    body.append(
        "Its files that do not parse move to .gen/logs/<key>/ as evidence; nothing is deleted, "
        "and what parses stays where it is."
    )
    return await d.ask(ConfirmDialog("Discard", body, yes="Discard", danger=True))


@dataclass(frozen=True)
class ShipPlan:
    """Where to ship: one host, or every host (each at its own concurrency)."""

    hosts: list[str] | None


async def _ask_host(d: Dispatcher, keys: list[str], bulk: bool) -> ShipPlan | None:
    """The host to ship to: the only one, or the one picked (hosts are read off the loop)."""
    from tui.dialogs.host_picker import EVERY_HOST, HostPicker

    try:
        hosts = await asyncio.to_thread(lambda: _config(d.repo).hosts)
    except GenjobError as exc:
        d.post_message(Say(str(exc), "error"))
        return None
    if len(hosts) <= 1:
        return ShipPlan([next(iter(hosts), None) or "local"])
    picked = await d.ask(HostPicker(hosts, every=bulk))
    if picked is None:
        return None
    return ShipPlan(list(hosts) if picked == EVERY_HOST else [picked])


async def _ship(d: Dispatcher, keys: list[str], plan: ShipPlan) -> None:
    """One job: a run of the board's, shown by its dialog; marked jobs: a batch of the
    board's, shown by the batch dialog."""
    if len(keys) == 1:
        await d.show_run(d.start_run(keys[0], plan.hosts[0] if plan.hosts else None))
        return
    fresh = [k for k in keys if not d.in_flight(k)]
    if len(fresh) < len(keys):
        d.post_message(
            Say(f"{len(keys) - len(fresh)} of the marked jobs ship on this board already", "warning")
        )
    if fresh:
        await d.show_batch(d.start_batch(fresh, plan.hosts))


async def _all_marked(d: Dispatcher, keys: list[str], skipped: int) -> list[str]:
    """No confirm: running or stopping checks changes nothing in the tree."""
    return keys


async def _run_checks(d: Dispatcher, keys: list[str], _: Any) -> None:
    """Run every configured check of each job again (`t`), in the board's check runner."""
    try:
        names = list((await asyncio.to_thread(_config, d.repo)).checks)
    except GenjobError as exc:
        d.post_message(Say(str(exc), "error"))
        return
    if not names:
        d.post_message(
            Say(
                'no checks configured: add a [checks.NAME] table with run = "..." to .gen/config.toml',
                "warning",
            )
        )
        return
    started = sum(len(d.checks.start(key, names)) for key in keys)
    running = len(keys) * len(names) - started
    note = f"; {running} running already" if running else ""
    d.post_message(Say(f"checks: {started} started on {counted(len(keys), 'job')}{note}", title="run checks"))


async def _stop_checks(d: Dispatcher, keys: list[str], _: Any) -> None:
    stopped = d.checks.stop(keys)
    d.post_message(
        Say(f"stopping {stopped} check(s): their sandboxes are killed, no record kept", title="stop checks")
    )


TABLE: dict[str, JobAction] = {
    "claim": JobAction("claim", call=_claim),
    "ship": JobAction("ship", ask=_ask_host, run=_ship),
    "apply": JobAction("approve", ask=_ask_preflight, call=_apply, narrow=_approvable),
    "checks": JobAction("run checks", run=_run_checks, narrow=_all_marked),
    "stop_checks": JobAction("stop checks", run=_stop_checks, narrow=_all_marked),
    "reject": JobAction("reject", ask=_ask_reason, call=_reject),
    "requeue": JobAction("requeue", ask=_ask_requeue, call=_requeue),
    "replay": JobAction("replay", call=_replay),
    "merge": JobAction("merge", call=_merge),
    "cancel": JobAction("cancel", ask=_ask_cancel, call=_cancel),
    "discard": JobAction("discard", ask=_ask_discard, call=_discard),
}


# The states each action is for: the lifecycle's rules, discarding, and checks (they run
# on a receipt not yet applied; any of this board's running checks can be stopped).
STATES_FOR: dict[str, frozenset[State]] = {
    **ACTIONS,
    "discard": DISCARDABLE,
    "merge": frozenset({State.STALE}),
    "checks": frozenset({State.RECEIVED}),
    "stop_checks": frozenset(State),
}


def may(d: Dispatcher, action: str, key: str, state: State) -> bool:
    """Whether `action` applies to a job in `state` here: its rule, and for a job this
    board holds, shipping it too; stopping checks, only where this board runs some. `s`
    on a job of a batch shows the batch (until its end was seen), `ctrl+k` stops it."""
    if action == "stop_checks":
        return d.checks.running(key)
    if action == "ship" and key in d.runs and not d.runs[key].ended.is_set():
        return True
    if action == "ship" and key in d.batches:
        return True
    if action == "cancel" and key in d.batches and not d.batches[key].ended.is_set():
        return True
    return state in STATES_FOR[action] or (action == "ship" and state is State.RUNNING and d.holds(key))
