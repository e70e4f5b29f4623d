"""The lifecycle: a job's state is a pure function of what one snapshot of `.gen/` holds.

Stored states are where the job file is (queue, running, receipts, applied, rejected);
ORPHANED, FAILED, STALE, INVALID and INCONSISTENT are derived on every read, never
written, so a crash can never leave a "ghost running" job behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from core.model.contract import ReceiptStatus
from core.model.freshness import LeaseState


class State(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    ORPHANED = "ORPHANED"
    RECEIVED = "RECEIVED"
    FAILED = "FAILED"
    STALE = "STALE"
    APPLIED = "APPLIED"
    REJECTED = "REJECTED"
    INVALID = "INVALID"
    INCONSISTENT = "INCONSISTENT"


# The order states are shown in: what needs an operator first.
STATE_ORDER = (
    State.INCONSISTENT,
    State.INVALID,
    State.ORPHANED,
    State.RECEIVED,
    State.STALE,
    State.FAILED,
    State.RUNNING,
    State.QUEUED,
    State.APPLIED,
    State.REJECTED,
)


# A running job with candidates and no lease file: its batch closed (the lease goes with
# the last candidate in), however recently it was claimed.
CLOSED = frozenset({LeaseState.MISSING, LeaseState.CLAIMING})


@dataclass(frozen=True, slots=True)
class Facts:
    """Everything the state depends on, as read from one snapshot.

    folders: the state folders holding `<key>.json` (queue, running, applied, rejected).
    lease: for a running job, its lease's state as `core.model.freshness` judges it.
    receipt: None, a `ReceiptStatus` word (plain text, as the listing reads it), or
      "invalid" (present but unreadable).
    base_fresh: for a queued job or an ok receipt, whether the tree still matches the
      job's inputs (None: not looked at).
    invalid: the parse error of the job file, if it has one.
    candidates: best-of-N (`core.review.candidates`): None when the job has none, else "ok" when
      one of them came back ok, "failed" when none did.
    """

    folders: frozenset[str]
    lease: LeaseState | None = None
    receipt: str | None = None
    base_fresh: bool | None = None
    invalid: str | None = None
    candidates: str | None = None


def derive_state(f: Facts) -> State:
    if f.invalid is not None:
        return State.INVALID
    if len(f.folders) > 1:
        return State.INCONSISTENT
    if "applied" in f.folders:
        return State.APPLIED
    if "rejected" in f.folders:
        return State.REJECTED
    if "queue" in f.folders:
        if f.receipt is not None:
            return State.INCONSISTENT
        # Inputs moved since the mint: shipping it would spend an attempt to learn that.
        return State.STALE if f.base_fresh is False else State.QUEUED
    if "running" in f.folders:
        if f.receipt is None and f.candidates is not None and f.lease in CLOSED:
            # The last candidate in removed the lease: the batch is over, none chosen yet.
            return State.RECEIVED if f.candidates == "ok" else State.FAILED
        if f.receipt is None:
            return State.RUNNING if f.lease is not None and f.lease.live else State.ORPHANED
        if f.receipt == "invalid":
            return State.INVALID
        if f.receipt != ReceiptStatus.OK:
            return State.FAILED
        return State.STALE if f.base_fresh is False else State.RECEIVED
    # A receipt with no job anywhere.
    return State.INCONSISTENT


def inconsistency_rule(folders: frozenset[str], has_receipt: bool) -> str:
    """The documented rule `genjob recover` applies to an inconsistent key."""
    if "applied" in folders:
        return "R2: applied wins; `genjob recover` removes the other copies"
    if "rejected" in folders:
        return "R3: rejected wins; `genjob recover` removes the queued or running copy"
    if {"queue", "running"} <= folders:
        return "R4: the claim happened, running wins; `genjob recover` removes the queued copy"
    if "queue" in folders and has_receipt:
        return "a receipt exists for a queued job: reject it, or claim and replay it"
    return "a receipt with no job: kept as evidence; nothing will apply it"


# Which operations each state admits; the CLI and the dashboard both ask here.
ACTIONS: dict[str, frozenset[State]] = {
    "claim": frozenset({State.QUEUED}),
    "ship": frozenset({State.QUEUED}),
    "cancel": frozenset({State.RUNNING}),
    "requeue": frozenset({State.ORPHANED}),
    "apply": frozenset({State.RECEIVED}),
    "reject": frozenset({State.QUEUED, State.ORPHANED, State.RECEIVED, State.FAILED, State.STALE}),
    "replay": frozenset({State.STALE, State.FAILED, State.REJECTED}),
}


# What `genjob discard` may set aside by hand: what none of the actions above apply to.
DISCARDABLE = frozenset({State.INVALID})


def allowed(action: str, state: State) -> bool:
    return state in ACTIONS[action]
