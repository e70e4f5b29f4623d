"""One consistent read of `.gen/`: states, problems, the index, and files that do not parse."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from corekit import (
    dead_pid,
    make_repo,
    mint,
    receive,
    set_config,
    sha,
    write_jobs,
    write_receipt,
)
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import GenjobError
from core.model.lifecycle import State
from core.read import listing_index, rows, snapshot
from core.read.snapshot import job_row, refresh, take_snapshot
from core.review.apply_job import apply_job
from core.store.config import read_repository_config, runs_digest
from core.store.events import last_claim
from core.store.layout import Layout
from core.store.pins import pin_config, pins_file
from core.store.queue import claim, reject, requeue
from core.store.signing import public_key_path, trust_repository

HOUR_NS = 3600 * 10**9


def age(path: Path, seconds: int = 3600) -> None:
    """Make a file look written long ago, so the index may keep what was read from it."""
    old = time.time_ns() - seconds * 10**9
    os.utime(path, ns=(old, old), follow_symlinks=False)


def states(layout: Layout) -> dict[str, State]:
    return {k: r.state for k, r in take_snapshot(layout).rows.items()}


def running_orphaned_rejected_received_stale(repo: Layout, signer: Ed25519PrivateKey) -> list[str]:
    """One job in each of these states (the running one held by w1), by key in that order."""
    running, orphaned, rejected = write_jobs(repo, 3, prefix="mixed")
    claim(repo, "w1", running)
    claim(repo, "w2", orphaned, pid=dead_pid())
    reject(repo, rejected, "no")
    ok = mint(repo, "ok", ["src/app.py"])
    receive(repo, ok.key, {"src/app.py": b"x"}, signer)
    stale = mint(repo, "stale", ["src/util.py"])
    receive(repo, stale.key, {"src/util.py": b"y"}, signer)
    (repo.root / "src/util.py").write_text("moved on\n")
    return [running, orphaned, rejected, ok.key, stale.key]


def test_every_stored_and_derived_state(repo: Layout, signer: Ed25519PrivateKey) -> None:
    (queued,) = write_jobs(repo, 1)
    running, orphaned, rejected, ok, stale = running_orphaned_rejected_received_stale(repo, signer)
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
        ok: State.RECEIVED,
        stale: State.STALE,
        failed.key: State.FAILED,
        applied.key: State.APPLIED,
    }
    assert snap.counts[State.QUEUED] == 1 and sum(snap.counts.values()) == 8
    assert snap.rows[stale].problems == ("src/util.py: changed since the job was minted",)
    assert snap.rows[rejected].problems == ("rejected: no",)
    assert snap.rows[orphaned].problems[0].startswith("lease stale")
    assert snap.rows[running].worker == "w1" and snap.rows[running].attempts is None
    assert counted(repo, running) == (State.RUNNING, 1, "w1")
    assert snap.rows[ok].receipt_status == "ok"
    row = snap.rows[ok].to_dict()
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
    set_config(repo, "[policy]\nrequire_signature = 'yes'\n")
    snap = take_snapshot(repo)
    assert snap.config_error is not None and "config.toml: policy.require_signature" in snap.config_error
    assert snap.signature_required
    set_config(repo, "[policy]\nrequire_signature = false\n")
    assert not take_snapshot(repo).signature_required


def test_the_policy_kept_in_the_index_follows_both_config_files(
    repo: Layout, private_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index keeps what config.toml says (so `ls` need not parse it), until it or the
    operator's config.toml, which sets a floor under it, changes."""

    set_config(repo, '[policy]\nrequire_signature = false\n\n[checks.lint]\nrun = "true"\nsandbox = "none"\n')
    age(repo.config)
    age(pins_file(repo.root))
    snap = take_snapshot(repo)
    assert (snap.signature_required, snap.config_error, snap.unsandboxed_checks) == (False, None, ("lint",))
    parse = snapshot._config_policy

    def not_again(path: str) -> tuple[bool, str | None, tuple[str, ...], str | None]:
        raise AssertionError("config.toml parsed again though neither file changed")

    monkeypatch.setattr(snapshot, "_config_policy", not_again)
    cached = take_snapshot(repo)
    assert (cached.signature_required, cached.unsandboxed_checks) == (False, ("lint",))
    monkeypatch.setattr(snapshot, "_config_policy", parse)
    operator = private_config / "genjob" / "config.toml"
    operator.parent.mkdir(mode=0o700, exist_ok=True)
    operator.write_text("[policy]\nrequire_signature = true\n")
    age(operator)
    assert take_snapshot(repo).signature_required
    operator.unlink()
    assert not take_snapshot(repo).signature_required
    set_config(repo, '[policy]\nrequire_signature = false\n\n[checks.lint]\nrun = "true"\n')
    assert take_snapshot(repo).unsandboxed_checks == ()


