"""The worker plane: claim a job, ship it to a generator host, commit a signed receipt.

Everything after a claim ends in a receipt, but for a run its host could not start (the
runner never said it had started: the host is unreachable, refuses the key, or cannot run
the runner): that is the host's fault, not the job's, so the job goes back to the queue,
byte for byte, with the host's error in its attempt record (`core.store.queue.give_back`),
at most MAX_HOST_FAILURES times. Otherwise a receipt: `ok` when the generator exited 0 in time and
everything it sent back passed the local validator; `rejected` when it failed or broke
the contract (wrote outside its paths, left a link, sent too much); `aborted` when it was
stopped (timeout, cancel, Ctrl-C, SIGTERM, a dropped connection, a lost lease). Only an
`ok` receipt carries outputs, so nothing half-received is ever applyable.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import BadInput, GenjobError
from core.model.canonical import canonical, read_bytes, sha256_bytes
from core.model.contract import ReceiptStatus
from core.model.paths import regular_file_inside
from core.remote.rules import TailBuffer
from core.review.host_sandbox import LocalSandbox
from core.review.verify import NOTHING_CHANGED, nothing_changed
from core.store import notify
from core.store.config import Config, Host, load_config
from core.store.events import actor, attempts, bounded, record_attempt, record_event
from core.store.evidence import keep
from core.store.layout import Layout
from core.store.queue import (
    HOST_FAILED,
    MAX_HOST_FAILURES,
    Claim,
    Claimer,
    Replayer,
    cancel_requested,
    give_back,
    heartbeat,
    host_failures,
)
from core.store.receipts import Committed, commit_receipt, make_receipt
from core.store.scheduler import STARTED
from core.store.signing import load_private_key, private_key_path
from core.store.tree import make_folder
from core.work.bundle import BundleError, ResultInfo
from core.work.fleet import SHIPPING, note_run, note_unstarted
from core.work.spend import OverBudget, check_budget, note_usage
from core.work.transport import CommandTransport, JobSpec, LocalTransport, SSHTransport, Transport, run_job
from core.work.transport.base import HostKeyError

OutputCallback = Callable[[bytes], None]
# How a run ended: its receipt's status, and why when it is not `ok`.
Ending = tuple[ReceiptStatus, str | None]
# How often a running job looks for `.gen/running/<key>.cancel` (`genjob cancel`).
CANCEL_POLL = 0.25
# How often (s) a running job's output tail is written to its log, for every board to tail.
LIVE_LOG_EVERY = 1.0


@dataclass(frozen=True)
class ShipResult:
    key: str
    host: str
    attempt: int
    status: ReceiptStatus
    reason: str | None
    won: bool  # False when the lease was lost and the receipt was kept aside
    receipt: Path
    outputs: dict[str, str] = field(default_factory=dict)
    candidate: int | None = None  # which candidate of a best-of-N batch this run was
    # An `ok` run whose every output equals its input (`core.review.verify.nothing_changed`).
    unchanged: bool = False
    # The host could not start the run: the job is back in the queue (`receipt` is its
    # queued file) and `reason` says what the host said.
    requeued: bool = False


def run_events(res: ShipResult) -> list[notify.Event]:
    """What a run that ended is worth telling: its receipt, and a host's failure (a
    `rejected` run: the generator or the transport failed; `aborted` is a stop asked for;
    a run the host could not start put the job back in the queue, with no receipt).
    A run whose lease was lost committed nothing: nothing to tell."""
    if res.requeued:
        return [notify.host_failed(res.key, res.host, res.attempt, res.reason)]
    if not res.won:
        return []
    events = [notify.receipt_arrived(res.key, res.status, host=res.host)]
    if res.status == "rejected":
        events.append(notify.host_failed(res.key, res.host, res.attempt, res.reason))
    return events


def make_transport(name: str, host: Host) -> Transport:
    if host.transport == "local":
        return LocalTransport(confine=LocalSandbox.of(host, name), pass_env=host.pass_env)
    if host.transport == "command":
        if not host.command:
            raise BadInput(f"config.toml: hosts.{name}: a command host needs command")
        return CommandTransport(host.command, python=host.python or "python3", mode=host.command_mode)
    if not (host.address and host.identity):
        raise BadInput(f"config.toml: hosts.{name}: an ssh host needs address and identity")
    return SSHTransport(
        host.address, host.port, host.identity, host.known_hosts, python=host.python or "python3"
    )


class Hosts:
    """The configured generator hosts, each with one transport reused across jobs."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._transports: dict[str, Transport] = {}
        self._slots: dict[str, asyncio.Semaphore] = {}

    def pick(self, name: str | None) -> str:
        held = self.config.held
        if held is not None and held.hosts and (name is None or name in held.hosts):
            raise BadInput(held.hint)
        if name is None:
            if not self.config.hosts:
                raise BadInput("config.toml: no [hosts.*] configured (genjob init writes `local`)")
            return "local" if "local" in self.config.hosts else next(iter(self.config.hosts))
        if name not in self.config.hosts:
            known = ", ".join(sorted(self.config.hosts)) or "none"
            raise BadInput(f"config.toml: no host named {name!r} (configured: {known})")
        return name

    def transport(self, name: str) -> Transport:
        if name not in self._transports:
            self._transports[name] = make_transport(name, self.config.hosts[name])
        return self._transports[name]

    def slot(self, name: str) -> asyncio.Semaphore:
        """Held by each run on host `name`: at most its `concurrency` run at once, however
        many jobs and candidates ask (one event loop's runs; a semaphore is bound to it)."""
        if name not in self._slots:
            self._slots[name] = asyncio.Semaphore(self.config.hosts[name].concurrency)
        return self._slots[name]

    async def close(self) -> None:
        for t in self._transports.values():
            with contextlib.suppress(Exception):
                await t.close()
        self._transports.clear()


