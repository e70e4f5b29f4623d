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

import dataclasses
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from core.errors import BadInput, NotFound, Stale, VerificationFailed, WrongState
from core.model.canonical import canonical, loads_strict, read_bytes
from core.model.contract import ReceiptStatus
from core.model.models import Job, Receipt, receipt_from_bytes
from core.model.standing import CheckStatus
from core.read.inspect_job import DiffStatus, FileDiff, JobDetail, file_diff
from core.review.apply import Applied, apply_job, check_commit_ready
from core.review.checks import (
    ChecksRequired,
    check_statuses,
    read_record,
    stale_because,
    write_record,
)
from core.review.verify import ReceiptFiles, Verification, verify
from core.store.config import Config, check_candidate_count, load_config
from core.store.durable import atomic_write, create_exclusive, flocked, fsync_dir, move
from core.store.events import attempts, record_attempt, record_event
from core.store.evidence import set_aside
from core.store.layout import FOLDER_STATE, Layout
from core.store.lease import read_lease
from core.store.queue import check_key, holds_lease, locate
from core.store.tree import make_folder
from core.work.fleet import CANDIDATE_DONE

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

RECEIPT, SIGNATURE, RUN, OUT = "receipt.json", "receipt.sig", "run.json", "out"
# The attempt record naming the candidate being chosen, appended just before the receipt
# is written: it counts only while the receipt is that candidate's (`chosen`).
CHOSEN = "chosen"


@dataclass(frozen=True)
class Candidate:
    """One committed candidate as it is on disk. `receipt` is None when its receipt does
    not load (`error` says why); `run` is what the worker noted about the run."""

    key: str
    number: int
    path: Path
    receipt: Receipt | None
    error: str | None
    signed: bool
    run: dict[str, Any] = field(default_factory=dict)

    @property
    def files(self) -> ReceiptFiles:
        return ReceiptFiles(self.path / RECEIPT, self.path / SIGNATURE, self.path / OUT)

    @property
    def status(self) -> ReceiptStatus | Literal["invalid"]:
        """The receipt's status; "invalid" when the receipt does not load."""
        return self.receipt.status if self.receipt is not None else "invalid"

    @property
    def host(self) -> str | None:
        host = self.run.get("host")
        return host if isinstance(host, str) else None

    @property
    def attempt(self) -> int | None:
        attempt = self.run.get("attempt")
        return attempt if isinstance(attempt, int) else None

    @property
    def reason(self) -> str | None:
        reason = self.run.get("reason")
        return reason if isinstance(reason, str) else None


def numbers(layout: Layout, key: str) -> list[int]:
    """The numbers of the committed candidates of `key`, in order."""
    try:
        names = os.listdir(layout.candidates_of(key))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(int(n) for n in names if n.isdigit() and n == str(int(n)) and 0 < int(n) <= 10**6)


def count(layout: Layout, key: str) -> int:
    return len(numbers(layout, key))


def load(layout: Layout, key: str, number: int) -> Candidate:
    """Candidate `number` of `key`; NotFound when there is none. A receipt that does not
    load gives a Candidate with its error, never an exception."""
    path = layout.candidate(check_key(key), number)
    if not path.is_dir() or path.is_symlink():
        have = ", ".join(map(str, numbers(layout, key))) or "none"
        raise NotFound(f"{key}: no candidate {number} (candidates: {have})")
    receipt, error = None, None
    try:
        receipt = receipt_from_bytes(read_bytes(path / RECEIPT), str(path / RECEIPT))
    except BadInput as exc:
        error = str(exc)
    try:
        run = loads_strict(read_bytes(path / RUN, 64 * 1024), str(path / RUN))
    except BadInput:
        run = {}
    signed = os.path.lexists(path / SIGNATURE)
    return Candidate(key, number, path, receipt, error, signed, run if isinstance(run, dict) else {})


def load_all(layout: Layout, key: str) -> list[Candidate]:
    return [load(layout, key, n) for n in numbers(layout, key)]


def reserve(layout: Layout, key: str, how_many: int) -> list[int]:
    """The numbers a new batch of `how_many` takes: after every committed candidate."""
    check_candidate_count(how_many)
    base = max(numbers(layout, key), default=0)
    return list(range(base + 1, base + 1 + how_many))


def staging(layout: Layout, key: str, attempt: int, number: int) -> Path:
    """Where candidate `number` of attempt `attempt` is received (swept by `recover` once
    the attempt is over, like a single run's staging folder)."""
    return layout.out / f".tmp-{key}-{attempt}-c{number}"


@dataclass(frozen=True)
class CandidateCommitted:
    won: bool  # False when the lease was lost: the candidate was kept aside as evidence
    path: Path
    closed: bool  # this commit completed the batch: the lease is gone, the job RECEIVED