def settle(layout: Layout) -> None:
    """Age every file under `.gen/`, so the index may keep what is read from them."""
    for dirpath, _, names in os.walk(layout.gen):
        for name in names:
            age(Path(dirpath, name))


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files under `.gen/` a snapshot reads, as folder/name."""
    seen: list[str] = []
    real = rows.read_with_stat

    def counting(path: str | Path, *args: Any, **kwargs: Any) -> tuple[bytes, os.stat_result]:
        seen.append("/".join(Path(path).parts[-2:]))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(rows, "read_with_stat", counting)
    return seen


def replace_with(path: Path, data: bytes) -> None:
    """Put a new file (a new inode) at `path`, as genjob's own writers do."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


INDEX = listing_index.NAME


def test_the_index_is_reused_by_the_next_process_and_checked(repo: Layout, reads: list[str]) -> None:
    keys = write_jobs(repo, 5)
    settle(repo)
    first = take_snapshot(repo)
    assert (repo.cache / INDEX).exists() and len(reads) == 5
    reads.clear()
    assert take_snapshot(repo).rows == first.rows
    assert reads == []
    path = repo.queue / f"{keys[0]}.json"
    replace_with(path, path.read_bytes())
    age(path)
    again = take_snapshot(repo).rows
    assert {k: r._replace(modified=0) for k, r in again.items()} == {
        k: r._replace(modified=0) for k, r in first.rows.items()
    }
    assert again[keys[0]].modified == os.stat(path).st_mtime_ns
    assert reads == [f"queue/{keys[0]}.json"], "a new inode under the same name is read again"
    replace_with(path, b"{}")
    assert take_snapshot(repo).rows[keys[0]].state is State.INVALID


