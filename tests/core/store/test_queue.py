"""Moving jobs between state folders: claim, leases, heartbeat, requeue, reject, cancel."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from corekit import dead_pid, mint, receive, write_jobs

from core.errors import BadInput, NotFound, NothingToClaim, WrongState
from core.model.freshness import CLAIM_GRACE
from core.model.lifecycle import State
from core.read.snapshot import take_snapshot
from core.store.events import attempts
from core.store.layout import Layout
from core.store.lease import holds_lease, lease_verdict, read_lease
from core.store.queue import (
    Claimer,
    cancel_requested,
    claim,
    heartbeat,
    lease_state,
    locate,
    reject,
    release,
    request_cancel,
    requeue,
)

ROOT = Path(__file__).resolve().parents[3]


def test_claim_takes_the_oldest_and_writes_a_lease(repo: Layout) -> None:
    keys = write_jobs(repo, 3)
    for i, key in enumerate(keys):
        os.utime(repo.queue / f"{key}.json", ns=(10**18 + i, 10**18 + i))
    c = claim(repo, "w1")
    assert c.key == keys[0]
    assert c.path == repo.running / f"{keys[0]}.json"
    assert not (repo.queue / f"{keys[0]}.json").exists()
    lease = read_lease(repo, c.key)
    assert lease is not None and lease.worker == "w1" and lease.token == 1 and lease.pid == os.getpid()
    assert [a["event"] for a in attempts(repo, c.key)] == ["claimed"]
    assert lease_state(repo, c.key) == "fresh"
    assert claim(repo, "w1").key == keys[1]


def test_claim_by_key_and_the_wrong_state(repo: Layout) -> None:
    keys = write_jobs(repo, 2)
    assert claim(repo, "w1", keys[1]).key == keys[1]
    with pytest.raises(WrongState, match="is RUNNING, not QUEUED"):
        claim(repo, "w2", keys[1])
    with pytest.raises(NotFound):
        claim(repo, "w2", "f" * 32)
    with pytest.raises(BadInput, match="not a job key"):
        claim(repo, "w2", "../../etc")


def test_an_empty_queue_is_nothing_to_claim(repo: Layout) -> None:
    with pytest.raises(NothingToClaim) as err:
        claim(repo, "w1")
    assert err.value.exit_code == 1


def test_a_claimer_that_lost_a_race_moves_on(repo: Layout) -> None:
    first, second = write_jobs(repo, 2)
    os.utime(repo.queue / f"{first}.json", ns=(1, 1))
    slow = Claimer(repo, "slow")
    assert slow.claim().key == first
    assert claim(repo, "fast", second).key == second
    with pytest.raises(NothingToClaim) as err:
        slow.claim()
    assert "skipped" not in str(err.value)


def test_an_invalid_job_file_is_skipped_and_left_in_the_queue(repo: Layout) -> None:
    good = write_jobs(repo, 1)[0]
    bad = "0" * 32
    (repo.queue / f"{bad}.json").write_bytes(b'{"schema": "genjob.v2", ')
    os.utime(repo.queue / f"{bad}.json", ns=(1, 1))
    (repo.queue / "notakey.json").write_bytes(b"{}")
    assert claim(repo, "w1").key == good
    with pytest.raises(NothingToClaim, match=f"skipped 1 that cannot be claimed: .*{bad}.json: malformed"):
        claim(repo, "w1")
    assert (repo.queue / f"{bad}.json").read_bytes() == b'{"schema": "genjob.v2", '
    assert not (repo.running / f"{bad}.json").exists()
    with pytest.raises(BadInput, match="malformed JSON"):
        claim(repo, "w1", bad)
    assert (repo.queue / f"{bad}.json").exists()


def test_a_job_under_another_keys_name_is_not_claimed(repo: Layout) -> None:
    real = write_jobs(repo, 1)[0]
    wrong = "1" * 32
    os.rename(repo.queue / f"{real}.json", repo.queue / f"{wrong}.json")
    with pytest.raises(BadInput, match="file name does not match its key"):
        claim(repo, "w1", wrong)
    with pytest.raises(NothingToClaim):
        claim(repo, "w1")
    assert os.listdir(repo.queue) == [f"{wrong}.json"]
    assert not (repo.running / f"{wrong}.lease").exists()


def test_lease_states(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    c = Claimer(repo, "w1", ttl=30).claim()
    now = time.time()
    assert lease_state(repo, key, now) == "fresh"
    assert lease_state(repo, key, now + 31) == "stale"
    repo.lease(key).unlink()
    assert lease_state(repo, key, now) == "claiming"
    assert lease_state(repo, key, now + CLAIM_GRACE + 1) == "missing"
    repo.lease(key).write_bytes(b"not json")
    # A lease that does not parse is no sign of life, even moments after the claim (a
    # claim writes its lease whole), and the listing agrees.
    assert lease_state(repo, key, now) == "stale"
    assert lease_state(repo, key, now + CLAIM_GRACE + 1) == "stale"
    assert lease_verdict(repo, key, now).why.startswith(f"{repo.lease(key)}: malformed JSON")
    assert take_snapshot(repo).rows[key].state is State.ORPHANED
    assert c.lease.fresh(now)


def test_a_lease_whose_process_died_is_stale(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    claim(repo, "w1", pid=dead_pid())
    assert lease_state(repo, key) == "stale"


def test_heartbeat_renews_only_the_holders_lease(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    c = claim(repo, "w1")
    before = read_lease(repo, key)
    assert before is not None
    assert heartbeat(repo, key, c.lease.token, "w1")
    after = read_lease(repo, key)
    assert after is not None and after.heartbeat >= before.heartbeat
    assert not heartbeat(repo, key, c.lease.token + 1, "w1")
    assert not heartbeat(repo, key, c.lease.token, "w2")
    assert holds_lease(repo, key, c.lease.token, "w1")
    requeue(repo, key, force=True)
    assert not heartbeat(repo, key, c.lease.token, "w1")
    assert not holds_lease(repo, key, c.lease.token, "w1")


def test_requeue_puts_the_job_back_byte_for_byte(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    original = (repo.queue / f"{key}.json").read_bytes()
    claim(repo, "w1", pid=dead_pid())
    requeued = requeue(repo, key)
    path = requeued.path
    assert path == repo.queue / f"{key}.json" and requeued.cleanups == ()
    assert path.read_bytes() == original
    assert not repo.lease(key).exists()
    assert [a["event"] for a in attempts(repo, key)] == ["claimed", "requeued"]
    assert claim(repo, "w2").lease.token == 2


def test_requeue_refuses_a_live_lease_unless_forced(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    claim(repo, "w1")
    with pytest.raises(WrongState, match=rf"lease is live held by w1 \(pid {os.getpid()} on .*--force"):
        requeue(repo, key)
    assert (repo.running / f"{key}.json").exists()
    requeue(repo, key, force=True)
    assert locate(repo, key).folder == "queue"
    assert attempts(repo, key)[-1]["forced"] is True


def test_a_refused_claim_says_the_derived_state_not_the_folder(repo: Layout, signer: object) -> None:
    """A job in running/ is FAILED, RECEIVED or ORPHANED as often as RUNNING: the refusal
    says what `derive_state` says, as `genjob ls` does."""
    failed, received, orphaned = (mint(repo, f"job {i}").key for i in range(3))
    receive(repo, failed, {}, status="aborted")
    receive(repo, received, {"src/app.py": b"x"})
    claim(repo, "w1", orphaned, pid=dead_pid())
    for key, state in ((failed, "FAILED"), (received, "RECEIVED"), (orphaned, "ORPHANED")):
        with pytest.raises(WrongState, match=f"is {state}, not QUEUED; nothing claimed"):
            claim(repo, "w2", key)
        assert take_snapshot(repo).rows[key].state == state
    with pytest.raises(WrongState, match="is FAILED, with a receipt"):
        requeue(repo, failed)
    with pytest.raises(WrongState, match="is FAILED, not RUNNING; nothing to cancel"):
        request_cancel(repo, failed)


def test_requeue_refuses_jobs_not_running_or_with_a_receipt(repo: Layout, signer: object) -> None:
    job = mint(repo)
    with pytest.raises(WrongState, match="is QUEUED; only an ORPHANED job can be requeued"):
        requeue(repo, job.key)
    receive(repo, job.key, {"src/app.py": b"x"})
    with pytest.raises(WrongState, match="is RECEIVED, with a receipt"):
        requeue(repo, job.key, force=True)


def test_reject_closes_a_job_with_its_reason(repo: Layout, signer: object) -> None:
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"x"})
    with pytest.raises(BadInput, match="a rejection needs a reason"):
        reject(repo, job.key, "  ")
    path = reject(repo, job.key, "wrong approach")
    loc = locate(repo, job.key)
    assert loc.folder == "rejected" and path == loc.path
    assert loc.record is not None
    assert loc.record["rejection"]["reason"] == "wrong approach"
    assert loc.record["rejection"]["from"] == "running"
    assert loc.job == job
    assert repo.receipt(job.key).exists(), "the receipt stays as evidence"
    assert not (repo.running / f"{job.key}.json").exists()
    with pytest.raises(WrongState, match="is REJECTED already"):
        reject(repo, job.key, "again")


def test_reject_a_queued_job_and_refuse_a_live_running_one(repo: Layout) -> None:
    queued, running = write_jobs(repo, 2)
    claim(repo, "w1", running)
    with pytest.raises(WrongState, match="is running; cancel it first"):
        reject(repo, running, "no")
    reject(repo, queued, "not needed")
    assert locate(repo, queued).folder == "rejected"
    assert os.listdir(repo.queue) == []


def test_cancel_requests(repo: Layout, signer: object) -> None:
    key = write_jobs(repo, 1)[0]
    with pytest.raises(WrongState, match="is QUEUED, not RUNNING"):
        request_cancel(repo, key)
    claim(repo, "w1")
    assert not cancel_requested(repo, key)
    request_cancel(repo, key)
    assert cancel_requested(repo, key)
    requeue(repo, key, force=True)
    assert not cancel_requested(repo, key), "a requeue clears the request"


RACER = """
import sys, time
from pathlib import Path
from core.errors import NothingToClaim
from core.store.layout import Layout
from core.store.queue import Claimer

