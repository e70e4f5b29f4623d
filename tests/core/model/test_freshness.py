"""The one lease-freshness rule: live leases, expired ones, dead holders, and lease files
that lie or were written carelessly."""

from __future__ import annotations

import math
import os
import socket

from corekit import dead_pid
from hypothesis import example, given
from hypothesis import strategies as st

from core.model.freshness import (
    CLAIM_GRACE,
    CLOCK_SKEW,
    MAX_TTL,
    LeaseState,
    holder_dead,
    judge,
    judge_absent,
    unreadable,
)

HERE = socket.gethostname()
NOW = 1_800_000_000.0


def test_a_heartbeat_counts_for_its_ttl() -> None:
    assert judge(NOW - 10, 10.0, HERE, os.getpid(), NOW) == (LeaseState.FRESH, "")
    verdict = judge(NOW - 10.5, 10.0, HERE, os.getpid(), NOW)
    assert verdict.state is LeaseState.STALE
    assert verdict.why == "no heartbeat within its ttl of 10 s"


def test_a_holder_whose_process_is_gone_makes_the_lease_stale_at_once() -> None:
    pid = dead_pid()
    verdict = judge(NOW, 120.0, HERE, pid, NOW)
    assert verdict == (LeaseState.STALE, "the worker is gone")
    assert holder_dead(HERE, pid)
    assert not holder_dead("another-host", pid), "a process on another host cannot be looked at"
    assert not holder_dead(HERE, 10**30), "a pid no process can have is not proof of death"
    assert judge(NOW, 120.0, "another-host", pid, NOW).state is LeaseState.FRESH


def test_a_heartbeat_ahead_of_the_clock_counts_only_within_the_skew_allowance() -> None:
    assert judge(NOW + CLOCK_SKEW, 120.0, HERE, os.getpid(), NOW).state is LeaseState.FRESH
    verdict = judge(NOW + CLOCK_SKEW + 1, 120.0, HERE, os.getpid(), NOW)
    assert verdict.state is LeaseState.STALE
    assert verdict.why == "its heartbeat is more than 60 s ahead of this machine's clock"
    far = judge(NOW + 10 * 365 * 86_400, MAX_TTL, HERE, os.getpid(), NOW)
    assert far.state is LeaseState.STALE, "a heartbeat written for ten years from now keeps nothing alive"


def test_an_absurd_ttl_counts_as_the_maximum_and_says_so() -> None:
    for ttl in (1e12, math.inf, math.nan):
        fresh = judge(NOW - MAX_TTL, ttl, HERE, os.getpid(), NOW)
        assert fresh.state is LeaseState.FRESH
        assert fresh.why.startswith("its ttl counts as 86400 s, the longest allowed")
        stale = judge(NOW - MAX_TTL - 1, ttl, HERE, os.getpid(), NOW)
        assert stale.state is LeaseState.STALE
        assert stale.why.startswith("no heartbeat for 86400 s, the longest a ttl counts")
    assert judge(NOW, 1e12, HERE, os.getpid(), NOW).why.endswith("(it says 1e+12 s)")
    assert judge(NOW, math.inf, HERE, os.getpid(), NOW).why.endswith("a ttl that is not a finite number)")


def test_a_heartbeat_that_is_not_a_finite_time_is_stale() -> None:
    for heartbeat in (math.inf, -math.inf, math.nan):
        verdict = judge(heartbeat, 120.0, HERE, os.getpid(), NOW)
        assert verdict == (LeaseState.STALE, "its heartbeat is not a finite time")


def test_no_lease_is_a_claim_in_progress_for_the_grace_period_only() -> None:
    assert judge_absent(NOW - CLAIM_GRACE + 1, NOW).state is LeaseState.CLAIMING
    assert judge_absent(NOW - CLAIM_GRACE, NOW) == (LeaseState.MISSING, "no lease file")
    assert judge_absent(None, NOW).state is LeaseState.MISSING


def test_an_unreadable_lease_is_stale_with_its_fault() -> None:
    assert unreadable("x.lease: malformed JSON") == (LeaseState.STALE, "x.lease: malformed JSON")


def test_which_states_count_as_live() -> None:
    assert {s for s in LeaseState if s.live} == {LeaseState.FRESH, LeaseState.CLAIMING}
    assert LeaseState.STALE == "stale", "states compare equal to their names"


TIMES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(NOW - 2 * MAX_TTL, NOW + 2 * CLOCK_SKEW),
)
TTLS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 2 * MAX_TTL))


@given(heartbeat=TIMES, ttl=TTLS, alive=st.booleans())
@example(heartbeat=NOW - 1, ttl=math.inf, alive=True)
@example(heartbeat=NOW + CLOCK_SKEW, ttl=1.0, alive=True)
@example(heartbeat=NOW - MAX_TTL, ttl=1e300, alive=True)
def test_a_lease_is_fresh_exactly_while_a_bounded_heartbeat_counts(
    heartbeat: float, ttl: float, alive: bool
) -> None:
    pid = os.getpid() if alive else dead_pid()
    verdict = judge(heartbeat, ttl, HERE, pid, NOW)
    counts = (
        math.isfinite(heartbeat)
        and heartbeat - NOW <= CLOCK_SKEW
        and NOW - heartbeat <= (ttl if ttl <= MAX_TTL else MAX_TTL)
    )
    assert (verdict.state is LeaseState.FRESH) == (counts and alive)
    assert verdict.state in (LeaseState.FRESH, LeaseState.STALE)
    if verdict.state is LeaseState.STALE:
        assert verdict.why, "a stale lease always says why"
    # Never a job that runs forever: whatever the file says, a heartbeat older than the
    # maximum ttl, or further ahead than the skew allowance, keeps nothing alive.
    if not (-CLOCK_SKEW <= NOW - heartbeat <= MAX_TTL):
        assert verdict.state is LeaseState.STALE
