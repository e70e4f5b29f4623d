"""core.review.discard and `genjob discard`: an INVALID job's unreadable files go aside, never away."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from corekit import cli, mint, receive

from core.errors import GenjobError, WrongState
from core.read.snapshot import take_snapshot
from core.review.discard import discard
from core.store.layout import Layout
from core.store.queue import requeue

BAD_KEY = "0" * 31 + "f"


def state(layout: Layout, key: str) -> str | None:
    row = take_snapshot(layout, disk_cache=False).rows.get(key)
    return row.state.value if row else None


def test_a_truncated_job_file_is_set_aside_with_its_fault(repo: Layout) -> None:
    bad = repo.job_file("queue", BAD_KEY)
    bad.write_bytes(b'{"schema": "genjob.v2", "instruction": ')
    assert state(repo, BAD_KEY) == "INVALID"
    done = discard(repo, BAD_KEY)
    assert not bad.exists()
    [kept] = done.kept
    assert kept.read_bytes() == b'{"schema": "genjob.v2", "instruction": '
    assert kept.parent == repo.log_dir(BAD_KEY) and kept.name.startswith(f"discarded-queue-{BAD_KEY}.json-")
    assert done.moved == (f"queue/{BAD_KEY}.json",) and "malformed JSON" in done.faults[0]
    assert state(repo, BAD_KEY) is None
    events = [json.loads(line) for line in repo.events.read_text().splitlines()]
    assert events[-1]["event"] == "discarded" and events[-1]["key"] == BAD_KEY


def test_a_bad_receipt_goes_aside_and_the_job_can_be_requeued(repo: Layout) -> None:
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"new\n"})
    repo.receipt(job.key).write_bytes(b"{not json")
    assert state(repo, job.key) == "INVALID"
    done = discard(repo, job.key)
    assert done.moved[0] == f"receipts/{job.key}.json"
    assert done.kept[0].read_bytes() == b"{not json"
    assert repo.job_file("running", job.key).exists()  # what parses stays
    assert state(repo, job.key) != "INVALID"
    requeue(repo, job.key, force=True)
    assert state(repo, job.key) == "QUEUED"


def test_a_symlinked_evidence_folder_is_refused_and_nothing_moves(repo: Layout, tmp_path: Path) -> None:
    bad = repo.job_file("queue", BAD_KEY)
    bad.write_bytes(b"[]")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    repo.log_dir(BAD_KEY).symlink_to(elsewhere)
    with pytest.raises(GenjobError):
        discard(repo, BAD_KEY)
    assert bad.read_bytes() == b"[]" and not any(elsewhere.iterdir())


def test_a_job_that_parses_is_refused_and_nothing_moves(repo: Layout) -> None:
    job = mint(repo)
    with pytest.raises(WrongState, match="only an INVALID job is discarded"):
        discard(repo, job.key)
    assert repo.job_file("queue", job.key).exists()
    assert not repo.log_dir(job.key).exists()


def test_cli_discard_names_what_it_kept(repo: Layout) -> None:
    repo.job_file("queue", BAD_KEY).write_bytes(b"[]")
    res = cli("discard", "123456", root=repo.root)
    assert res.exit_code == 2 and "no job key starts with" in res.output
    res = cli("discard", "0000000000", root=repo.root)
    assert res.exit_code == 0, res.output
    assert f"set aside .gen/queue/{BAD_KEY}.json as .gen/logs/{BAD_KEY}/discarded-queue-" in res.output
    assert "it did not parse:" in res.output
    again = cli("discard", BAD_KEY, root=repo.root)
    assert again.exit_code == 2 and "no job has this key; `genjob ls` lists the jobs" in again.output
