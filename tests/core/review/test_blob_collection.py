"""`genjob recover` collects the input bytes kept from mint once no job that could still be
merged uses them, crash-safely, and never one a mint is about to use."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from corekit import cli, git, receive, sha
from crashkit import every_crash
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.model.lifecycle import State
from core.plan.mint import build_job
from core.read.snapshot import take_snapshot
from core.review.apply_job import apply_job
from core.review.recover import recover
from core.store.blobs import blobs_dir, collect, keeping
from core.store.durable import create_exclusive
from core.store.layout import Layout
from core.store.queue import enqueue, job_bytes, reject

FILES = {f"src/f{i}.py": f"file {i}\n".encode() * (i + 1) for i in range(4)}


def repo_with_files(repo: Layout) -> Layout:
    for rel, data in FILES.items():
        (repo.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo.root / rel).write_bytes(data)
    git(repo.root, "add", "-A")
    git(repo.root, "commit", "-q", "-m", "files")
    return repo


def minted(layout: Layout, said: str, rel: str) -> str:
    job = build_job(layout, said, [rel])
    enqueue(layout, job)
    return job.key


def kept(layout: Layout) -> set[str]:
    return {p.name for p in blobs_dir(layout).iterdir() if not p.name.startswith(".")}


def mixed(layout: Layout, signer: Ed25519PrivateKey) -> dict[str, str]:
    """A job in each state over its own file: applied (f0), rejected (f1), queued (f2), STALE (f3)."""
    keys = {rel: minted(layout, f"Edit {rel}.", rel) for rel in FILES}
    assert receive(layout, keys["src/f0.py"], {"src/f0.py": b"applied\n"}, signer).won
    apply_job(layout, keys["src/f0.py"])
    reject(layout, keys["src/f1.py"], "not wanted")
    assert receive(layout, keys["src/f3.py"], {"src/f3.py": b"stale\n"}, signer).won
    (layout.root / "src/f3.py").write_bytes(b"moved on\n")
    return keys


def test_recover_removes_only_blobs_no_mergeable_job_uses_and_says_what_it_freed(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    layout = repo_with_files(repo)
    keys = mixed(layout, signer)
    assert take_snapshot(layout, disk_cache=False).rows[keys["src/f3.py"]].state is State.STALE
    res = cli("recover", root=layout.root)
    assert res.exit_code == 0, res.stderr
    freed = len(FILES["src/f0.py"]) + len(FILES["src/f1.py"])
    assert f"R9 removed 2 kept input(s) no job in flight uses, freeing {freed} bytes" in res.stdout
    assert kept(layout) == {sha(FILES["src/f2.py"]), sha(FILES["src/f3.py"])}
    assert "R9" not in "\n".join(recover(layout).lines)  # nothing more to collect


def test_a_blob_shared_with_a_job_in_flight_is_kept(repo: Layout, signer: Ed25519PrivateKey) -> None:
    layout = repo_with_files(repo)
    done = minted(layout, "One.", "src/f0.py")
    minted(layout, "Two.", "src/f0.py")
    assert receive(layout, done, {"src/f0.py": b"one\n"}, signer).won
    reject(layout, done, "not this one")
    assert collect(layout).blobs == 0
    assert sha(FILES["src/f0.py"]) in kept(layout)


def test_a_collection_killed_anywhere_loses_no_referenced_blob(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    layout = repo_with_files(repo)
    mixed(layout, signer)
    referenced = {sha(FILES["src/f2.py"]), sha(FILES["src/f3.py"])}
    runs = 0
    for root, killed in every_crash(layout.root, tmp_path / "work", lambda r: recover(Layout(r))):
        runs += 1
        assert referenced <= kept(Layout(root)), "a referenced blob was lost"
        recover(Layout(root))
        assert kept(Layout(root)) == referenced
        assert killed or runs > 1
    assert runs >= 2


def test_a_blob_kept_for_a_job_being_minted_is_not_collected(repo: Layout) -> None:
    """Between keeping its inputs and writing its job, a mint holds the blobs' lock shared:
    a collection then waits, and sees the job once it is written."""
    layout = repo_with_files(repo)
    job = build_job(layout, "Being minted.", ["src/f1.py"])
    done: list[int] = []
    with keeping(layout, job):
        assert sha(FILES["src/f1.py"]) in kept(layout)
        collector = threading.Thread(target=lambda: done.append(collect(layout).blobs))
        collector.start()
        wait_for_a_blocked_flock(blobs_dir(layout))
        assert not done
        layout.queue.mkdir(exist_ok=True)
        create_exclusive(layout.job_file("queue", job.key), job_bytes(job))
    collector.join()
    assert done == [0] and sha(FILES["src/f1.py"]) in kept(layout)


def wait_for_a_blocked_flock(on: Path) -> None:
    """Until /proc/locks shows this process waiting for a FLOCK on `on` (a "->" line)."""
    ino, pid = os.stat(on).st_ino, str(os.getpid())
    while not any(waiting(line.split(), ino, pid) for line in Path("/proc/locks").read_text().splitlines()):
        threading.Event().wait(0.01)


def waiting(fields: list[str], ino: int, pid: str) -> bool:
    return (
        len(fields) > 6
        and fields[1:3] == ["->", "FLOCK"]
        and fields[5] == pid
        and fields[6].endswith(f":{ino}")
    )
