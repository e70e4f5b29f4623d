"""Best-of-N shipping: one claim, N runs of the job in parallel, one candidate each.

The N runs share the claim and its lease: one watcher heartbeats it and looks for a
cancel, which stops every candidate. Each run is an ordinary attempt on its host (within
the host's concurrency) and ends in its own signed receipt, committed as a candidate
(`core.review.candidates`) under the attempt's fencing token; the last one in closes the batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import time
from collections.abc import Callable, Sequence

from core.errors import GenjobError
from core.model.contract import ReceiptStatus
from core.remote.rules import TailBuffer
from core.store.candidate_store import OUT, CandidateCommitted, Holder, commit_candidate, reserve, staging
from core.store.config import candidate_hosts, load_config
from core.store.events import actor, record_attempt
from core.store.layout import Layout
from core.store.queue import Claim, Claimer, Replayer
from core.store.receipts import make_receipt
from core.store.tree import make_folder
from core.work.bundle import ResultInfo
from core.work.ship import (
    Ending,
    Hosts,
    Run,
    Shipment,
    ShipResult,
    attempt,
    judged,
    keep_evidence,
    note_cost,
    note_host,
    run_summary,
    ship_result,
    signing_key,
    watch,
)

# Called as each candidate ends, with its result.
OnCandidate = Callable[[ShipResult], None]


@dataclasses.dataclass(frozen=True)
class CandidateRequest:
    """What `ship_candidates` runs: the job (`key`, or the claim already made on it), the
    hosts named for it and how many candidates (None: the configured number)."""

    key: str | None
    host_names: Sequence[str]
    how_many: int | None = None
    claimed: Claim | None = None


async def ship_candidates(
    layout: Layout,
    request: CandidateRequest,
    cancel: asyncio.Event | None = None,
    *,
    worker_id: str | None = None,
    hosts: Hosts | None = None,
    on_candidate: OnCandidate | None = None,
    replay: Replayer | None = None,
) -> list[ShipResult]:
    """Claim the requested job (or take its claim) and run it as candidates over the
    hosts named; see `candidate_hosts` for how many and where. Raises before the claim
    for what an operator must fix first; after it, every candidate ends in a receipt.
    `replay`: how a serialized job whose inputs moved is minted again before its claim."""
    config = hosts.config if hosts else load_config(layout.config)
    pool = hosts or Hosts(config)
    names = [pool.pick(n) for n in request.host_names] or [pool.pick(None)]
    spread = candidate_hosts(config, names, request.how_many)
    key_pair = signing_key(config)
    worker = worker_id or actor()
    try:
        claim = request.claimed
        if claim is None:
            claimer = Claimer(layout, worker, config.policy.lease_ttl, replay=replay)
            claim = await asyncio.to_thread(claimer.claim, request.key)
        shipment = Shipment(layout, claim, spread[0], pool, key_pair, worker)
        return await run_candidates(shipment, spread, cancel, on_candidate=on_candidate)
    finally:
        if hosts is None:
            await pool.close()


async def run_candidates(
    shipment: Shipment,
    spread: Sequence[str],
    cancel: asyncio.Event | None = None,
    *,
    cancel_reason: str = "cancelled by the operator",
    on_candidate: OnCandidate | None = None,
) -> list[ShipResult]:
    """Run the claimed job once on each host of `spread`, in parallel, each run a
    candidate; returns their results in candidate order.

    A cancel (the event, `genjob cancel`, a lost lease) stops every run still going and
    each ends in an `aborted` candidate. Cancelled itself, it commits every candidate as
    aborted and re-raises.
    """
    layout, claim = shipment.layout, shipment.claim
    batch = await asyncio.to_thread(reserve, layout, claim.key, len(spread))
    await asyncio.to_thread(
        record_attempt,
        layout,
        claim.key,
        "candidates",
        attempt=claim.lease.token,
        candidates=batch,
        hosts=list(spread),
    )
    stop = asyncio.Event()
    why: list[str] = []  # shared: a stop ends every candidate still running, for one reason
    watcher = asyncio.create_task(watch(shipment, stop, cancel, cancel_reason, why))

    async def one(number: int, host: str) -> ShipResult:
        res = await _candidate(dataclasses.replace(shipment, host=host), number, batch, stop, why)
        if on_candidate is not None:
            on_candidate(res)
        return res

    runs = [asyncio.ensure_future(one(n, h)) for n, h in zip(batch, spread, strict=True)]
    try:
        await asyncio.wait(runs)
    except asyncio.CancelledError:
        # Each run commits its aborted candidate when cancelled, then re-raises.
        for run in runs:
            run.cancel()
        await asyncio.wait(runs)
        raise
    finally:
        stop.set()
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    return [run.result() for run in runs]


async def _candidate(
    shipment: Shipment, number: int, batch: Sequence[int], stop: asyncio.Event, why: list[str]
) -> ShipResult:
    """One candidate: run, then commit whatever happened as its receipt."""
    claim = shipment.claim
    tail = TailBuffer(shipment.pool.config.limits.max_tail_bytes)
    folder = staging(shipment.layout, claim.key, claim.lease.token, number)
    shutil.rmtree(folder, ignore_errors=True)
    run = Run(stopped=why)
    interrupted: BaseException | None = None
    try:
        make_folder(folder, shipment.layout.gen)
        await attempt(shipment, folder / OUT, stop, tail.add, run, tail, candidate=number)
    except asyncio.CancelledError as exc:
        why.append("interrupted (the worker was stopped)")
        interrupted = exc
    except (OSError, GenjobError) as exc:
        run.error = f"cannot stage candidate {number}: {exc}"
    ending, unchanged = judged(shipment, run)
    committed = await asyncio.shield(
        asyncio.to_thread(_commit, shipment, number, batch, ending, run.info, bytes(tail))
    )
    if interrupted is not None:
        raise interrupted
    return ship_result(
        shipment,
        run,
        ending,
        unchanged=unchanged,
        won=committed.won,
        receipt=committed.path,
        candidate=number,
    )


def _commit(
    shipment: Shipment,
    number: int,
    batch: Sequence[int],
    ending: Ending,
    info: ResultInfo | None,
    output: bytes,
) -> CandidateCommitted:
    """Keep the run's evidence, then commit the candidate (outputs only for `ok`)."""
    layout, claim = shipment.layout, shipment.claim
    status, reason = ending
    summary = {**run_summary(shipment, ending, info), "candidate": number}
    note_cost(shipment, output, number)
    keep_evidence(shipment, f"attempt-{claim.lease.token}-candidate-{number}", output, summary)
    outputs = dict(info.outputs) if info is not None and status is ReceiptStatus.OK else {}
    receipt = make_receipt(claim.job, status, outputs, shipment.worker)
    run = {**summary, "at": time.time()}
    holder = Holder(shipment.worker, claim.lease.token, shipment.signer)
    committed = commit_candidate(layout, claim.job, number, batch, receipt, run, holder)
    note_host(shipment, status, reason)
    return committed