def test_a_file_still_being_written_is_read_again_until_it_settles(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    path = repo.queue / f"{key}.json"
    data = path.read_bytes()
    path.write_bytes(data[:20])  # a writer that is not done yet, in place (same inode)
    assert states(repo)[key] is State.INVALID
    path.write_bytes(data)
    assert states(repo)[key] is State.QUEUED


def counted(repo: Layout, key: str) -> tuple[State, int | None, str]:
    """A job's state, and the claims and worker its attempts file gives its row."""
    row = job_row(repo, key, attempts=True)
    assert row is not None
    return row.state, row.attempts, row.worker


def test_a_cached_row_follows_claims_requeues_and_attempts(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    settle(repo)
    row = take_snapshot(repo).rows[key]
    assert (row.state, row.attempts) == (State.QUEUED, None), "a listing reads no attempts file"
    assert counted(repo, key) == (State.QUEUED, 0, "")
    claim(repo, "w1", key)
    assert take_snapshot(repo).rows[key].worker == "w1"
    assert counted(repo, key) == (State.RUNNING, 1, "w1")
    requeue(repo, key, force=True)  # back in queue/ under the same inode; the attempt recorded
    settle(repo)
    assert take_snapshot(repo).rows[key].state is State.QUEUED
    assert counted(repo, key) == (State.QUEUED, 1, "w1")
    claim(repo, "w2", key)
    requeue(repo, key, force=True)
    settle(repo)
    assert take_snapshot(repo).rows[key].state is State.QUEUED
    assert counted(repo, key) == (State.QUEUED, 2, "w2")


def test_a_cached_queued_row_shows_running_once_claimed(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    settle(repo)
    assert states(repo)[key] is State.QUEUED
    claim(repo, "w1", key)
    settle(repo)
    assert states(repo)[key] is State.RUNNING
    assert take_snapshot(repo).rows[key].state is State.RUNNING


def test_a_lease_is_read_again_whenever_its_file_changes(repo: Layout, reads: list[str]) -> None:
    key = write_jobs(repo, 1)[0]
    claim(repo, "w1", key)
    settle(repo)
    assert take_snapshot(repo).rows[key].state is State.RUNNING
    reads.clear()
    assert take_snapshot(repo).rows[key].state is State.RUNNING
    assert reads == [], "a lease file that is the same file is not read again"
    lease = json.loads(repo.lease(key).read_bytes())
    repo.lease(key).write_text(json.dumps({**lease, "heartbeat": 1.0, "ttl": 1.0}))  # in place
    age(repo.lease(key))
    assert take_snapshot(repo).rows[key].state is State.ORPHANED
    assert reads == [f"running/{key}.lease"]
    replace_with(repo.lease(key), json.dumps(lease).encode())  # a heartbeat: a new file
    assert take_snapshot(repo).rows[key].state is State.RUNNING, "a lease replaced just now is read"
    assert take_snapshot(repo).rows[key].state is State.RUNNING
    assert reads.count(f"running/{key}.lease") == 3, "one that may still change is not kept"
    assert refresh(repo, [key])[key].state is State.RUNNING  # type: ignore[union-attr]


def test_heartbeats_alone_do_not_write_the_index_again(repo: Layout, reads: list[str]) -> None:
    """A worker replaces its lease at each heartbeat: the listing reads the new lease and
    leaves the index as it was, until something else changes."""
    running, queued = write_jobs(repo, 2)
    claim(repo, "w1", running)
    settle(repo)
    take_snapshot(repo)
    before = os.stat(repo.cache / INDEX)
    lease = json.loads(repo.lease(running).read_bytes())
    replace_with(repo.lease(running), json.dumps({**lease, "worker": "w1-again"}).encode())
    age(repo.lease(running))
    reads.clear()
    for _ in range(2):
        assert take_snapshot(repo).rows[running].worker == "w1-again"
    assert reads == [f"running/{running}.lease"] * 2, "read each time, as nothing else changed"
    assert os.stat(repo.cache / INDEX).st_ino == before.st_ino
    os.rename(repo.queue / f"{queued}.json", repo.rejected / f"{queued}.json")
    take_snapshot(repo)
    assert os.stat(repo.cache / INDEX).st_ino != before.st_ino
    reads.clear()
    assert take_snapshot(repo).rows[running].worker == "w1-again" and reads == []


def test_a_lease_kept_is_judged_against_the_clock_of_each_scan(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    claim(repo, "w1", key, ttl=60)
    settle(repo)
    heartbeat = json.loads(repo.lease(key).read_bytes())["heartbeat"]
    assert take_snapshot(repo, now=heartbeat + 1).rows[key].state is State.RUNNING
    assert take_snapshot(repo, now=heartbeat + 3600).rows[key].state is State.ORPHANED


def test_a_lease_turned_into_a_link_or_removed_is_not_taken_from_the_index(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    claim(repo, "w1", key)
    settle(repo)
    assert take_snapshot(repo).rows[key].state is State.RUNNING
    elsewhere = repo.root / "lease-elsewhere"
    os.replace(repo.lease(key), elsewhere)
    os.symlink(elsewhere, repo.lease(key))
    row = take_snapshot(repo).rows[key]
    assert row.state is State.ORPHANED and any("lease" in p for p in row.problems)
    repo.lease(key).unlink()
    assert take_snapshot(repo, now=time.time() + 3600).rows[key].state is State.ORPHANED


def test_a_received_job_turns_stale_in_the_next_process(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo, "x", ["src/app.py"])
    receive(repo, job.key, {"src/app.py": b"x"}, signer)
    settle(repo)
    age(repo.root / "src/app.py")
    assert states(repo)[job.key] is State.RECEIVED
    (repo.root / "src/app.py").write_text("moved on\n")
    assert states(repo)[job.key] is State.STALE


def test_a_folder_recorded_as_settled_is_listed_again_once_it_changes(
    repo: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rows, "RACY_NS", 0)  # everything counts as settled at once
    a, b = write_jobs(repo, 2)
    assert set(states(repo)) == {a, b}
    (repo.queue / f"{a}.json").unlink()
    c = write_jobs(repo, 1, prefix="later")[0]
    assert set(states(repo)) == {b, c}
    os.rename(repo.queue / f"{b}.json", repo.rejected / f"{b}.json")
    assert states(repo)[b] is State.INVALID, "a bare job document is not a rejection record"


def test_a_corrupt_index_is_ignored(repo: Layout) -> None:
    keys = write_jobs(repo, 2)
    repo.cache.joinpath(INDEX).write_bytes(b"\x00garbage")
    assert set(states(repo)) == set(keys)
    repo.cache.joinpath(INDEX).write_bytes(b"")
    assert set(states(repo)) == set(keys)
    shutil.rmtree(repo.cache)
    assert set(states(repo)) == set(keys)


def test_a_truncated_damaged_or_foreign_index_is_ignored(repo: Layout, tmp_path: Path) -> None:
    write_jobs(repo, 3)
    mint(repo, "x", ["src/app.py"])
    settle(repo)
    want = take_snapshot(repo).rows
    index = repo.cache / INDEX
    blob = index.read_bytes()
    other = make_repo(tmp_path / "other")
    write_jobs(other, 2)
    settle(other)
    take_snapshot(other)
    head, body = blob.split(b"\n", 1)
    forged_body = body.replace(b'"QUEUED"', b'"APPLIED"', 1)
    candidates = [
        blob[: len(blob) // 2],
        blob[:-1],
        blob + b"\0",
        bytes(b ^ 0xFF if i % 41 == 7 else b for i, b in enumerate(blob)),
        b"{}\n[]",
        head + b"\n" + forged_body,
        blob.replace(b"listing index 1", b"listing index 2", 1),
        (other.cache / INDEX).read_bytes(),
    ]
    for bad in candidates:
        index.write_bytes(bad)
        assert take_snapshot(repo).rows == want
        index.write_bytes(bad)
        assert refresh(repo, want) == want


def test_an_index_read_again_gives_the_rows_it_was_made_of(repo: Layout, reads: list[str]) -> None:
    keys = write_jobs(repo, 10)
    claim(repo, "w1")
    settle(repo)
    first = take_snapshot(repo).rows
    reads.clear()
    assert take_snapshot(repo).rows == first
    assert reads == [], "no file, the lease included, is read again"
    assert set(first) == set(keys)


def test_a_tree_file_rewritten_within_a_clock_tick_is_rehashed(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    job = mint(repo, "x", ["src/app.py"])
    receive(repo, job.key, {"src/app.py": b"x"}, signer)
    target = repo.root / "src/app.py"
    original = target.read_bytes()
    future = time.time_ns() + HOUR_NS
    os.utime(target, ns=(future, future))
    assert take_snapshot(repo).rows[job.key].state is State.RECEIVED
    target.write_bytes(original.upper())
    os.utime(target, ns=(future, future))
    assert take_snapshot(repo).rows[job.key].state is State.STALE
    assert take_snapshot(repo).rows[job.key].state is State.STALE


def test_a_symlinked_parent_in_the_tree_makes_a_job_stale(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    job = mint(repo, "x", ["src/app.py"])
    receive(repo, job.key, {"src/app.py": b"x"}, signer)
    shutil.copytree(repo.root / "src", tmp_path / "src")
    shutil.rmtree(repo.root / "src")
    (repo.root / "src").symlink_to(tmp_path / "src")
    assert states(repo)[job.key] is State.STALE


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tree files a snapshot hashes, as paths; each snapshot starts as a new process would."""
    seen: list[str] = []
    real = rows.sha256_file

    def counting(path: Path) -> str:
        seen.append(str(path))
        return real(path)

    monkeypatch.setattr(rows, "sha256_file", counting)
    monkeypatch.setattr(rows, "_HASHED", {})
    return seen


def test_a_row_kept_is_neither_read_nor_hashed_again_while_its_files_hold(
    repo: Layout, signer: Ed25519PrivateKey, reads: list[str], hashed: list[str]
) -> None:
    queued = write_jobs(repo, 1)[0]
    job = mint(repo, "x", ["src/app.py"])
    receive(repo, job.key, {"src/app.py": b"x"}, signer)
    settle(repo)
    age(repo.root / "src/app.py")
    first = take_snapshot(repo).rows
    assert first[job.key].state is State.RECEIVED and hashed
    reads.clear(), hashed.clear(), rows._HASHED.clear()
    assert take_snapshot(repo).rows == first
    assert reads == [] and hashed == [], "the index keeps the rows and the tree files' hashes"
    (repo.root / "src/app.py").write_text("moved on\n")
    age(repo.root / "src/app.py")
    again = take_snapshot(repo).rows
    assert again[job.key].state is State.STALE and again[queued].state is State.STALE
    assert sorted(reads) == sorted(
        [f"queue/{queued}.json", f"running/{job.key}.json", f"receipts/{job.key}.json"]
    )


def test_an_applied_job_whose_receipt_stays_is_kept_without_its_tree_files(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    """A closed job keeps no inputs: its row was judged against no tree file, whatever its
    receipt says, and listing it again (the tree changed or not) never looks for one."""
    job = mint(repo, "x", ["src/app.py"])
    receive(repo, job.key, {"src/app.py": b"new\n"}, signer)
    apply_job(repo, job.key)
    assert repo.receipt(job.key).exists(), "apply keeps the receipt as evidence"
    settle(repo)
    age(repo.root / "src/app.py")
    first = take_snapshot(repo).rows[job.key]
    assert first.state is State.APPLIED and first.receipt_status == "ok"
    index = listing_index.read_index(repo.cache / INDEX, str(repo.gen))
    assert index is not None and job.key in index.rows and index.tree == {}
    assert take_snapshot(repo).rows[job.key] == first
    (repo.root / "src/app.py").write_text("moved on\n")
    assert take_snapshot(repo).rows[job.key] == first


def test_a_parent_moved_aside_and_linked_back_makes_a_kept_row_stale(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, hashed: list[str]
) -> None:
    """The tree file is the same inode with the same times, reached through a link: the row
    kept for it does not hold."""
    job = mint(repo, "x", ["src/app.py"])
    receive(repo, job.key, {"src/app.py": b"x"}, signer)
    settle(repo)
    age(repo.root / "src/app.py")
    assert states(repo)[job.key] is State.RECEIVED
    os.rename(repo.root / "src", tmp_path / "src")
    (repo.root / "src").symlink_to(tmp_path / "src")
    rows._HASHED.clear()
    assert states(repo)[job.key] is State.STALE


def test_a_row_that_met_a_lease_or_the_clock_is_made_again_each_time(repo: Layout) -> None:
    running, orphaned = write_jobs(repo, 2)
    claim(repo, "w1", running)
    claim(repo, "w2", orphaned, pid=dead_pid())
    settle(repo)
    take_snapshot(repo)
    index = listing_index.read_index(repo.cache / INDEX, str(repo.gen))
    assert index is not None and set(index.known) == {running, orphaned} and index.rows == {}
    assert states(repo) == {running: State.RUNNING, orphaned: State.ORPHANED}


def test_refresh_rederives_single_keys(repo: Layout) -> None:
    a, b = write_jobs(repo, 2)
    take_snapshot(repo, disk_cache=False)
    claim(repo, "w1", a)
    (repo.queue / f"{b}.json").unlink()
    changed = refresh(repo, [a, b])
    assert changed[b] is None
    row = changed[a]
    assert row is not None and row.state is State.RUNNING
    assert set(take_snapshot(repo, disk_cache=False).rows) == {a}


def test_refresh_reads_only_the_keys_it_is_given(repo: Layout, reads: list[str]) -> None:
    a, b = write_jobs(repo, 2)
    first = take_snapshot(repo).rows
    reads.clear()
    assert refresh(repo, [a]) == {a: first[a]}
    assert reads == [f"queue/{a}.json"], "no listing, no other job"
    path = repo.queue / f"{b}.json"
    replace_with(path, b"[]")
    row = refresh(repo, [b])[b]
    assert row is not None and row.state is State.INVALID
    assert take_snapshot(repo).rows[b].state is State.INVALID


def test_a_state_filter_reads_only_the_jobs_that_may_be_in_it(
    repo: Layout, signer: Ed25519PrivateKey, reads: list[str]
) -> None:
    """`ls --state RECEIVED` reads the jobs in running/ and no queued or finished one."""
    queued = write_jobs(repo, 3, prefix="queued")
    running, orphaned, rejected, ok, stale = running_orphaned_rejected_received_stale(repo, signer)
    settle(repo)
    reads.clear()
    got = take_snapshot(repo, states={State.RECEIVED})
    assert set(got.rows) == {ok}
    read = {name.split("/")[1].split(".")[0] for name in reads}
    assert read.isdisjoint([*queued, rejected]) and ok in read
    assert set(take_snapshot(repo, states={State.QUEUED, State.REJECTED}).rows) == {*queued, rejected}
    assert not (repo.cache / INDEX).exists(), "a partial listing keeps no index"
    assert {k: r.state for k, r in take_snapshot(repo, states={State.STALE, State.RUNNING}).rows.items()} == {
        stale: State.STALE,
        running: State.RUNNING,
    }
    assert orphaned in take_snapshot(repo, states={State.ORPHANED}).rows
    os.link(repo.queue / f"{queued[0]}.json", repo.running / f"{queued[0]}.json")  # as a crash leaves it
    assert set(take_snapshot(repo, states={State.INCONSISTENT}).rows) == {queued[0]}
    assert queued[0] not in take_snapshot(repo, states={State.QUEUED, State.RUNNING}).rows
    (repo.applied / "not-a-key.json").write_bytes(b"{}")
    assert set(take_snapshot(repo, states={State.INVALID}).rows) == {"not-a-key"}
    reads.clear()
    assert take_snapshot(repo, states={State.APPLIED}).rows == {}
    assert not any(name.startswith("queue/") for name in reads), reads


def test_candidates_are_counted_and_a_closed_batch_is_received(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    from core.store.candidate_store import Holder, commit_candidate, staging
    from core.store.queue import Claimer
    from core.store.receipts import make_receipt

    job = mint(repo, "best of two", ["src/app.py"])
    held = Claimer(repo, "w1").claim(job.key)
    assert take_snapshot(repo).rows[job.key].state is State.RUNNING

    def commit(number: int, status: str) -> None:
        folder = staging(repo, job.key, 1, number)
        outputs = {}
        if status == "ok":
            (folder / "out/src").mkdir(parents=True)
            (folder / "out/src/app.py").write_bytes(b"x\n")
            outputs = {"src/app.py": sha(b"x\n")}
        receipt = make_receipt(held.job, status, outputs, "w1")
        commit_candidate(repo, held.job, number, [1, 2], receipt, {}, Holder("w1", 1, signer))

    commit(1, "rejected")
    row = refresh(repo, [job.key])[job.key]
    assert row is not None and (row.state, row.candidates) == (State.RUNNING, 1), "the batch runs on"
    commit(2, "ok")
    row = refresh(repo, [job.key])[job.key]
    assert row is not None and (row.state, row.candidates) == (State.RECEIVED, 2)
    assert take_snapshot(repo).rows[job.key].candidates == 2
    again = take_snapshot(repo).rows[job.key]
    assert (again.state, again.candidates, again.to_dict()["candidates"]) == (State.RECEIVED, 2, 2)

    failed = mint(repo, "best of one", ["src/util.py"])
    held = Claimer(repo, "w1").claim(failed.key)
    receipt = make_receipt(held.job, "aborted", {}, "w1")
    commit_candidate(repo, held.job, 1, [1], receipt, {}, Holder("w1", 1, signer))
    assert states(repo)[failed.key] is State.FAILED, "no candidate came back ok"
    queued = mint(repo, "queued beside a batch's folder", ["src/app.py"])
    (repo.gen / "candidates" / queued.key).mkdir()
    settle(repo)
    age(repo.root / "src/app.py")
    take_snapshot(repo)
    index = listing_index.read_index(repo.cache / INDEX, str(repo.gen))
    assert index is not None and {job.key, failed.key, queued.key} <= index.known.keys()
    assert not index.rows.keys() & {job.key, failed.key, queued.key}, "a row that counted candidates"


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


KEY = "c" * 32


def attempts_reference(data: bytes) -> tuple[int, str]:
    """Every line parsed with `json.loads`, an object whose event is "claimed" a claim (as
    the queue counts them for its next token): what the listing must agree with."""
    claimed, worker = 0, ""
    for line in data.splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("event") == "claimed":
            claimed += 1
            worker = str(obj["worker"]) if obj.get("worker") else worker
    return claimed, worker


NUMBERS = st.one_of(
    st.integers(-(10**25), 10**25),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["01", "1.", "-0", "1e5", "1E+5", "2.5e-3", "7" * 30, "NaN", "-Infinity"]),
)
WORKERS = st.one_of(st.text(max_size=12), st.sampled_from(["w1", "", 'a"b', "a\\b", "é", "\x7f", "x\n"]))


@st.composite
def claim_lines(draw: st.DrawFn) -> bytes:
    at, attempt = draw(NUMBERS), draw(NUMBERS)
    worker = draw(st.one_of(WORKERS, st.integers(), st.none()))
    parts = {"at": at, "attempt": attempt, "event": "claimed", "worker": worker}
    if draw(st.booleans()):
        parts.pop(draw(st.sampled_from(sorted(parts))))
    text = ",".join(
        f"{json.dumps(k)}:{v if isinstance(v, str) and k in ('at', 'attempt') else json.dumps(v)}"
        for k, v in parts.items()
    )
    line = "{" + text + "}"
    mangle = draw(st.sampled_from(["", "space", "dup", "cut", "bytes"]))
    if mangle == "space":
        line = line.replace(":", ": ", 1)
    elif mangle == "dup":
        line = line[:-1] + ',"worker":"dup"}'
    elif mangle == "cut":
        line = line[: draw(st.integers(0, len(line)))]
    data = line.encode("utf-8", "surrogatepass")
    if mangle == "bytes":
        data = data.replace(b"w", b"\xff")
    return data


@st.composite
def written_claims(draw: st.DrawFn) -> bytes:
    """Claim lines as genjob writes them, some just off that form."""
    entry = {
        "at": draw(st.one_of(st.floats(0, 4e9), st.integers(0, 10**22))),
        "event": "claimed",
        "attempt": draw(st.integers(-5, 10**21)),
        "worker": draw(st.text(st.characters(min_codepoint=0x1F, max_codepoint=0x80), max_size=8)),
    }
    return json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()


@settings(max_examples=400)
@given(
    st.lists(
        st.one_of(claim_lines(), written_claims(), st.sampled_from([b"", b'{"event":"requeued"}', b"[1]"])),
        max_size=4,
    )
)
def test_attempts_are_counted_as_json_loads_reads_them(lines: list[bytes]) -> None:
    data = b"\n".join(lines)
    with tempfile.TemporaryDirectory() as folder:
        layout = Layout(Path(folder))
        layout.attempts_file(KEY).parent.mkdir(parents=True)
        layout.attempts_file(KEY).write_bytes(data)
        assert last_claim(layout, KEY) == attempts_reference(data)


@pytest.mark.parametrize("move", ["edit", "delete", "symlink", "create"])
def test_a_queued_job_whose_inputs_moved_is_stale_before_it_ships(
    repo: Layout, tmp_path: Path, move: str
) -> None:
    """Edited, deleted, swapped for a link, or (for a new file) made since the mint."""
    job = mint(repo, "x", [], new=["src/new.py"]) if move == "create" else mint(repo, "x", ["src/app.py"])
    untouched = mint(repo, "y", ["src/util.py"])
    assert states(repo)[job.key] is State.QUEUED
    target = repo.root / ("src/new.py" if move == "create" else "src/app.py")
    if move in ("edit", "create"):
        target.write_text("moved on\n")
    elif move == "delete":
        target.unlink()
    else:
        (tmp_path / "app.py").write_bytes(target.read_bytes())
        target.unlink()
        target.symlink_to(tmp_path / "app.py")
    for disk_cache in (True, True, False):  # the index written, then read
        rows = take_snapshot(repo, disk_cache).rows
        assert rows[job.key].state is State.STALE and rows[untouched.key].state is State.QUEUED
    assert any("changed since the job was minted" in p for p in rows[job.key].problems)
    assert refresh(repo, [job.key])[job.key].state is State.STALE  # type: ignore[union-attr]
    assert set(take_snapshot(repo, states={State.STALE}).rows) == {job.key}
    assert set(take_snapshot(repo, states={State.QUEUED}).rows) == {untouched.key}


def test_a_stale_queued_job_turns_queued_again_when_its_input_is_put_back(repo: Layout) -> None:
    job = mint(repo, "x", ["src/app.py"])
    target = repo.root / "src/app.py"
    original = target.read_bytes()
    target.write_text("moved on\n")
    assert states(repo)[job.key] is State.STALE
    target.write_bytes(original)
    assert states(repo)[job.key] is State.QUEUED


SETTLED_NS = 10**18  # 2001: every file counts as settled, its mtime the same at each step
STEPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["mint", "claim", "orphan", "receive", "fail", "reject", "apply", "requeue", "edit", "unlease"]
        ),
        st.integers(0, 5),
        st.sampled_from(["src/app.py", "src/util.py"]),
    ),
    min_size=1,
    max_size=10,
)


def _step(repo: Layout, signer: Ed25519PrivateKey, step: tuple[str, int, str]) -> None:
    """One change to the repository as genjob makes it (a step that does not apply is skipped)."""
    what, pick, path = step
    listed = take_snapshot(repo, disk_cache=False).rows
    queued = sorted(
        k for k, r in listed.items() if r.state in (State.QUEUED, State.STALE) and r.folders == ("queue",)
    )
    running = sorted(k for k, r in listed.items() if r.folders == ("running",))
    received = sorted(k for k, r in listed.items() if r.state is State.RECEIVED)
    chosen = {
        "claim": queued,
        "orphan": queued,
        "receive": queued,
        "fail": queued,
        "reject": queued + running,
        "apply": received,
        "requeue": running,
        "unlease": running,
    }.get(what, [None])
    if not chosen:
        return
    key = chosen[pick % len(chosen)]
    with contextlib.suppress(GenjobError):
        if what == "mint":
            mint(repo, f"change {len(listed)} in {path}", [path])
        elif what in ("claim", "orphan"):
            claim(repo, "w1", key, pid=os.getpid() if what == "claim" else dead_pid())
        elif what in ("receive", "fail"):
            receive(
                repo,
                str(key),
                {listed[str(key)].allowed_paths[0]: b"new\n"} if what == "receive" else {},
                signer,
                status="ok" if what == "receive" else "aborted",
            )
        elif what == "reject":
            reject(repo, str(key), "no")
        elif what == "apply":
            apply_job(repo, str(key))
        elif what == "requeue":
            requeue(repo, str(key), force=True)
        elif what == "edit":
            (repo.root / path).write_bytes(f"# edit {pick}\n".encode())
        else:
            repo.lease(str(key)).unlink(missing_ok=True)
    for folder in (repo.gen, repo.root / "src"):
        for dirpath, _, names in os.walk(folder):
            for name in names:
                os.utime(Path(dirpath, name), ns=(SETTLED_NS, SETTLED_NS), follow_symlinks=False)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(STEPS)
def test_the_index_never_changes_what_a_listing_says(
    signer: Ed25519PrivateKey, tmp_path: Path, steps: list[tuple[str, int, str]]
) -> None:
    """Whatever genjob did since the last listing, the next one with the index says what
    one without it says, row for row, in a new process (no hash kept in memory)."""
    with tempfile.TemporaryDirectory(dir=tmp_path) as folder:
        repo = make_repo(Path(folder) / "repo")
        trust_repository(repo, public_key_path())
        pin_config(repo.root, runs_digest(read_repository_config(repo.config)))
        for step in [
            ("mint", 0, "src/app.py"),
            ("mint", 1, "src/util.py"),
            ("mint", 2, "src/app.py"),
            *steps,
        ]:
            _step(repo, signer, step)
            now = time.time()
            for _ in range(2):  # the index as the last listing left it, then as this one did
                rows._HASHED.clear()
                cached = take_snapshot(repo, now=now).rows
                rows._HASHED.clear()
                assert cached == take_snapshot(repo, disk_cache=False, now=now).rows, step