layout, go, worker = Layout(Path(sys.argv[1])), Path(sys.argv[2]), sys.argv[3]
claimer = Claimer(layout, worker)
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
keys = []
while True:
    try:
        keys.append(claimer.claim().key)
    except NothingToClaim:
        break
print("\\n".join(keys))
"""


def race(layout: Layout, workers: int, tmp: Path) -> list[list[str]]:
    """`workers` processes claim until the queue is empty; the keys each one got."""
    go = tmp / "go"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(layout.root), str(go), f"racer-{i}"],
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        for i in range(workers)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    go.touch()
    results = []
    for p in procs:
        out, _ = p.communicate()
        assert p.returncode == 0
        results.append(out.split())
    return results


def test_eight_processes_racing_claim_each_of_2000_jobs_exactly_once(repo: Layout, tmp_path: Path) -> None:
    keys = write_jobs(repo, 2000)
    results = race(repo, 8, tmp_path)
    claimed = [k for got in results for k in got]
    assert len(claimed) == len(set(claimed)), "a job was claimed twice"
    assert set(claimed) == set(keys)
    assert sum(1 for got in results if got) >= 2, "the claimers did not race"
    assert os.listdir(repo.queue) == []
    running = sorted(n for n in os.listdir(repo.running) if n.endswith(".json"))
    assert running == sorted(f"{k}.json" for k in keys)
    leases = [read_lease(repo, k) for k in keys]
    assert all(lease is not None and lease.token == 1 for lease in leases)
    by_worker = {k: f"racer-{i}" for i, got in enumerate(results) for k in got}
    assert all(
        lease is not None and lease.worker == by_worker[k] for k, lease in zip(keys, leases, strict=True)
    )


def test_release_puts_a_held_claim_back_byte_for_byte(repo: Layout) -> None:
    job = mint(repo, "release me")
    queued = repo.job_file("queue", job.key).read_bytes()
    c = claim(repo, "board:me", job.key)
    release(repo, job.key, c.lease.token, "board:me")
    assert repo.job_file("queue", job.key).read_bytes() == queued
    assert not repo.job_file("running", job.key).exists() and not repo.lease(job.key).exists()
    assert [a["event"] for a in attempts(repo, job.key)] == ["claimed", "released"]
    # The next claim is the next attempt: the released one is never reused as a token.
    assert claim(repo, "w2", job.key).lease.token == c.lease.token + 1


@pytest.mark.parametrize("who", ["another worker", "an old token"])
def test_release_refuses_a_claim_that_is_not_the_callers(repo: Layout, who: str) -> None:
    job = mint(repo, "not yours")
    c = claim(repo, "board:me", job.key)
    worker, token = ("board:other", c.lease.token) if who == "another worker" else ("board:me", 0)
    before = repo.job_file("running", job.key).read_bytes(), repo.lease(job.key).read_bytes()
    with pytest.raises(WrongState, match=rf"{job.key}: its lease is no longer {worker}'s"):
        release(repo, job.key, token, worker)
    assert (repo.job_file("running", job.key).read_bytes(), repo.lease(job.key).read_bytes()) == before
    assert not repo.job_file("queue", job.key).exists()


@pytest.mark.parametrize("move", ["edit", "delete", "create"])
def test_a_stale_queued_job_is_refused_before_it_is_claimed(repo: Layout, move: str) -> None:
    """`genjob ship KEY` on a job whose inputs moved spends no attempt: it stays queued."""
    job = mint(repo, "x", [], new=["src/new.py"]) if move == "create" else mint(repo, "x", ["src/app.py"])
    target = repo.root / ("src/new.py" if move == "create" else "src/app.py")
    if move == "delete":
        target.unlink()
    else:
        target.write_text("moved on\n")
    before = sorted(p.name for p in repo.gen.rglob("*") if "cache" not in p.parts)
    with pytest.raises(WrongState, match=f"is STALE: its inputs changed.*genjob replay {job.key}"):
        Claimer(repo, "w1").claim(job.key)
    assert sorted(p.name for p in repo.gen.rglob("*") if "cache" not in p.parts) == before
    assert attempts(repo, job.key) == [] and not read_lease(repo, job.key)
    assert take_snapshot(repo).rows[job.key].state is State.STALE


def test_a_worker_claim_skips_a_stale_job_and_says_why(repo: Layout) -> None:
    stale = mint(repo, "stale", ["src/app.py"])
    (repo.root / "src/app.py").write_text("moved on\n")
    fresh = mint(repo, "fresh", ["src/util.py"])
    claimer = Claimer(repo, "w1")
    assert claimer.claim().key == fresh.key
    with pytest.raises(NothingToClaim, match=r"skipped 1 that cannot be claimed: .*is STALE"):
        claimer.claim()
    assert list(claimer.skipped) == [stale.key] and "genjob replay" in claimer.skipped[stale.key]
    assert repo.job_file("queue", stale.key).exists() and attempts(repo, stale.key) == []
