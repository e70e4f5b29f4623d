"""Best-of-N candidates on disk: each in `.gen/candidates/<key>/<n>/` with its receipt,
signature, run notes and outputs; committed one by one under the job's lease, listed,
loaded, and which one was chosen.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from core.errors import BadInput, NotFound
from core.model.canonical import canonical, loads_strict, read_bytes
from core.model.contract import ReceiptStatus
from core.model.models import Job, Receipt, receipt_from_bytes
from core.store import queue, receipts
from core.store.config import check_candidate_count
from core.store.durable import atomic_write, flocked, fsync_dir, move
from core.store.events import attempts, record_attempt, record_event
from core.store.evidence import set_aside
from core.store.layout import Layout
from core.store.tree import make_folder

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


# The attempt record naming the candidate being chosen, appended just before the receipt
# is written: it counts only while the receipt is that candidate's (`chosen`).
# The attempt record of a candidate that finished (`core.work.fleet` counts runs by it).
CANDIDATE_DONE = "candidate_finished"
RECEIPT, SIGNATURE, RUN, OUT = "receipt.json", "receipt.sig", "run.json", "out"
SSH_SIGNATURE = "receipt.json.sshsig"  # the receipt's OpenSSH signature (`core.model.sshsig`)
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
    def files(self) -> receipts.ReceiptFiles:
        return receipts.ReceiptFiles(self.path / RECEIPT, self.path / SIGNATURE, self.path / OUT)

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
    path = layout.candidate(queue.check_key(key), number)
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
    from core.store.signing import sign_receipt  # cryptography: only where a receipt is signed

    signer, staged = holder.signer, staging(layout, job.key, holder.token, number)
    body = canonical(receipt.document())
    make_folder(staged, layout.gen)
    if receipt.status is not ReceiptStatus.OK:
        shutil.rmtree(staged / OUT, ignore_errors=True)
    if signer is not None:
        sig, ssh_sig = sign_receipt(signer, body)
        atomic_write(staged / SIGNATURE, sig)
        atomic_write(staged / SSH_SIGNATURE, ssh_sig)
    atomic_write(staged / RUN, canonical(run))
    atomic_write(staged / RECEIPT, body)
    key = job.key
    with flocked(layout.lock):
        if not queue.holds_lease(layout, key, holder.token, holder.worker) or layout.receipt(key).exists():
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
