"""core.work.worker.ship_batch (the board's bulk ship) and core.work.ship.abort_claim (a held
claim stopped)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from corekit import mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import host_block, read_report, script, sleeper, write_config

from core.store.layout import Layout
from core.store.queue import Claimer, claim
from core.work.ship import abort_claim
from core.work.worker import BatchEvent, ship_batch

pytestmark = pytest.mark.timeout(120)

APPEND = "import os\nopen('src/app.py', 'a').write(open(os.environ['GENJOB_INSTRUCTION_FILE']).read())\n"


async def test_each_job_ships_within_each_hosts_concurrency(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gen = script(tmp_path, "append", APPEND)
    write_config(repo, host_block("a", None, gen, concurrency=2), host_block("b", None, gen))
    keys = [mint(repo, f"job {i}").key for i in range(5)]
    taken = mint(repo, "claimed by someone else").key
    claim(repo, "someone-else", taken)
    events: list[BatchEvent] = []
    busy = {"a": 0, "b": 0}
    peak = {"a": 0, "b": 0}

    def seen(event: BatchEvent) -> None:
        events.append(event)
        if event.phase in ("started", "finished") and event.host:
            busy[event.host] += 1 if event.phase == "started" else -1
            peak[event.host] = max(peak[event.host], busy[event.host])

    results = await ship_batch(repo, [*keys, taken], ["a", "b"], worker_id="w", on_event=seen)
    assert sorted(r.key for r in results) == sorted(keys)
    assert {r.status for r in results} == {"ok"}
    assert peak["a"] <= 2 and peak["b"] <= 1
    refused = [e for e in events if e.phase == "refused"]
    assert [e.key for e in refused] == [taken] and "not QUEUED" in refused[0].text


async def test_a_claim_already_held_is_shipped_without_a_second_claim(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    write_config(repo, host_block("gen", None, script(tmp_path, "append", APPEND)))
    job = mint(repo)
    held = Claimer(repo, "board:w", 30.0).claim(job.key)
    results = await ship_batch(repo, [job.key], worker_id="board:w", claimed={job.key: held})
    assert [(r.status, r.attempt) for r in results] == [("ok", 1)]
    records = [json.loads(line) for line in repo.attempts_file(job.key).read_text().splitlines()]
    assert [r["event"] for r in records].count("claimed") == 1


async def test_a_stop_aborts_the_jobs_in_flight_and_starts_no_more(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gen, report = sleeper(tmp_path)
    write_config(repo, host_block("gen", None, gen))
    first, second = mint(repo, "one").key, mint(repo, "two").key
    stop = asyncio.Event()
    events: list[BatchEvent] = []
    batch = asyncio.ensure_future(
        ship_batch(repo, [first, second], worker_id="w", on_event=events.append, cancel=stop)
    )
    await asyncio.to_thread(read_report, report)
    stop.set()
    results = await batch
    assert [(r.key, r.status) for r in results] == [(first, "aborted")]
    assert [(e.key, e.phase) for e in events if e.phase == "skipped"] == [(second, "skipped")]
    assert repo.job_file("queue", second).exists()


def test_abort_claim_ends_a_held_job_with_a_signed_aborted_receipt(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    job = mint(repo)
    held = Claimer(repo, "board:w", 30.0).claim(job.key)
    committed = abort_claim(repo, held, "cancelled by the operator", "board:w")
    assert committed.won
    receipt = json.loads(repo.receipt(job.key).read_bytes())
    assert receipt["status"] == "aborted" and receipt["outputs"] == {}
    assert repo.signature(job.key).exists() and not repo.lease(job.key).exists()
    summary = json.loads((repo.log_dir(job.key) / "attempt-1.json").read_bytes())
    assert summary["reason"] == "cancelled by the operator"