def signing_key(config: Config) -> Ed25519PrivateKey | None:
    """The worker key; without one, only a policy without signatures may ship."""
    try:
        return load_private_key()
    except GenjobError:
        if config.policy.require_signature:
            raise GenjobError(
                f"{private_key_path()}: no worker key; run `genjob keygen` and `genjob trust` "
                "(policy requires signed receipts)"
            ) from None
        return None


def read_inputs(layout: Layout, claim: Claim) -> dict[str, bytes]:
    """The job's existing inputs, each checked against the hash it was minted with."""
    files = {}
    for rel in claim.job.allowed_paths:
        want = claim.job.input_digest(rel)
        st = regular_file_inside(layout.root, rel)
        if want is None:
            if st is not None:
                raise BadInput(f"{rel}: exists now, but the job creates it; replay the job")
            continue
        if st is None:
            raise BadInput(f"{rel}: deleted since the job was minted; replay the job")
        data = read_bytes(layout.root / rel, max(st.st_size, 1))
        if sha256_bytes(data) != want:
            raise BadInput(f"{rel}: changed since the job was minted; replay the job")
        files[rel] = data
    return files


def verdict(run: Run) -> Ending:
    """The receipt status and its reason, most decisive cause first. The reason may quote
    what the host sent (its violations, its error): it is cut as a recorded field is."""
    status, reason = _verdict(run)
    return status, None if reason is None else str(bounded(reason))


def judged(shipment: Shipment, run: Run) -> tuple[Ending, bool]:
    """The run's ending and whether it changed nothing; under `policy.refuse_no_change` an
    `ok` run that changed nothing ends `rejected`, saying so."""
    status, reason = verdict(run)
    same = status is ReceiptStatus.OK and run.info is not None
    same = same and nothing_changed(shipment.claim.job, run.info.outputs if run.info else {})
    if same and shipment.pool.config.policy.refuse_no_change:
        return (ReceiptStatus.REJECTED, f"{NOTHING_CHANGED} (policy.refuse_no_change)"), False
    return (status, reason), same


def _verdict(run: Run) -> Ending:
    info = run.info
    if run.stopped:
        return ReceiptStatus.ABORTED, run.stopped[0]
    if run.refused:
        return ReceiptStatus.REJECTED, run.refused
    if run.error is not None or info is None:
        return ReceiptStatus.ABORTED, run.error or "no result from the generator host"
    if info.timed_out:
        return ReceiptStatus.ABORTED, "the generator ran past its timeout and was killed"
    if info.cancelled:
        return ReceiptStatus.ABORTED, "the generator was cancelled"
    if info.error:
        return ReceiptStatus.ABORTED, info.error
    if info.violations:
        return ReceiptStatus.REJECTED, "; ".join(info.violations)
    if info.exit_code != 0:
        return ReceiptStatus.REJECTED, f"the generator exited with status {info.exit_code}"
    return ReceiptStatus.OK, None


