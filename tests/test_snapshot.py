"""One consistent read of `.gen/`: states, problems, the index, and files that do not parse."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from corekit import dead_pid, mint, receive, sha, write_jobs, write_receipt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.apply import apply_job
from core.layout import Layout
from core.lifecycle import State
from core.queue import claim, reject
from core.snapshot import Scanner, keys_from_paths, take_snapshot

HOUR_NS = 3600 * 10**9


def age(path: Path, seconds: int = 3600) -> None:
    """Make a file look written long ago, so the index may keep what was read from it."""
    old = time.time_ns() - seconds * 10**9
    os.utime(path, ns=(old, old), follow_symlinks=False)


def states(layout: Layout) -> dict[str, State]:
    return {k: r.state for k, r in take_snapshot(layout).rows.items()}


def test_every_stored_and_derived_state(repo: Layout, signer: Ed25519PrivateKey) -> None:
    queued, running, orphaned, rejected = write_jobs(repo, 4)
    claim(repo, "w1", running)
    claim(repo, "w1", orphaned, pid=dead_pid())
    reject(repo, rejected, "no")
    ok = mint(repo, "ok", ["src/app.py"])
    receive(repo, ok.key, {"src/app.py": b"x"}, signer)
    stale = mint(repo, "stale", ["src/util.py"])
    receive(repo, stale.key, {"src/util.py": b"y"}, signer)
    (repo.root / "src/util.py").write_text("moved on\n")
    failed = mint(repo, "failed", ["README.md"])
    receive(repo, failed.key, {}, signer, status="aborted")
    applied = mint(repo, "applied", ["docs/guide.md"])
    receive(repo, applied.key, {"docs/guide.md": b"z"}, signer)
    apply_job(repo, applied.key)
    snap = take_snapshot(repo)
    got = {k: r.state for k, r in snap.rows.items()}
    assert got == {
        queued: State.QUEUED,
        running: State.RUNNING,
        orphaned: State.ORPHANED,
        rejected: State.REJECTED,
        ok.key: State.RECEIVED,
        stale.key: State.STALE,
        failed.key: State.FAILED,
        applied.key: State.APPLIED,
    }
    assert snap.counts[State.QUEUED] == 1 and sum(snap.counts.values()) == 8
    assert snap.rows[stale.key].problems == ("src/util.py: changed since the job was minted",)
    assert snap.rows[rejected].problems == ("rejected: no",)
    assert snap.rows[orphaned].problems[0].startswith("lease stale")
    assert snap.rows[running].worker == "w1" and snap.rows[running].attempts == 1
    assert snap.rows[ok.key].receipt_status == "ok"
    row = snap.rows[ok.key].to_dict()
    assert {"key", "state", "schema", "digest", "instruction", "allowed_paths", "attempts", "worker"} <= set(
        row
    )


@pytest.mark.parametrize(
    ("name", "content", "fault"),
    [
        ("0" * 32 + ".json", b"{not json", "malformed JSON"),
        ("1" * 32 + ".json", b'{"schema": "genjob.v2", "schema": "x"}', "duplicate key"),
        ("2" * 32 + ".json", b"[" * 5000, "nested deeper"),
        ("3" * 32 + ".json", b'{"a": ' + b"7" * 4300 + b"}", "digits"),
        ("not-a-key.json", b"{}", "file name is not a job key"),
    ],
)
def test_an_invalid_file_is_shown_with_its_error_and_never_crashes(
    repo: Layout, name: str, content: bytes, fault: str
) -> None:
    write_jobs(repo, 2)
    (repo.queue / name).write_bytes(content)
    snap = take_snapshot(repo)
    row = snap.rows[name[:-5]]
    assert row.state is State.INVALID
    assert fault in row.problems[0]
    assert snap.counts[State.QUEUED] == 2


def test_links_folders_and_fifos_in_state_folders_are_invalid(repo: Layout, tmp_path: Path) -> None:
    good = write_jobs(repo, 1)[0]
    (tmp_path / "elsewhere.json").write_bytes((repo.queue / f"{good}.json").read_bytes())
    (repo.queue / ("a" * 32 + ".json")).symlink_to(tmp_path / "elsewhere.json")
    (repo.queue / ("b" * 32 + ".json")).mkdir()
    os.mkfifo(repo.queue / ("c" * 32 + ".json"))
    got = states(repo)
    assert got["a" * 32] is got["b" * 32] is got["c" * 32] is State.INVALID
    assert got[good] is State.QUEUED


def test_a_receipt_that_does_not_parse_or_names_another_job(repo: Layout, signer: Ed25519PrivateKey) -> None:
    a, b = mint(repo, "a"), mint(repo, "b", ["src/util.py"])
    receive(repo, a.key, {"src/app.py": b"x"}, signer)
    receive(repo, b.key, {"src/util.py": b"y"}, signer)
    repo.receipt(a.key).write_bytes(b'{"status": Infinity}')
    other = {
        "schema": "genjob.v2",
        "job_digest": a.digest,
        "idempotency_key": a.key,
        "status": "ok",
        "outputs": {"src/util.py": sha(b"y")},
        "worker_id": "w1",
    }
    write_receipt(repo, b.key, other, signer)
    snap = take_snapshot(repo)
    assert snap.rows[a.key].state is State.INVALID
    assert "Infinity is not JSON" in snap.rows[a.key].problems[0]
    assert "receipt names another job digest" in snap.rows[b.key].problems


def test_a_receipt_with_no_job_is_inconsistent(repo: Layout) -> None:
    key = "d" * 32
    write_receipt(
        repo,
        key,
        {
            "schema": "genjob.v2",
            "job_digest": "d" * 64,
            "idempotency_key": key,
            "status": "ok",
            "outputs": {},
            "worker_id": "w",
        },
    )
    row = take_snapshot(repo).rows[key]
    assert row.state is State.INCONSISTENT
    assert row.problems[-1].startswith("a receipt with no job")


def test_a_bad_config_is_reported_not_raised(repo: Layout) -> None:
    repo.config.write_text("[policy]\nrequire_signature = 'yes'\n")
    snap = take_snapshot(repo)
    assert snap.config_error is not None and "config.toml: policy.require_signature" in snap.config_error
    assert snap.signature_required
    repo.config.write_text("[policy]\nrequire_signature = false\n")
    assert not take_snapshot(repo).signature_required


def test_the_index_is_reused_by_the_next_process_and_checked(repo: Layout) -> None:
    keys = write_jobs(repo, 5)
    for k in keys:
        age(repo.queue / f"{k}.json")
    first = take_snapshot(repo)
    assert (repo.cache / "snapshot.marshal").exists()
    again = Scanner(repo)
    assert sum(rel.startswith("queue/") for rel in again._files) == 5
    assert again.scan().rows == first.rows
    (repo.queue / f"{keys[0]}.json").write_bytes(b"{}")
    assert take_snapshot(repo).rows[keys[0]].state is State.INVALID


def test_a_corrupt_index_is_ignored(repo: Layout) -> None:
    keys = write_jobs(repo, 2)
    repo.cache.joinpath("snapshot.marshal").write_bytes(b"\x00garbage")
    assert set(states(repo)) == set(keys)
    repo.cache.joinpath("snapshot.marshal").write_bytes(b"")
    assert set(states(repo)) == set(keys)
    shutil.rmtree(repo.cache)
    assert set(states(repo)) == set(keys)


def test_a_tree_file_rewritten_within_a_clock_tick_is_rehashed(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    job = mint(repo, "x", ["src/app.py"])
    receive(repo, job.key, {"src/app.py": b"x"}, signer)
    target = repo.root / "src/app.py"
    original = target.read_bytes()
    future = time.time_ns() + HOUR_NS
    os.utime(target, ns=(future, future))
    scanner = Scanner(repo)
    assert scanner.scan().rows[job.key].state is State.RECEIVED
    target.write_bytes(original.upper())
    os.utime(target, ns=(future, future))
    assert scanner.scan().rows[job.key].state is State.STALE
    scanner.save_cache()
    assert Scanner(repo).scan().rows[job.key].state is State.STALE


def test_a_symlinked_parent_in_the_tree_makes_a_job_stale(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    job = mint(repo, "x", ["src/app.py"])
    receive(repo, job.key, {"src/app.py": b"x"}, signer)
    shutil.copytree(repo.root / "src", tmp_path / "src")
    shutil.rmtree(repo.root / "src")
    (repo.root / "src").symlink_to(tmp_path / "src")
    assert states(repo)[job.key] is State.STALE


def test_refresh_rederives_single_keys(repo: Layout) -> None:
    a, b = write_jobs(repo, 2)
    scanner = Scanner(repo, disk_cache=False)
    scanner.scan()
    claim(repo, "w1", a)
    (repo.queue / f"{b}.json").unlink()
    changed = scanner.refresh([a, b])
    assert changed[b] is None
    row = changed[a]
    assert row is not None and row.state is State.RUNNING
    assert set(scanner.snapshot().rows) == {a}


def test_keys_from_paths(repo: Layout) -> None:
    key = "e" * 32
    paths = [
        repo.queue / f"{key}.json",
        repo.running / f"{key}.lease",
        repo.root / "src" / f"{'f' * 32}.json",
        repo.gen / "events.jsonl",
        str(repo.attempts / f"{'a' * 32}.jsonl"),
    ]
    assert keys_from_paths(repo, paths) == {key, "a" * 32}


def test_an_empty_repository(repo: Layout) -> None:
    snap = take_snapshot(repo)
    assert snap.rows == {} and sum(snap.counts.values()) == 0


def test_odd_but_valid_records_and_leases_never_crash_a_listing(repo: Layout) -> None:
    rejected, running = write_jobs(repo, 2)
    job = json.loads((repo.queue / f"{rejected}.json").read_bytes())
    record = {"job": job, "rejection": "no reason object"}
    (repo.rejected / f"{rejected}.json").write_text(json.dumps(record))
    (repo.queue / f"{rejected}.json").unlink()
    claim(repo, "w1", running)
    lease = json.loads(repo.lease(running).read_bytes())
    repo.lease(running).write_text(json.dumps({**lease, "pid": 10**25}))
    got = states(repo)
    assert got == {rejected: State.REJECTED, running: State.RUNNING}
