"""`.gen/logs/` and the audit log are read and written like the rest of `.gen/`, and what a
generator host sends back is bounded before it is recorded."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from corekit import cli, mint, receive
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import DEMO, host_block, write_config

from core.errors import BadInput
from core.store.config import load_config
from core.store.events import (
    MAX_FIELD_CHARS,
    MAX_FIELD_ITEMS,
    MAX_READ_BYTES,
    bounded,
    job_events,
    record_event,
)
from core.store.evidence import keep, newest_log_tail, set_aside
from core.store.layout import Layout
from core.store.queue import claim
from core.work.bundle import ResultInfo
from core.work.ship import Hosts, Shipment, _commit, ship


def test_a_fifo_among_the_logs_does_not_hang_show(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo, "Logged.", ["src/app.py"])
    receive(repo, job.key, {"src/app.py": b"x\n"}, signer)
    repo.log_dir(job.key).mkdir(parents=True)
    os.mkfifo(repo.log_dir(job.key) / "attempt-9.log")
    done: list[int] = []
    runner = threading.Thread(target=lambda: done.append(cli("show", job.key, root=repo.root).exit_code))
    runner.start()
    runner.join(60)
    assert done == [0], "show blocked on a FIFO in .gen/logs/"


def test_the_log_tail_is_the_newest_logs_last_bytes(repo: Layout) -> None:
    keep(repo, "a" * 32, "attempt-1.log", b"old\n")
    big = b"x" * 300_000 + b"the end\n"
    path = keep(repo, "a" * 32, "attempt-2.log", big)
    os.utime(path, (2e9, 2e9))
    tail = newest_log_tail(repo, "a" * 32, limit=1000)
    assert tail.endswith("the end\n") and len(tail) == 1000


def test_a_symlinked_log_folder_is_never_written_through(repo: Layout, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    repo.logs.rmdir()
    repo.logs.symlink_to(elsewhere)
    with pytest.raises(BadInput, match="logs is a symlink, not a folder"):
        keep(repo, "b" * 32, "attempt-1.log", b"data")
    assert os.listdir(elsewhere) == []


def test_a_symlinked_per_job_log_folder_is_refused(repo: Layout, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (repo.logs / ("c" * 32)).symlink_to(elsewhere)
    victim = repo.queue / "x.json"
    victim.write_text("{}")
    with pytest.raises(BadInput, match="is a symlink, not a folder"):
        set_aside(repo, "c" * 32, victim, "queue")
    assert victim.exists() and os.listdir(elsewhere) == []


async def test_ship_with_a_symlinked_log_folder_writes_nothing_there(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    write_config(repo, host_block("local", None, DEMO))
    job = mint(repo, "Ship with a trap in the logs.", ["src/app.py"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (repo.logs / job.key).symlink_to(elsewhere)
    res = await ship(repo, job.key)
    assert res.won and res.status == "ok"
    assert os.listdir(elsewhere) == []
    assert any(e["event"] == "evidence_not_kept" for e in job_events(repo, job.key))


def test_bounded_cuts_long_strings_and_lists() -> None:
    value = {"reason": "r" * 10_000, "violations": [f"v{i}" for i in range(1000)], "n": 3}
    out = bounded(value)
    assert len(out["reason"]) < MAX_FIELD_CHARS + 50 and out["reason"].endswith("more characters)")
    assert len(out["violations"]) == MAX_FIELD_ITEMS + 1 and out["violations"][-1] == "… (950 more)"
    assert out["n"] == 3


def test_a_hostile_hosts_reason_and_violations_are_capped_when_recorded(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    job = mint(repo, "Hostile host.", ["src/app.py"])
    c = claim(repo, "w1", job.key)
    info = ResultInfo(
        exit_code=1,
        timed_out=False,
        cancelled=False,
        tail="",
        error=None,
        outputs={},
        violations=tuple("v" * 100_000 for _ in range(500)),
    )
    size_before = repo.events.stat().st_size
    shipment = Shipment(repo, c, "h", Hosts(load_config(repo.config)), signer, "w1")
    committed = _commit(shipment, ("rejected", "; ".join(info.violations)), info, b"out")
    assert committed.won
    assert repo.events.stat().st_size - size_before < 64 * 1024
    assert repo.attempts_file(job.key).stat().st_size < 64 * 1024
    summary = json.loads((repo.log_dir(job.key) / "attempt-1.json").read_bytes())
    assert len(summary["violations"]) == MAX_FIELD_ITEMS + 1
    assert cli("show", job.key, root=repo.root).exit_code == 0


def test_the_audit_log_is_readable_past_its_read_cap(repo: Layout) -> None:
    job = mint(repo, "Found at the end of a big log.", ["src/app.py"])
    with open(repo.events, "ab") as fh:
        line = json.dumps({"at": 1.0, "event": "noise", "key": None, "pad": "p" * 1000}).encode() + b"\n"
        fh.write(line * (MAX_READ_BYTES // len(line) + 100))
    record_event(repo, "marker", job.key)
    assert repo.events.stat().st_size > MAX_READ_BYTES
    assert [e["event"] for e in job_events(repo, job.key)][-1] == "marker"
    res = cli("show", job.key, root=repo.root)
    assert res.exit_code == 0 and "marker" in res.stdout