async def ship(
    layout: Layout,
    key: str | None = None,
    host: str | None = None,
    on_output: OutputCallback | None = None,
    cancel: asyncio.Event | None = None,
    *,
    worker_id: str | None = None,
    hosts: Hosts | None = None,
    claimed: Claim | None = None,
    replay: Replayer | None = None,
) -> ShipResult:
    """Claim `key` (or take `claimed`), run it on `host`, and commit the receipt.

    Raises before the claim for what an operator must fix first (no worker key, unknown
    host); after the claim every outcome is a receipt, including cancellation of this
    coroutine, which commits an `aborted` receipt and then re-raises.
    """
    config = hosts.config if hosts else load_config(layout.config)
    pool = hosts or Hosts(config)
    name = pool.pick(host)
    key_pair = signing_key(config)
    worker = worker_id or actor()
    check_budget(layout, config, name, claimed.key if claimed is not None else key)
    try:
        claimer = Claimer(layout, worker, config.policy.lease_ttl, replay=replay)
        claim = claimed if claimed is not None else await asyncio.to_thread(claimer.claim, key)
        if key is None and claimed is None:
            await asyncio.to_thread(refuse_over_budget, layout, config, name, claim, worker)
        return await run_claimed(Shipment(layout, claim, name, pool, key_pair, worker), on_output, cancel)
    finally:
        if hosts is None:
            await pool.close()


@dataclass(frozen=True)
class Shipment:
    """One claimed job on its way to a host: what a run needs besides its callbacks."""

    layout: Layout
    claim: Claim
    host: str
    pool: Hosts
    signer: Ed25519PrivateKey | None
    worker: str

    @property
    def staging(self) -> Path:
        """Where the outputs arrive: a fresh folder inside `.gen/out/`, one per attempt."""
        return self.layout.out / f".tmp-{self.claim.key}-{self.claim.lease.token}"


@dataclass
class Run:
    """What one run found out, most decisive first in `verdict`."""

    stopped: list[str] = field(default_factory=list)
    info: ResultInfo | None = None
    error: str | None = None
    refused: str | None = None
    # Why the host could not start the run, when the runner never said it had started and
    # the worker did not stop it: the host's fault (see the module).
    unstarted: str | None = None


async def run_claimed(
    shipment: Shipment,
    on_output: OutputCallback | None = None,
    cancel: asyncio.Event | None = None,
    *,
    cancel_reason: str = "cancelled by the operator",
) -> ShipResult:
    """Run a claimed job on its host and commit its receipt; see `ship`.

    Setting `cancel` stops the run and ends it in an `aborted` receipt whose reason is
    `cancel_reason`; the result is returned as for any other outcome.
    """
    tail = TailBuffer(shipment.pool.config.limits.max_tail_bytes)
    shown = [on_output] if on_output is not None else []
    seen = [0]  # how many bytes of output have arrived

    def output(chunk: bytes) -> None:
        tail.add(chunk)
        seen[0] += len(chunk)
        for show in shown:
            try:
                show(chunk)
            except Exception:  # the caller's view of the output failing never touches the run
                shown.clear()

    run = Run()
    stop = asyncio.Event()
    shutil.rmtree(shipment.staging, ignore_errors=True)
    watcher = asyncio.create_task(watch(shipment, stop, cancel, cancel_reason, run.stopped))
    keeper = asyncio.create_task(keep_live(shipment, tail, seen, stop))
    interrupted: BaseException | None = None
    try:
        await attempt(shipment, shipment.staging, stop, output, run, tail)
    except asyncio.CancelledError as exc:
        run.stopped.append("interrupted (the worker was stopped)")
        interrupted = exc
    finally:
        stop.set()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        with contextlib.suppress(asyncio.CancelledError):
            await keeper  # it ends with `stop`, its last write done
    if run.unstarted is not None and not run.stopped and interrupted is None:
        back = await asyncio.shield(asyncio.to_thread(host_failed, shipment, run))
        if back is not None:
            return back
    ending, unchanged = judged(shipment, run)
    committed = await asyncio.shield(asyncio.to_thread(_commit, shipment, ending, run.info, bytes(tail)))
    if interrupted is not None:
        raise interrupted
    return ship_result(shipment, run, ending, unchanged=unchanged, won=committed.won, receipt=committed.path)


