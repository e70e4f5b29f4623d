"""`run_worker` and fencing: one writer per job, and a stop that keeps every result."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from corekit import mint, sha
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import (
    assert_not_applyable,
    assert_stopped,
    host_block,
    read_report,
    script,
    sleeper,
    wait_for,
    worktree,
    write_config,
)

from core.review.apply_job import apply_job
from core.store.layout import Layout
from core.store.queue import Claimer, heartbeat, lease_state, requeue
from core.store.receipts import commit_receipt, make_receipt
from core.work.ship import ship
from core.work.worker import run_worker

pytestmark = pytest.mark.timeout(120)


async def test_stop_mid_job_keeps_the_aborted_result(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gen, report = sleeper(tmp_path)
    write_config(repo, host_block("gen", None, gen))
    job = mint(repo)
    before = worktree(repo.root)
    stop = asyncio.Event()
    lines: list[str] = []
    worker = asyncio.ensure_future(run_worker(repo, stop=stop, report=lines.append, worker_id="w"))
    await asyncio.to_thread(read_report, report)
    stop.set()
    results = await worker
    assert [(r.key, r.status, r.reason, r.won) for r in results] == [
        (job.key, "aborted", "interrupted: the worker was stopped", True)
    ]
    assert "stopping: 1 job(s) in flight end as aborted" in lines
    assert f"{job.key} gen attempt 1: aborted: interrupted: the worker was stopped" in lines
    assert_stopped(report)
    assert_not_applyable(repo, job, before)


async def test_once_runs_every_queued_job_and_returns(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    code = "import os\nopen('src/app.py', 'a').write(open(os.environ['GENJOB_INSTRUCTION_FILE']).read())\n"
    write_config(repo, host_block("gen", None, script(tmp_path, "append", code), concurrency=2))
    keys = {mint(repo, f"job {i}").key for i in range(5)}
    results = await run_worker(repo, ["gen"], once=True, report=lambda line: None, worker_id="w")
    assert {r.key for r in results} == keys
    assert {r.status for r in results} == {"ok"} and all(r.won for r in results)


async def test_a_failing_claim_is_reported_and_retried(
    repo: Layout, signer: Ed25519PrivateKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(repo, host_block("gen", None, "true"))
    job = mint(repo)
    real = Claimer.claim
    failures = iter([OSError(28, "No space left on device")])

    def flaky(self: Claimer, key: str | None = None):  # type: ignore[no-untyped-def]
        for exc in failures:
            raise exc
        return real(self, key)

    monkeypatch.setattr(Claimer, "claim", flaky)
    monkeypatch.setattr("core.work.worker.CLAIM_RETRY", 0.05)
    lines: list[str] = []
    stop = asyncio.Event()
    worker = asyncio.ensure_future(run_worker(repo, stop=stop, report=lines.append, worker_id="w", poll=0.05))
    await asyncio.wait_for(_until(lambda: any(f"{job.key} gen attempt 1: ok" in ln for ln in lines)), 60)
    stop.set()
    results = await worker
    assert [r.key for r in results] == [job.key]
    assert "claim failed: [Errno 28] No space left on device; retrying in 0.05s" in lines


async def test_with_once_a_failing_claim_ends_the_loop(
    repo: Layout, signer: Ed25519PrivateKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(repo, host_block("gen", None, "true"))
    mint(repo)

    def broken(self: Claimer, key: str | None = None):  # type: ignore[no-untyped-def]
        raise PermissionError(13, "Permission denied", str(repo.running))

    monkeypatch.setattr(Claimer, "claim", broken)
    lines: list[str] = []
    assert await run_worker(repo, once=True, report=lines.append, worker_id="w") == []
    assert lines[-1] == f"claim failed: [Errno 13] Permission denied: '{repo.running}'"


async def _until(ok) -> None:  # type: ignore[no-untyped-def]
    while not ok():
        await asyncio.sleep(0.02)


def test_a_late_receipt_is_kept_aside(repo: Layout, signer: Ed25519PrivateKey) -> None:
    """Worker A's lease expires; the job is requeued and claimed by B; A's receipt,
    committed late, is kept aside, and B's is the one that counts."""
    job = mint(repo)
    a = Claimer(repo, "worker-a", ttl=0.2).claim(job.key)
    wait_for(lambda: lease_state(repo, job.key) == "stale", "A's lease to expire")
    requeue(repo, job.key)
    b = Claimer(repo, "worker-b", ttl=60).claim(job.key)
    assert (a.lease.token, b.lease.token) == (1, 2)
    assert not heartbeat(repo, job.key, a.lease.token, "worker-a")
    assert heartbeat(repo, job.key, b.lease.token, "worker-b")

    late = commit_receipt(
        repo, job, make_receipt(job, "ok", {"src/app.py": sha(b"A")}, "worker-a"), 1, "worker-a", None, signer
    )
    assert not late.won
    assert late.path == repo.log_dir(job.key) / "late-receipt-attempt-1.json"
    assert json.loads(late.path.read_bytes())["worker_id"] == "worker-a"
    assert not repo.receipt(job.key).exists()

    won = commit_receipt(repo, job, make_receipt(job, "aborted", {}, "worker-b"), 2, "worker-b", None, signer)
    assert won.won and won.path == repo.receipt(job.key)
    assert json.loads(repo.receipt(job.key).read_bytes())["worker_id"] == "worker-b"
    assert not heartbeat(repo, job.key, b.lease.token, "worker-b"), "the lease ends with the receipt"
    again = commit_receipt(repo, job, make_receipt(job, "ok", {}, "worker-a"), 1, "worker-a", None, signer)
    assert not again.won
    assert json.loads(repo.receipt(job.key).read_bytes())["worker_id"] == "worker-b"