@dataclass(frozen=True)
class Holder:
    """The worker committing a candidate: its id and the fencing token of the lease it
    must still hold, and the key that signs the receipt (None: unsigned)."""

    worker: str
    token: int
    signer: Ed25519PrivateKey | None


def commit_candidate(
    layout: Layout,
    job: Job,
    number: int,
    batch: Sequence[int],
    receipt: Receipt,
    run: dict[str, Any],
    holder: Holder,
) -> CandidateCommitted:
    """Publish candidate `number` if `holder` still holds the job's lease.

    Its staging folder (`staging`) holds the outputs under `out/` (an ok candidate's;
    absent otherwise); the receipt, its signature and `run` are written beside them
    first, then the folder is renamed to `.gen/candidates/<key>/<number>/` under the
    state lock. When that completes `batch`, the lease goes too. A lost lease, or a
    receipt chosen meanwhile, keeps the folder aside under `.gen/logs/<key>/` instead.
    """
    from core.store.signing import sign  # cryptography: only where a receipt is signed

    signer, staged = holder.signer, staging(layout, job.key, holder.token, number)
    body = canonical(receipt.document())
    make_folder(staged, layout.gen)
    if receipt.status is not ReceiptStatus.OK:
        shutil.rmtree(staged / OUT, ignore_errors=True)
    if signer is not None:
        atomic_write(staged / SIGNATURE, sign(signer, body))
    atomic_write(staged / RUN, canonical(run))
    atomic_write(staged / RECEIPT, body)
    key = job.key
    with flocked(layout.lock):
        if not holds_lease(layout, key, holder.token, holder.worker) or layout.receipt(key).exists():
            return _keep_late(layout, key, number, holder.token, staged)
        final = _publish(layout, key, number, staged, receipt, run, holder)
        closed = all(layout.candidate(key, n).is_dir() for n in batch)
        if closed:
            _close_batch(layout, key, batch, holder)
    return CandidateCommitted(True, final, closed)


def _keep_late(layout: Layout, key: str, number: int, token: int, staged: Path) -> CandidateCommitted:
    """A candidate whose worker lost the lease, or that came after a choice: kept aside."""
    kept = set_aside(layout, key, staged, f"late-candidate-{number}-attempt-{token}", stamped=False)
    record_attempt(layout, key, "late_candidate", attempt=token, candidate=number, kept=kept.name)
    record_event(layout, "late_candidate", key, attempt=token, candidate=number)
    return CandidateCommitted(False, kept, False)


def _publish(
    layout: Layout, key: str, number: int, staged: Path, receipt: Receipt, run: dict[str, Any], holder: Holder
) -> Path:
    """Rename the staged candidate into `.gen/candidates/<key>/<number>/` and record it."""
    make_folder(layout.candidates_of(key), layout.gen)
    fsync_dir(layout.candidates)
    final = layout.candidate(key, number)
    move(staged, final)
    record_attempt(
        layout,
        key,
        CANDIDATE_DONE,
        attempt=holder.token,
        candidate=number,
        worker=holder.worker,
        status=receipt.status,
        reason=run.get("reason"),
        signed=holder.signer is not None,
    )
    record_event(layout, "candidate", key, candidate=number, status=receipt.status, worker=holder.worker)
    return final


def _close_batch(layout: Layout, key: str, batch: Sequence[int], holder: Holder) -> None:
    """Every candidate of the batch is in: the lease and any cancel request go, the job is RECEIVED."""
    layout.lease(key).unlink(missing_ok=True)
    layout.cancel_request(key).unlink(missing_ok=True)
    statuses = {n: load(layout, key, n).status for n in batch}
    record_attempt(
        layout, key, "batch_finished", attempt=holder.token, worker=holder.worker, candidates=statuses
    )
    ok = sum(1 for s in statuses.values() if s is ReceiptStatus.OK)
    record_event(layout, "received", key, candidates=len(batch), ok=ok, worker=holder.worker)


def verify_candidate(layout: Layout, job: Job, config: Config, candidate: Candidate) -> Verification:
    """Every check a receipt gets (`core.review.verify`), signature included, on the candidate's
    own receipt, signature and outputs."""
    return verify(layout, job, config, candidate.files)