def host_failed(shipment: Shipment, run: Run) -> ShipResult | None:
    """A run its host could not start: the host's error goes to the fleet's notes, and the
    job back to the queue with it in its attempt record (the result says so). None when it
    is not put back (its lease was lost meanwhile, or this was the MAX_HOST_FAILURES-th such
    failure): then `run.error` says why and the run ends in an `aborted` receipt as others."""
    layout, claim, name = shipment.layout, shipment.claim, shipment.host
    said = f"attempt {claim.lease.token} on {name} did not start: {run.unstarted}"
    with contextlib.suppress(GenjobError, OSError):
        note_unstarted(layout, name, claim.key, claim.lease.token, f"did not start: {run.unstarted}")
    failures = host_failures(attempts(layout, claim.key)) + 1
    if failures < MAX_HOST_FAILURES:
        try:
            path = give_back(layout, claim.key, claim.lease.token, shipment.worker, name, str(run.unstarted))
        except (GenjobError, OSError) as exc:
            # Not ours to put back, or `.gen/` would not take it: the run ends in a receipt
            # (kept aside if the job moved), so the failure is never lost.
            run.error = f"{said}; it could not be put back in the queue: {exc}"
            return None
        why = f"{said}; back in the queue ({failures} of {MAX_HOST_FAILURES} such failures)"
        return ShipResult(
            claim.key,
            name,
            claim.lease.token,
            ReceiptStatus.ABORTED,
            str(bounded(why)),
            True,
            path,
            requeued=True,
        )
    record_attempt(
        layout,
        claim.key,
        HOST_FAILED,
        attempt=claim.lease.token,
        worker=shipment.worker,
        host=name,
        reason=run.unstarted,
    )
    run.error = (
        f"{said}; its hosts could not start it {failures} times, so it is not put back in the queue: "
        "fix the host (genjob hosts --probe), then replay the job"
    )
    return None


def ship_result(
    shipment: Shipment,
    run: Run,
    ending: Ending,
    *,
    unchanged: bool,
    won: bool,
    receipt: Path,
    candidate: int | None = None,
) -> ShipResult:
    """What a run (or one candidate's) came to, once its receipt is committed."""
    status, reason = ending
    outputs = dict(run.info.outputs) if run.info is not None and status is ReceiptStatus.OK else {}
    claim = shipment.claim
    return ShipResult(
        claim.key,
        shipment.host,
        claim.lease.token,
        status,
        reason,
        won,
        receipt,
        outputs,
        candidate=candidate,
        unchanged=unchanged,
    )


async def attempt(
    shipment: Shipment,
    dest: Path,
    stop: asyncio.Event,
    output: OutputCallback,
    run: Run,
    tail: TailBuffer,
    candidate: int | None = None,
) -> None:
    """Run the claimed job once on `shipment.host`, its outputs into the new folder
    `dest`, filling `run` with what happened; waits for a free slot on the host first.

    Setting `stop` stops the run. Raises only CancelledError: every other outcome is in
    `run`, for a receipt.
    """
    claim, host = shipment.claim, shipment.pool.config.hosts[shipment.host]
    try:
        make_folder(dest.parent, shipment.layout.gen)  # out/ itself may be gone (a fresh clone)
        async with shipment.pool.slot(shipment.host):
            if stop.is_set():
                return
            await asyncio.to_thread(_announce, shipment, candidate)
            spec = JobSpec(
                job_doc=await asyncio.to_thread(read_bytes, claim.path),
                instruction=claim.job.instruction,
                allowed_paths=list(claim.job.allowed_paths),
                files=functools.partial(read_inputs, shipment.layout, claim),
                generator=host.generator,
                timeout=host.timeout,
                limits=shipment.pool.config.limits,
                pass_env=tuple(host.pass_env),
            )
            transport = shipment.pool.transport(shipment.host)
            started = functools.partial(_started, shipment, candidate)
            outcome, run.info = await run_job(transport, spec, dest, output, stop, on_start=started)
        run.error = outcome.error
        if outcome.preamble:
            kept = await asyncio.to_thread(_keep_login_output, shipment, candidate, outcome.preamble)
            if kept is not None and run.error is not None and not outcome.hello:
                run.error += f"; what it printed is kept in {kept}"
        if run.error is not None and not outcome.marked and not stop.is_set():
            run.unstarted = run.error  # the runner never started: the host's fault, not the job's
        if outcome.stderr_tail and not len(tail):
            output(outcome.stderr_tail)
    except HostKeyError as exc:
        run.error = run.unstarted = str(exc)  # the host is not who it should be: it never ran the job
    except BundleError as exc:
        run.refused = f"refused what the generator sent back: {exc}"
    except GenjobError as exc:
        run.error = str(exc)
    except Exception as exc:  # after a claim, every outcome must still end in a receipt
        run.error = f"worker error: {type(exc).__name__}: {exc}"