async def test_a_shipping_worker_that_loses_its_lease_never_writes_the_receipt(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gen, report = sleeper(tmp_path)
    fast = script(tmp_path, "fast", "open('src/app.py', 'w').write('from B')\n")
    write_config(repo, host_block("slow", None, gen), host_block("fast", None, fast), lease_ttl=1.5)
    job = mint(repo)
    a = asyncio.ensure_future(ship(repo, job.key, "slow", worker_id="worker-a"))
    await asyncio.to_thread(read_report, report)
    await asyncio.to_thread(requeue, repo, job.key, True)
    b_claim = await asyncio.to_thread(Claimer(repo, "worker-b", 60).claim, job.key)

    lost = await a
    assert (lost.status, lost.won) == ("aborted", False)
    assert lost.reason == "lease lost: the job was requeued or claimed by another worker"
    assert lost.receipt == repo.log_dir(job.key) / "late-receipt-attempt-1.json"
    assert_stopped(report)
    assert not repo.receipt(job.key).exists()

    won = await ship(repo, job.key, "fast", worker_id="worker-b", claimed=b_claim)
    assert (won.status, won.won, won.attempt) == ("ok", True, 2)
    apply_job(repo, job.key)
    assert (repo.root / "src/app.py").read_bytes() == b"from B"


async def test_the_worker_notifies_of_each_receipt_and_each_run_a_host_failed(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    from core.store.notify import Event

    code = (
        "import os, sys\n"
        "text = open(os.environ['GENJOB_INSTRUCTION_FILE']).read()\n"
        "if 'fail' in text:\n    sys.exit(3)\n"
        "open('src/app.py', 'a').write(text)\n"
    )
    write_config(repo, host_block("gen", None, script(tmp_path, "maybe", code)))
    good, bad = mint(repo, "Append this.").key, mint(repo, "Please fail.").key
    told: list[Event] = []
    await run_worker(repo, ["gen"], once=True, report=lambda line: None, worker_id="w", notify=told.append)
    seen = {(e.kind, e.key, e.details.get("status")) for e in told}
    assert seen == {("receipt", good, "ok"), ("receipt", bad, "rejected"), ("host_failed", bad, None)}
    [failed] = [e for e in told if e.kind == "host_failed"]
    assert failed.details["host"] == "gen" and failed.details["attempt"] == 1 and failed.details["reason"]
