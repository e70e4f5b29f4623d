"""core.store.lease: writing and reading leases, and every reader judging them by the one rule."""

from __future__ import annotations

import json
import math
import os
import time

import pytest
from corekit import write_jobs
from hypothesis import given
from hypothesis import strategies as st

from core.errors import BadInput
from core.model.freshness import CLAIM_GRACE, CLOCK_SKEW, MAX_TTL, LeaseState, judge
from core.model.lifecycle import State
from core.read.snapshot import take_snapshot
from core.store.layout import Layout
from core.store.lease import Lease, lease_verdict, new_lease, read_lease, write_lease
from core.store.queue import claim, lease_state, requeue


def test_a_lease_written_is_the_lease_read(repo: Layout) -> None:
    lease = new_lease("w1", token=3, ttl=45.0)
    write_lease(repo, "a" * 32, lease)
    assert read_lease(repo, "a" * 32) == lease
    assert lease.pid == os.getpid() and lease.heartbeat == lease.claimed_at
    assert read_lease(repo, "b" * 32) is None


@pytest.mark.parametrize(
    ("content", "fault"),
    [
        (b"{not json", "malformed JSON"),
        (b'{"worker": "w1"}', "host: Field required"),
        (b"x" * (64 * 1024 + 1), "over the 65536-byte limit"),
    ],
)
def test_a_lease_that_does_not_parse_names_its_file(repo: Layout, content: bytes, fault: str) -> None:
    key = "c" * 32
    repo.lease(key).write_bytes(content)
    with pytest.raises(BadInput, match=fault) as err:
        read_lease(repo, key)
    assert str(err.value).startswith(str(repo.lease(key)))


def test_extra_fields_and_a_ttl_that_is_not_positive_are_refused(repo: Layout) -> None:
    key = "d" * 32
    good = new_lease("w1", 1, 30.0).model_dump()
    for bad in ({**good, "extra": 1}, {**good, "ttl": 0.0}, {**good, "token": 0}, {**good, "worker": ""}):
        repo.lease(key).write_text(json.dumps(bad))
        with pytest.raises(BadInput):
            read_lease(repo, key)


@given(
    heartbeat=st.floats(-1e10, 1e10),
    ttl=st.one_of(st.floats(1e-3, 1e13), st.just(math.inf)),
    now=st.floats(-1e10, 1e10),
)
def test_the_model_asks_the_one_rule(heartbeat: float, ttl: float, now: float) -> None:
    lease = Lease(worker="w", host="elsewhere", pid=1, token=1, claimed_at=0.0, heartbeat=heartbeat, ttl=ttl)
    verdict = judge(heartbeat, ttl, "elsewhere", 1, now)
    assert lease.verdict(now) == verdict
    assert lease.fresh(now) == (verdict.state is LeaseState.FRESH)
    assert lease.expired(now) == (verdict.state is LeaseState.STALE)
    assert not lease.holder_dead()


def hostile(repo: Layout, key: str, **fields: float) -> None:
    """Overwrite the lease of `key` with `fields` changed, as a careless or hostile writer would."""
    lease = json.loads(repo.lease(key).read_bytes())
    repo.lease(key).write_text(json.dumps({**lease, **fields}).replace("Infinity", "1e400"))


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        (
            {"heartbeat": time.time() + 365 * 86_400},
            f"more than {CLOCK_SKEW:g} s ahead of this machine's clock",
        ),
        ({"heartbeat": time.time() - MAX_TTL - 60, "ttl": 1e12}, "no heartbeat for 86400 s"),
        ({"heartbeat": time.time() - MAX_TTL - 60, "ttl": math.inf}, "a ttl that is not a finite number"),
    ],
)
def test_a_lease_that_would_keep_a_job_running_forever_is_orphaned_with_the_reason(
    repo: Layout, fields: dict[str, float], why: str
) -> None:
    key = write_jobs(repo, 1)[0]
    claim(repo, "w1", key)
    hostile(repo, key, **fields)
    verdict = lease_verdict(repo, key)
    assert verdict.state is LeaseState.STALE and why in verdict.why
    assert lease_state(repo, key) is LeaseState.STALE
    row = take_snapshot(repo).rows[key]
    assert row.state is State.ORPHANED
    assert row.problems == (f"lease stale: {verdict.why}; requeue replays the job",)
    requeue(repo, key)  # no --force needed: the job is not held
    assert take_snapshot(repo).rows[key].state is State.QUEUED


def test_a_running_job_with_an_absurd_ttl_says_it_counts_as_the_maximum(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    claim(repo, "w1", key)
    hostile(repo, key, ttl=1e12)
    row = take_snapshot(repo).rows[key]
    assert row.state is State.RUNNING
    assert row.problems == ("lease: its ttl counts as 86400 s, the longest allowed (it says 1e+12 s)",)


def scan_at(repo: Layout, now: float) -> dict[str, State]:
    """Each job's state in a snapshot taken as if at `now`."""
    return {k: r.state for k, r in take_snapshot(repo, disk_cache=False, now=now).rows.items()}


def test_every_reader_agrees_on_each_lease_state(repo: Layout) -> None:
    fresh, stale, unreadable, absent = write_jobs(repo, 4)
    for key in (fresh, stale, unreadable, absent):
        claim(repo, "w1", key)
    hostile(repo, stale, heartbeat=time.time() - 300, ttl=60.0)
    repo.lease(unreadable).write_bytes(b"[]")
    repo.lease(absent).unlink()
    now = time.time()
    later = now + CLAIM_GRACE + 1  # the claim is past its grace, the fresh lease's ttl (120 s) is not
    for at, absent_state in ((now, LeaseState.CLAIMING), (later, LeaseState.MISSING)):
        want = {fresh: LeaseState.FRESH, stale: LeaseState.STALE, unreadable: LeaseState.STALE}
        want[absent] = absent_state
        assert {k: lease_state(repo, k, at) for k in want} == want
        assert scan_at(repo, at) == {k: State.RUNNING if s.live else State.ORPHANED for k, s in want.items()}