def chosen(layout: Layout, key: str) -> int | None:
    """The candidate whose receipt is the job's receipt, if one was chosen: the last one
    a "chosen" attempt record names whose receipt is that receipt (two candidates may
    hold the same bytes), else the first whose receipt is."""
    try:
        current = read_bytes(layout.receipt(key))
    except BadInput:
        return None
    try:
        named = [r.get("candidate") for r in attempts(layout, key) if r.get("event") == CHOSEN]
    except BadInput:
        named = []
    order = [n for n in reversed(named) if isinstance(n, int)] + numbers(layout, key)
    for n in order:
        try:
            if read_bytes(layout.candidate(key, n) / RECEIPT) == current:
                return n
        except BadInput:
            continue
    return None


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
                f"{key}: is {FOLDER_STATE[loc.folder]} with {which} receipt; candidate {number} "
                "can no longer be chosen"
            )
        if loc.folder != "running":
            raise WrongState(
                f"{key}: is {FOLDER_STATE[loc.folder]}; a candidate is chosen for a RECEIVED job"
            )
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
    else:
        layout.signature(key).unlink(missing_ok=True)
    record_attempt(layout, key, CHOSEN, candidate=candidate.number)
    if not create_exclusive(layout.receipt(key), read_bytes(candidate.files.receipt)):
        raise WrongState(f"{key}: a receipt appeared while the candidate was chosen")


def apply_choice(
    layout: Layout, key: str, number: int | None, commit: bool = False, *, protected: bool = False
) -> Applied:
    """`genjob apply KEY [--candidate N]`: choose `number` first when given; refuse, with
    the way on, a job whose candidates wait for a choice. `protected` as `apply_job`'s."""
    if number is not None:
        if commit:
            check_commit_ready(layout)  # or the choice would be made and the commit refused
        choose(layout, key, number)
        try:
            return apply_job(layout, key, commit=commit, protected=protected)
        except ChecksRequired as exc:
            # The choice stands: checks run on the job's chosen receipt, not on a candidate.
            raise ChecksRequired(f"chose candidate {number} as the job's receipt; {exc}") from exc
    elif not layout.receipt(check_key(key)).exists() and (have := count(layout, key)):
        raise WrongState(
            f"{key}: has {have} candidate(s) and none is chosen; `genjob candidates {key}` compares "
            f"them and `genjob apply {key} --candidate N` applies one"
        )
    return apply_job(layout, key, commit=commit, protected=protected)


@dataclass(frozen=True)
class CandidateView:
    """One candidate as the operator compares it: where it ran, how it ended, whether
    it verifies (and its signer), and the size of its change against the base."""

    number: int
    host: str | None
    attempt: int | None
    status: ReceiptStatus | Literal["invalid"]
    reason: str | None
    ok: bool
    failures: tuple[str, ...]
    signer: str | None
    signed: bool
    files: int
    added: int
    removed: int
    chosen: bool
    checks: tuple[CheckStatus, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__, failures=list(self.failures), checks=[c.to_dict() for c in self.checks])


def views(layout: Layout, key: str, config: Config | None = None) -> list[CandidateView]:
    """Every candidate of `key`, verified and measured, in number order."""
    config = config or load_config(layout.config)
    job = locate(layout, key).job
    picked = chosen(layout, key)
    out = []
    for c in load_all(layout, key):
        v = verify_candidate(layout, job, config, c)
        diffs = diff(layout, c) if c.receipt is not None and c.status is ReceiptStatus.OK else []
        out.append(
            CandidateView(
                number=c.number,
                host=c.host,
                attempt=c.attempt,
                status=c.status,
                reason=c.reason or c.error,
                ok=v.ok,
                failures=tuple(f"{x.name}: {x.detail}" for x in v.failures),
                signer=v.signer,
                signed=c.signed,
                files=sum(1 for d in diffs if d.status is not DiffStatus.UNCHANGED),
                added=sum(d.added for d in diffs),
                removed=sum(d.removed for d in diffs),
                chosen=picked == c.number,
                checks=tuple(check_statuses(layout, job, config, v, c.number)),
            )
        )
    return out


def diff(layout: Layout, candidate: Candidate, against: Candidate | None = None) -> list[FileDiff]:
    """What candidate would change: against the tree (the base), or against another
    candidate's outputs (a path only one of them has counts as new or missing)."""
    signed = candidate.receipt.outputs if candidate.receipt else {}
    mine = set(signed)
    if against is None:
        return [file_diff(layout.root, candidate.files.out, rel, signed[rel]) for rel in sorted(mine)]
    theirs = set(against.receipt.outputs) if against.receipt else set()
    return [file_diff(against.files.out, candidate.files.out, rel) for rel in sorted(mine | theirs)]


def candidate_detail(layout: Layout, detail: JobDetail, number: int) -> JobDetail:
    """`detail` (the job's) as if candidate `number` were its receipt: that candidate's
    verification and diffs against the tree, for the approve preflight."""
    candidate = load(layout, detail.row.key, number)
    if detail.located is None:
        raise NotFound(f"{detail.row.key}: no job document to check candidate {number} against")
    config = load_config(layout.config)
    v = verify_candidate(layout, detail.located.job, config, candidate)
    checks = check_statuses(layout, detail.located.job, config, v, number)
    return dataclasses.replace(detail, verification=v, diffs=diff(layout, candidate), checks=checks)
