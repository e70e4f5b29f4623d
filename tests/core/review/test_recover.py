"""Recovery: the documented rules R1-R6, each on the state a crash can leave."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from corekit import cli, make_repo, mint, receive, sha, v2_job, write_jobs
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.model.canonical import canonical
from core.model.models import job_bytes
from core.read.snapshot import take_snapshot
from core.review.apply_job import apply_job
from core.review.recover import recover
from core.store.durable import folder, temp_at
from core.store.layout import Layout
from core.store.queue import claim, locate, reject


def folders_of(layout: Layout, key: str) -> list[str]:
    return [f for f in ("queue", "running", "applied", "rejected") if layout.job_file(f, key).exists()]


def test_nothing_to_recover(repo: Layout) -> None:
    write_jobs(repo, 3)
    assert recover(repo).lines == []
    assert not repo.events.exists()


def test_r1_finishes_an_interrupted_apply(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"new\n"}, signer)
    journal = {
        "key": job.key,
        "digest": job.digest,
        "targets": [{"path": "src/app.py", "before": job.input_digest("src/app.py"), "after": sha(b"new\n")}],
        "by": "tests",
    }
    repo.journal_file(job.key).write_bytes(canonical(journal))
    report = recover(repo).lines
    assert report[0] == f"R1 {job.key}: finished the interrupted apply (1 file(s))"
    assert report[1:] == ["R9 removed 1 kept input(s) no job in flight uses, freeing 25 bytes"]  # its base
    assert (repo.root / "src/app.py").read_bytes() == b"new\n"
    assert folders_of(repo, job.key) == ["applied"]
    assert '"event":"recovered"' in repo.events.read_text()


def test_r1_rolls_back_what_it_cannot_finish(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"new\n"}, signer)
    journal = {
        "key": job.key,
        "targets": [{"path": "src/app.py", "before": job.input_digest("src/app.py"), "after": sha(b"new\n")}],
    }
    repo.journal_file(job.key).write_bytes(canonical(journal))
    (repo.root / "src/app.py").write_text("a third version\n")
    report = recover(repo)
    [line] = report.lines
    assert line.startswith(f"R1 {job.key}: rolled back the interrupted apply: {job.key}: apply stopped: ")
    assert "src/app.py" in line
    assert "during the apply" in line and f"genjob replay {job.key}" in line
    assert report.left == []
    assert not repo.journal_file(job.key).exists()
    assert (repo.root / "src/app.py").read_text() == "a third version\n"


def test_r2_applied_wins_and_a_rejection_is_kept_aside(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"new\n"}, signer)
    running_bytes = (repo.running / f"{job.key}.json").read_bytes()
    apply_job(repo, job.key)
    (repo.running / f"{job.key}.json").write_bytes(running_bytes)
    rejected = {"job": job.document(), "rejection": {"reason": "late", "by": "operator"}}
    repo.job_file("rejected", job.key).write_bytes(canonical(rejected))
    assert take_snapshot(repo).rows[job.key].state == "INCONSISTENT"
    report = recover(repo).lines
    assert f"R2 {job.key}: applied wins; removed the copy in running/" in report
    assert any(
        line.startswith(f"R2 {job.key}: applied wins; moved the rejected copy to .gen/logs/")
        for line in report
    )
    assert folders_of(repo, job.key) == ["applied"]
    assert len(os.listdir(repo.log_dir(job.key))) == 1
    assert take_snapshot(repo).rows[job.key].state == "APPLIED"


def test_r3_rejected_wins_over_a_queued_copy(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    data = (repo.queue / f"{key}.json").read_bytes()
    reject(repo, key, "no")
    (repo.queue / f"{key}.json").write_bytes(data)
    assert recover(repo).lines == [f"R3 {key}: rejected wins; removed the copy in queue/"]
    assert folders_of(repo, key) == ["rejected"]


def test_r4_a_claim_that_happened_wins(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    data = (repo.queue / f"{key}.json").read_bytes()
    claim(repo, "w1")
    (repo.queue / f"{key}.json").write_bytes(data)
    assert take_snapshot(repo).rows[key].problems[-1].startswith("R4:")
    assert recover(repo).lines == [f"R4 {key}: running wins; removed the copy in queue/"]
    assert folders_of(repo, key) == ["running"]
    assert locate(repo, key).folder == "running"


def test_a_copy_with_other_content_is_moved_aside_never_deleted(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    claim(repo, "w1")
    other = b'{"not": "the same job"}'
    (repo.queue / f"{key}.json").write_bytes(other)
    [line] = recover(repo).lines
    assert line.startswith(f"R4 {key}: running wins; moved the queue copy to .gen/logs/{key}/queue-")
    [kept] = os.listdir(repo.log_dir(key))
    assert (repo.log_dir(key) / kept).read_bytes() == other


def test_a_winner_that_does_not_load_is_left_alone(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    shutil.copy(repo.queue / f"{key}.json", repo.running / f"{key}.json")
    (repo.running / f"{key}.json").write_bytes(b"{broken")
    [line] = recover(repo).lines
    assert line.startswith(f"R4 {key}: left as is, the running copy does not load")
    assert folders_of(repo, key) == ["queue", "running"]


def test_r5_stray_leases_and_cancel_requests(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    claim(repo, "w1")
    (repo.running / f"{key}.cancel").write_text("{}")
    os.rename(repo.running / f"{key}.json", repo.queue / f"{key}.json")
    report = recover(repo).lines
    assert report == [
        f"R5 {key}: removed the lease file of a job no longer running",
        f"R5 {key}: removed the cancel file of a job no longer running",
    ]
    assert os.listdir(repo.running) == []


def test_r6_temp_files_of_interrupted_writes(repo: Layout) -> None:
    (repo.queue / ".tmp-0123456789abcdef").write_bytes(b"half a job")
    (repo.gen / ".tmp-feedfacefeedface").write_bytes(b"half an event")
    (repo.queue / ".not-a-temp").write_bytes(b"kept")
    report = recover(repo).lines
    assert sorted(report) == [
        "R6 removed the temp file .gen/.tmp-feedfacefeedface",
        "R6 removed the temp file .gen/queue/.tmp-0123456789abcdef",
    ]
    assert os.listdir(repo.queue) == [".not-a-temp"]


def test_recover_is_idempotent(repo: Layout) -> None:
    job = v2_job("x", {"src/app.py": None})
    (repo.queue / f"{job.key}.json").write_bytes(job_bytes(job))
    (repo.running / f"{job.key}.json").write_bytes(job_bytes(job))
    assert len(recover(repo).lines) == 1
    assert recover(repo).lines == []


def test_recover_goes_on_past_a_fault_and_says_what_it_left(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"new\n"}, signer)
    (repo.journal / "not-a-key.json").write_text("{}")
    key = write_jobs(repo, 1)[0]
    shutil.copy(repo.queue / f"{key}.json", repo.running / f"{key}.json")
    report = recover(repo)
    assert [line.split(":")[0] for line in report.left] == ["R1 not-a-key"]
    assert f"R4 {key}: running wins; removed the copy in queue/" in report.done
    res = cli("recover", root=repo.root)
    assert res.exit_code == 1
    assert res.stderr == "genjob: 1 thing(s) left to recover; see the lines above\n"


def test_a_temp_file_being_written_is_not_swept(repo: Layout) -> None:
    """A temp file whose writer holds its lock (a mint in progress) survives recover."""
    with folder(repo.queue) as dir_fd, temp_at(dir_fd, b"half a job", repo.queue / "x.json") as name:
        assert recover(repo).lines == []
        assert (repo.queue / name).exists()
    assert os.listdir(repo.queue) == []


def test_a_killed_workers_staging_folder_is_swept_once_its_attempt_is_over(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    c = claim(repo, "w1", key)
    live = repo.out / f".tmp-{key}-{c.lease.token}"
    over = repo.out / f".tmp-{key}-{c.lease.token + 7}"
    for folder_path in (live, over):
        (folder_path / "src").mkdir(parents=True)
        (folder_path / "src/app.py").write_text("partial")
    report = recover(repo)
    assert report.lines == [
        f"R6 {key}: removed the staging folder of attempt {over.name.rsplit('-', 1)[1]}, which is over"
    ]
    assert live.exists() and not over.exists()
    os.unlink(repo.lease(key))
    (repo.running / f"{key}.json").rename(repo.queue / f"{key}.json")
    recover(repo)
    assert not live.exists()


def test_a_symlinked_gen_folder_is_refused(tmp_path: Path) -> None:
    real = make_repo(tmp_path / "real")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / ".gen").symlink_to(real.gen)
    res = cli("ls", root=linked)
    assert res.exit_code == 2 and "a symlink; genjob keeps its state in a real folder" in res.stderr