async def _started(shipment: Shipment, candidate: int | None, facts: Mapping[str, str]) -> None:
    """Record that the run started and what its scheduler said (`core.store.scheduler`): a
    host's cleanup needs it once the worker is gone. A record that cannot be written costs
    only that."""
    claim = shipment.claim
    where = {"host": shipment.host} if candidate is None else {"host": shipment.host, "candidate": candidate}
    with contextlib.suppress(GenjobError, OSError):
        await asyncio.to_thread(
            record_attempt,
            shipment.layout,
            claim.key,
            STARTED,
            attempt=claim.lease.token,
            facts=facts,
            **where,
        )


def _keep_login_output(shipment: Shipment, candidate: int | None, preamble: bytes) -> str | None:
    """Keep what the host printed before the runner started (a login shell's banner) as
    `<stem>.login` in the job's evidence folder; where it is, relative to the repository,
    or None when it could not be kept (which the audit log says)."""
    layout, claim = shipment.layout, shipment.claim
    stem = f"attempt-{claim.lease.token}" + (f"-candidate-{candidate}" if candidate is not None else "")
    try:
        return str(keep(layout, claim.key, f"{stem}.login", preamble).relative_to(layout.root))
    except (GenjobError, OSError) as exc:
        with contextlib.suppress(GenjobError, OSError):
            record_event(layout, "evidence_not_kept", claim.key, attempt=claim.lease.token, reason=str(exc))
        return None


async def keep_live(shipment: Shipment, tail: TailBuffer, seen: list[int], stop: asyncio.Event) -> None:
    """Keep the run's output tail in `.gen/logs/<key>/attempt-<n>.log` while it runs, so that
    every board tails it and `genjob show` prints it, whoever ships the job (the board, `ship`,
    `worker`, another machine on the same queue). The tail is bounded (`limits.max_tail_bytes`)
    and rewritten whole, atomically, at most every LIVE_LOG_EVERY seconds once it has grown;
    the receipt's commit writes the last one. A failure to keep it never touches the run."""
    name = f"attempt-{shipment.claim.lease.token}.log"
    kept = 0
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), LIVE_LOG_EVERY)
        if seen[0] != kept and not stop.is_set():
            kept = seen[0]
            with contextlib.suppress(GenjobError, OSError):
                await asyncio.to_thread(keep, shipment.layout, shipment.claim.key, name, bytes(tail))


async def watch(
    shipment: Shipment, stop: asyncio.Event, cancel: asyncio.Event | None, cancel_reason: str, why: list[str]
) -> None:
    """Heartbeat the lease every third of its ttl, and look for a cancel request every
    CANCEL_POLL seconds; stop the run (noting why) on a lost lease or a cancel."""
    layout, claim = shipment.layout, shipment.claim
    loop = asyncio.get_running_loop()
    every = max(0.2, min(5.0, claim.lease.ttl / 3))
    beat_at = loop.time()
    while not stop.is_set():
        if cancel is not None and cancel.is_set():
            why.append(cancel_reason)
        elif await asyncio.to_thread(cancel_requested, layout, claim.key):
            why.append("cancelled by the operator (genjob cancel)")
        elif loop.time() >= beat_at:
            if not await asyncio.to_thread(heartbeat, layout, claim.key, claim.lease.token, shipment.worker):
                why.append("lease lost: the job was requeued or claimed by another worker")
            beat_at = loop.time() + every
        if why:
            stop.set()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_either(stop, cancel), min(CANCEL_POLL, every))


async def _either(a: asyncio.Event, b: asyncio.Event | None) -> None:
    waits = [asyncio.ensure_future(a.wait())]
    if b is not None:
        waits.append(asyncio.ensure_future(b.wait()))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def refuse_over_budget(layout: Layout, config: Config, name: str, claim: Claim, worker: str) -> None:
    """For a job claimed before its key was known: over its budget, it ends `aborted`
    with the budget's line, never run, and the OverBudget is raised."""
    try:
        check_budget(layout, config, name, claim.key)
    except OverBudget as exc:
        abort_claim(layout, claim, str(exc), worker)
        raise


