"""The one rule that says whether a running job's lease is live.

A worker that claims a job writes a lease beside it (`core.store.lease`): who holds it (worker,
host, pid), when it last heartbeated, and for how long a heartbeat counts (its ttl).
The listing, requeue, reject, `genjob show` and the board all judge a lease here, and get
a `LeaseState` with the reason for it.

A lease file is data that anyone who can write to `.gen/` may have written, carelessly or
on purpose, and it must never keep a job RUNNING forever:

- a heartbeat more than `CLOCK_SKEW` seconds ahead of this machine's clock proves nothing
  (the holder's clock is wrong, or the file lies): the lease is stale;
- a ttl over `MAX_TTL`, or one that is not a finite number, counts as `MAX_TTL`;
- a holder that ran on this host and whose process is gone makes the lease stale at once.

A stale or missing lease makes its job ORPHANED, and the reason is shown with it.
"""

from __future__ import annotations

import math
import os
from enum import StrEnum
from typing import NamedTuple

# How far ahead of this machine's clock a heartbeat may be (clocks of hosts sharing a
# `.gen/` drift; NTP keeps them well within this).
CLOCK_SKEW = 60.0
# The longest a heartbeat may count: a worker heartbeats every few seconds whatever its
# ttl, so a day is far past any real one.
MAX_TTL = 86_400.0
# A running job with no lease yet is being claimed, not orphaned, for this long.
CLAIM_GRACE = 10.0


class LeaseState(StrEnum):
    FRESH = "fresh"  # heartbeat within its ttl, holder not known to be gone
    CLAIMING = "claiming"  # no lease yet: the job was claimed moments ago
    STALE = "stale"  # expired, its holder gone, its heartbeat in the future, or unreadable
    MISSING = "missing"  # no lease, and the claim is older than CLAIM_GRACE

    @property
    def live(self) -> bool:
        """Whether the job counts as running (else it is orphaned)."""
        return self is LeaseState.FRESH or self is LeaseState.CLAIMING


class Verdict(NamedTuple):
    """A lease's state and, when there is one, why: for a stale or missing lease, or a
    fresh one whose ttl was held to `MAX_TTL`."""

    state: LeaseState
    why: str = ""


NO_LEASE = Verdict(LeaseState.MISSING, "no lease file")
CLAIMING = Verdict(LeaseState.CLAIMING)
FRESH = Verdict(LeaseState.FRESH)


def holder_dead(host: str, pid: int) -> bool:
    """True only when a lease holder ran on this host and its process is gone."""
    import socket  # here, not at the top: `genjob ls` without a lease never needs it

    if host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, ValueError):
        return False
    return False


def judge(heartbeat: float, ttl: float, host: str, pid: int, now: float) -> Verdict:
    """The state of a lease that parsed, at time `now`."""
    why = expiry(heartbeat, ttl, now)
    if why:
        return Verdict(LeaseState.STALE, why)
    if holder_dead(host, pid):
        return Verdict(LeaseState.STALE, "the worker is gone")  # its process, on this host
    if not ttl <= MAX_TTL:
        return Verdict(
            LeaseState.FRESH, f"its ttl counts as {MAX_TTL:g} s, the longest allowed ({_said(ttl)})"
        )
    return FRESH


def expiry(heartbeat: float, ttl: float, now: float) -> str:
    """Why a lease's heartbeat no longer counts at `now`, or "" while it does."""
    if not math.isfinite(heartbeat):
        return "its heartbeat is not a finite time"
    if heartbeat - now > CLOCK_SKEW:
        return f"its heartbeat is more than {CLOCK_SKEW:g} s ahead of this machine's clock"
    # "Not within", so that a NaN ttl, which compares false with everything, is never within.
    if not ttl <= MAX_TTL:
        if not now - heartbeat <= MAX_TTL:
            return f"no heartbeat for {MAX_TTL:g} s, the longest a ttl counts ({_said(ttl)})"
    elif not now - heartbeat <= ttl:
        return f"no heartbeat within its ttl of {ttl:g} s"
    return ""


def _said(ttl: float) -> str:
    return f"it says {ttl:g} s" if math.isfinite(ttl) else "it says a ttl that is not a finite number"


def judge_absent(claimed_at: float | None, now: float) -> Verdict:
    """The state of a running job with no lease file, claimed at `claimed_at` (the job
    file's ctime; None when it is gone too)."""
    if claimed_at is not None and now - claimed_at < CLAIM_GRACE:
        return CLAIMING
    return NO_LEASE


def unreadable(fault: str) -> Verdict:
    """The state of a lease file that does not parse (`fault` names it and says why)."""
    return Verdict(LeaseState.STALE, fault)
