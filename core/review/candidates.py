"""Best-of-N candidates: several attempts of one job, each with its own signed receipt.

On disk, beside the v1 layout, which a seed-compatible reader sees unchanged until a
candidate is chosen:

    .gen/candidates/<key>/<n>/receipt.json   candidate n's receipt (the six v1 fields)
    .gen/candidates/<key>/<n>/receipt.sig    its detached signature
    .gen/candidates/<key>/<n>/run.json       where and how it ran: operational, unsigned
    .gen/candidates/<key>/<n>/out/<path>     its outputs (an `ok` candidate's only)

A candidate is staged in `.gen/out/.tmp-<key>-<attempt>-c<n>/` and committed by one
rename under the state lock while its worker still holds the job's lease with the
attempt's fencing token; the commit that completes the batch also removes the lease,
and the job is RECEIVED with its count. A worker killed mid-batch leaves the candidates
it committed, whole, and an ORPHANED job that `requeue` makes replayable; its staging
folders are swept by `recover`.

Choosing candidate n writes the v1 receipt: its outputs to `.gen/out/<digest>/`, its
signature, then `receipts/<key>.json` last. That file is the commit point: before it
nothing is chosen, after it the job is an ordinary received job, and `apply` finishes.
The candidates stay where they are, as evidence.

Checks run on a candidate as on a receipt (`core.review.checks`, `candidate=n`), their records
in `.gen/checks/<key>/candidate-<n>/`, bound to that candidate's outputs. Choosing a
candidate carries each of its records still fresh for its bytes to the job's record
place, where they speak for the chosen receipt, whose bytes they are.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass

from core.errors import BadInput, Stale, VerificationFailed, WrongState
from core.model.canonical import read_bytes
from core.model.models import Job, check_key
from core.review.apply import Applied
from core.review.apply_job import apply_job
from core.review.check_status import ChecksRequired, stale_because
from core.review.commit import check_commit_ready
from core.review.verify import Verification, verify_candidate
from core.store.candidate_store import CHOSEN, SSH_SIGNATURE, Candidate, chosen, count, load, staging
from core.store.check_records import read_record, write_record
from core.store.config import Config, load_config
from core.store.durable import atomic_write, create_exclusive, flocked, move
from core.store.events import record_attempt, record_event
from core.store.evidence import set_aside
from core.store.job_state import said_state
from core.store.layout import Layout
from core.store.lease import read_lease
from core.store.queue import locate
from core.store.tree import make_folder


@dataclass(frozen=True)
class Choice:
    key: str
    number: int
    already: bool
    carried: tuple[str, ...] = ()  # the checks whose fresh records came with the candidate


def choose(layout: Layout, key: str, number: int, config: Config | None = None) -> Choice:
    """Make candidate `number` the job's receipt, after it verifies (signature included).

    Only a RECEIVED job with no receipt yet can be given one: its batch is over, nothing
    else was chosen. Choosing the candidate that is already the receipt is a no-op.
    """
    check_key(key)
    config = config or load_config(layout.config)
    with flocked(layout.lock):
        loc = locate(layout, key)
        candidate = load(layout, key, number)
        if layout.receipt(key).exists():
            picked = chosen(layout, key)
            if picked == number:
                return Choice(key, number, True)
            which = f"candidate {picked}" if picked else "a single run's"
            raise WrongState(
                f"{key}: is {said_state(layout, key)} with {which} receipt; candidate {number} "
                "can no longer be chosen"
            )
        if loc.folder != "running":
            raise WrongState(f"{key}: is {said_state(layout, key)}; a candidate is chosen for a RECEIVED job")
        _require_batch_over(layout, key)
        v = verify_candidate(layout, loc.job, config, candidate)
        if not v.ok:
            failed = "; ".join(f"{c.name}: {c.detail}" for c in v.failures)
            error = Stale if v.only_base_failed() else VerificationFailed
            raise error(f"{key}: candidate {number} does not verify ({failed})")
        _promote(layout, loc.job, candidate)
        record_event(layout, "chosen", key, candidate=number, status=candidate.status)
        carried = _carry_checks(layout, loc.job, config, number, v)
    return Choice(key, number, False, carried)


def _carry_checks(layout: Layout, job: Job, config: Config, number: int, v: Verification) -> tuple[str, ...]:
    """Copy candidate `number`'s check records that are fresh for its bytes (judged by
    `stale_because` against `v`, its verification just now) to the job's record place:
    the chosen receipt is those bytes. A job record already fresh for them is kept; a
    record that does not load is left behind (the check is then not run, as before)."""
    carried = []
    for name, check in config.checks.items():
        try:
            record = read_record(layout, job.key, name, number)
            if record is None or stale_because(record, job, check, v) is not None:
                continue
            mine = read_record(layout, job.key, name)
        except BadInput:
            continue
        if mine is not None and stale_because(mine, job, check, v) is None:
            continue
        write_record(layout, record)
        carried.append(name)
    if carried:
        record_event(layout, "checks_carried", job.key, candidate=number, checks=carried)
    return tuple(carried)


def _require_batch_over(layout: Layout, key: str) -> None:
    try:
        lease = read_lease(layout, key)
    except BadInput as exc:
        raise WrongState(f"{key}: its lease does not load ({exc}); `genjob recover` first") from None
    if lease is None:
        return
    if lease.fresh(time.time()):
        raise WrongState(f"{key}: is RUNNING: not every candidate is in yet (or `genjob cancel` it)")
    raise WrongState(
        f"{key}: is ORPHANED: its worker stopped before every candidate was in; "
        "`genjob requeue` it to run them again (the candidates kept stay choosable)"
    )


def _promote(layout: Layout, job: Job, candidate: Candidate) -> None:
    """Outputs, then signature, then the receipt (the commit point)."""
    key = job.key
    receipt = candidate.receipt
    if receipt is None:
        raise VerificationFailed(f"{key}: candidate {candidate.number}: {candidate.error}")
    final = layout.out_dir(job.digest)
    if os.path.lexists(final):
        set_aside(layout, key, final, "out-before-choice")
    if receipt.outputs:
        staged = staging(layout, key, candidate.attempt or 0, candidate.number)
        shutil.rmtree(staged, ignore_errors=True)
        for rel in sorted(receipt.outputs):
            dst = staged / rel
            make_folder(dst.parent, layout.gen)
            # A second name for the same bytes: nothing under out/ is ever written in place.
            os.link(candidate.files.out / rel, dst, follow_symlinks=False)
        move(staged, final)
    make_folder(layout.receipts, layout.gen)
    if candidate.signed:
        atomic_write(layout.signature(key), read_bytes(candidate.files.signature, 16 * 1024))
        ssh_sig = candidate.path / SSH_SIGNATURE
        if os.path.lexists(ssh_sig):
            atomic_write(layout.ssh_signature(key), read_bytes(ssh_sig, 16 * 1024))
    else:
        layout.signature(key).unlink(missing_ok=True)
        layout.ssh_signature(key).unlink(missing_ok=True)
    record_attempt(layout, key, CHOSEN, candidate=candidate.number)
    if not create_exclusive(layout.receipt(key), read_bytes(candidate.files.receipt)):
        raise WrongState(f"{key}: a receipt appeared while the candidate was chosen")


def apply_choice(
    layout: Layout,
    key: str,
    number: int | None,
    commit: bool = False,
    *,
    protected: bool = False,
    sign: bool | None = None,
) -> Applied:
    """`genjob apply KEY [--candidate N]`: choose `number` first when given; refuse, with
    the way on, a job whose candidates wait for a choice. `protected` as `apply_job`'s."""
    if number is not None:
        if commit:
            check_commit_ready(layout, sign=bool(sign))  # or the choice would be made and the commit refused
        choose(layout, key, number)
        try:
            return apply_job(layout, key, commit=commit, protected=protected, sign=sign)
        except ChecksRequired as exc:
            # The choice stands: checks run on the job's chosen receipt, not on a candidate.
            raise ChecksRequired(f"chose candidate {number} as the job's receipt; {exc}") from exc
    elif not layout.receipt(check_key(key)).exists() and (have := count(layout, key)):
        raise WrongState(
            f"{key}: has {have} candidate(s) and none is chosen; `genjob candidates {key}` compares "
            f"them and `genjob apply {key} --candidate N` applies one"
        )
    return apply_job(layout, key, commit=commit, protected=protected, sign=sign)