def abort_claim(layout: Layout, claim: Claim, reason: str, worker: str) -> Committed:
    """End a claimed job that is not running anywhere with an `aborted` receipt.

    For a holder that never shipped its claim (a board, the demo's lease holder) when a
    cancel is asked for: the job ends FAILED, ready to replay, instead of turning ORPHANED.
    The receipt is signed when this machine has a worker key.
    """
    try:
        key_pair: Ed25519PrivateKey | None = load_private_key()
    except GenjobError:
        key_pair = None
    never_shipped = Shipment(layout, claim, "-", Hosts(Config()), key_pair, worker)
    return _commit(never_shipped, (ReceiptStatus.ABORTED, reason), None, b"")


def _commit(shipment: Shipment, ending: Ending, info: ResultInfo | None, output: bytes) -> Committed:
    """Keep the evidence, then publish the receipt (outputs only for `ok`).

    Evidence that cannot be kept (a log folder that is a link, a full disk) is reported
    in the audit log; it never keeps the receipt from being written.
    """
    layout, claim = shipment.layout, shipment.claim
    status, reason = ending
    note_cost(shipment, output)
    keep_evidence(shipment, f"attempt-{claim.lease.token}", output, run_summary(shipment, ending, info))
    outputs = dict(info.outputs) if info is not None and status is ReceiptStatus.OK else {}
    staged = shipment.staging
    if status is not ReceiptStatus.OK:
        shutil.rmtree(staged, ignore_errors=True)
    receipt = make_receipt(claim.job, status, outputs, shipment.worker)
    kept_outputs = staged if status is ReceiptStatus.OK and staged.exists() else None
    committed = commit_receipt(
        layout, claim.job, receipt, claim.lease.token, shipment.worker, kept_outputs, shipment.signer, reason
    )
    note_host(shipment, status, reason)
    return committed


def run_summary(shipment: Shipment, ending: Ending, info: ResultInfo | None) -> dict[str, object]:
    """What the evidence folder keeps about one run, beside its output."""
    status, reason = ending
    return {
        "attempt": shipment.claim.lease.token,
        "host": shipment.host,
        "worker": shipment.worker,
        "status": status,
        "reason": reason,
        "exit_code": info.exit_code if info else None,
        "violations": list(info.violations) if info else [],
    }


def keep_evidence(shipment: Shipment, stem: str, output: bytes, summary: dict[str, object]) -> None:
    """`<stem>.log` (the generator's output tail) and `<stem>.json` under `.gen/logs/<key>/`;
    a failure to keep them is recorded in the audit log, never raised."""
    layout, key = shipment.layout, shipment.claim.key
    try:
        keep(layout, key, f"{stem}.log", output)
        keep(layout, key, f"{stem}.json", canonical(bounded(summary)))
    except (GenjobError, OSError) as exc:
        with contextlib.suppress(GenjobError, OSError):
            record_event(
                layout, "evidence_not_kept", key, attempt=shipment.claim.lease.token, reason=str(exc)
            )


def _announce(shipment: Shipment, candidate: int | None) -> None:
    """Say which host this attempt (or this candidate of it) runs on: the fleet view
    counts runs from it."""
    claim = shipment.claim
    where = {"host": shipment.host} if candidate is None else {"host": shipment.host, "candidate": candidate}
    record_attempt(shipment.layout, claim.key, SHIPPING, attempt=claim.lease.token, **where)


def note_cost(shipment: Shipment, output: bytes, candidate: int | None = None) -> None:
    """Record what a preset host's run reported it used (`core.work.spend`); a record that
    cannot be written is noted in the audit log, never raised."""
    host = shipment.pool.config.hosts.get(shipment.host)
    if host is None:
        return
    claim = shipment.claim
    try:
        note_usage(shipment.layout, claim.key, claim.lease.token, shipment.host, host, output, candidate)
    except (GenjobError, OSError) as exc:
        with contextlib.suppress(GenjobError, OSError):
            record_event(shipment.layout, "usage_not_kept", claim.key, reason=str(exc))


def note_host(shipment: Shipment, status: ReceiptStatus, reason: str | None) -> None:
    """Note the run's end for the fleet view; a note that cannot be written costs nothing else.
    A claim that never ran on a configured host (`abort_claim`) leaves no note."""
    if shipment.host not in shipment.pool.config.hosts:
        return
    with contextlib.suppress(GenjobError, OSError):
        note_run(
            shipment.layout, shipment.host, shipment.claim.key, shipment.claim.lease.token, status, reason
        )
