"""core.read.snapshot_pool: keys read by forked workers are read as this process reads them,
and a worker that fails leaves its keys to the caller instead of failing the scan."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from corekit import count_forks
from shipkit import wait_for

from core.read import snapshot_pool
from core.read.snapshot_pool import read_many
from core.read.snapshot_records import NO_SUMMARY, FileFacts, JobSummary

KEYS = [f"{i:032x}" for i in range(40)]


def facts_of(key: str) -> tuple[FileFacts, bool]:
    """Facts that depend on the key alone, with a summary for every other key."""
    n = int(key, 16)
    job = JobSummary("genjob.v2", key * 2, f"job {n}", ("a.py",), (("a.py", None),), float(n))
    summary = (True, job) if n % 2 else (False, NO_SUMMARY)
    return FileFacts(("queue",), *summary, "", None, None, (), f"w{n % 3}", n), n % 5 != 0


@pytest.fixture
def forks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Workers for as few as two keys on what looks like three cores; each fork counted."""
    made = count_forks(monkeypatch, cores=3)
    monkeypatch.setattr(snapshot_pool, "WORKER_KEYS_MIN", 2)
    monkeypatch.setattr(snapshot_pool, "CHUNK_KEYS_MIN", 3)
    return made


def test_workers_read_what_this_process_would(forks: list[int]) -> None:
    got = {key: (facts, settled) for key, facts, settled in read_many(KEYS, facts_of)}
    assert got == {k: facts_of(k) for k in KEYS}
    assert len(forks) == 2


def test_too_few_keys_or_other_threads_read_nothing_ahead(
    forks: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert list(read_many(KEYS[:3], facts_of)) == []
    monkeypatch.setattr(snapshot_pool, "_threads", lambda: 2)
    assert list(read_many(KEYS, facts_of)) == []
    assert forks == []


def test_a_worker_that_dies_leaves_its_keys_to_the_caller(forks: list[int], tmp_path: Path) -> None:
    parent = os.getpid()
    died = tmp_path / "died"

    def dies_in_a_worker(key: str) -> tuple[FileFacts, bool]:
        if os.getpid() != parent:
            died.touch()
            os._exit(3)
        wait_for(died.exists, "a worker to take a chunk and die")
        return facts_of(key)

    got = {key: (facts, settled) for key, facts, settled in read_many(KEYS, dies_in_a_worker)}
    assert forks, "workers were started"
    assert got.items() <= {k: facts_of(k) for k in KEYS}.items()
    assert len(got) < len(KEYS), "what the dead worker took was not read here"


def test_a_worker_that_raises_leaves_its_keys_to_the_caller(forks: list[int]) -> None:
    parent = os.getpid()

    def fails_in_a_worker(key: str) -> tuple[FileFacts, bool]:
        if os.getpid() != parent:
            raise OSError("disk on fire")
        return facts_of(key)

    got = {key: (facts, settled) for key, facts, settled in read_many(KEYS, fails_in_a_worker)}
    assert got.items() <= {k: facts_of(k) for k in KEYS}.items()
