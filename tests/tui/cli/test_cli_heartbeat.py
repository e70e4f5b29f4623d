"""`genjob heartbeat`: a claim made by `genjob claim` kept alive from a CI step."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from corekit import cli, dead_pid, mint

from core.model.lifecycle import State
from core.read.snapshot import job_row
from core.store.layout import Layout
from core.store.lease import read_lease, write_lease
from core.store.queue import claim

GENJOB = Path(sys.executable).parent / "genjob"


def claimed(repo: Layout, worker: str = "ci-1", ttl: float = 30.0, pid: int | None = None) -> str:
    key = mint(repo, "Held by CI.").key
    claim(repo, worker, key, ttl, pid=os.getppid() if pid is None else pid)
    return key


def lease_bytes(repo: Layout, key: str) -> bytes:
    return repo.lease(key).read_bytes()


def aged(repo: Layout, key: str, seconds: float) -> None:
    """Set the lease's last heartbeat `seconds` back."""
    lease = read_lease(repo, key)
    assert lease is not None
    write_lease(repo, key, lease.model_copy(update={"heartbeat": lease.heartbeat - seconds}))


def test_a_heartbeat_renews_the_lease_and_may_set_its_ttl(repo: Layout) -> None:
    key = claimed(repo)
    aged(repo, key, 20)
    res = cli("heartbeat", key[:8], "--worker", "ci-1", "--ttl", "600", root=repo.root)
    assert res.exit_code == 0, res.stderr
    assert res.stderr == f"{key}: lease renewed for ci-1, ttl 600s\n"
    lease = read_lease(repo, key)
    assert lease is not None and lease.ttl == 600 and lease.pid == os.getppid()
    again = cli("heartbeat", key, "--worker", "ci-1", root=repo.root)
    assert again.exit_code == 0 and "ttl 600s" in again.stderr  # kept without --ttl


def test_a_key_that_is_not_claimed_is_refused_in_one_line(repo: Layout) -> None:
    queued = mint(repo, "Waiting.").key
    res = cli("heartbeat", queued, "--worker", "ci-1", root=repo.root)
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr == (
        f"genjob: {queued}: is QUEUED, not claimed; nothing renewed (`genjob claim` claims a job)\n"
    )
    assert not repo.lease(queued).exists() and repo.job_file("queue", queued).exists()


def test_a_claim_of_another_worker_is_refused_naming_its_holder(repo: Layout) -> None:
    key = claimed(repo, worker="ci-2")
    before = lease_bytes(repo, key)
    res = cli("heartbeat", key, "--worker", "ci-1", root=repo.root)
    assert res.exit_code == 2
    assert res.stderr.startswith(f"genjob: {key}: claimed by ci-2 (pid {os.getppid()} on ")
    assert res.stderr.endswith("not by ci-1; nothing renewed\n") and res.stderr.count("\n") == 1
    assert lease_bytes(repo, key) == before


def test_a_holders_worker_id_is_shown_never_obeyed(repo: Layout) -> None:
    key = claimed(repo, worker="ci\x1b]0;pwned\x07-2")
    res = cli("heartbeat", key, "--worker", "ci-1", root=repo.root)
    assert res.exit_code == 2 and "\x1b" not in res.stderr and "\x07" not in res.stderr


def test_a_lapsed_lease_is_not_brought_back(repo: Layout) -> None:
    """ORPHANED by its ttl: an operator may be requeuing it, so the heartbeat is refused."""
    key = claimed(repo, ttl=30)
    aged(repo, key, 31)
    before = lease_bytes(repo, key)
    res = cli("heartbeat", key, "--worker", "ci-1", root=repo.root)
    assert res.exit_code == 2
    assert res.stderr == (
        f"genjob: {key}: its lease has lapsed (no heartbeat within its ttl of 30 s), so the job is "
        "ORPHANED; nothing renewed: `genjob requeue` it and claim it again\n"
    )
    assert lease_bytes(repo, key) == before


def test_a_lease_whose_holder_alone_is_gone_is_taken_over(repo: Layout) -> None:
    """`KEY=$(genjob claim ... 2>/dev/null)` names a subshell that is gone at once; the
    heartbeat, within the ttl, makes its own caller the holder."""
    key = claimed(repo, pid=dead_pid())
    row = job_row(repo, key)
    assert row is not None and row.state is State.ORPHANED
    assert cli("heartbeat", key, "--worker", "ci-1", root=repo.root).exit_code == 0
    row = job_row(repo, key)
    assert row is not None and row.state is State.RUNNING


def test_a_job_with_a_receipt_or_no_lease_is_refused(repo: Layout) -> None:
    key = claimed(repo)
    repo.lease(key).unlink()
    res = cli("heartbeat", key, "--worker", "ci-1", root=repo.root)
    assert res.exit_code == 2
    assert res.stderr == f"genjob: {repo.lease(key)}: no lease, so the job is not claimed; nothing renewed\n"
    assert not repo.lease(key).exists()


@pytest.mark.parametrize(
    ("args", "fault"),
    [
        (["--every", "5"], "heartbeat --every is the interval while a command runs: give it `-- CMD`"),
        (["--every", "30", "--", "true"], "--every 30: not under the lease's ttl of 30 s, so it would lapse"),
        (["--", "no-such-program-here"], "no-such-program-here: no such program to run"),
    ],
)
def test_a_bad_command_line_renews_nothing(repo: Layout, args: list[str], fault: str) -> None:
    key = claimed(repo)
    before = lease_bytes(repo, key)
    res = cli("heartbeat", key, "--worker", "ci-1", *args, root=repo.root)
    assert res.exit_code == 2 and res.stderr.startswith(f"genjob: {fault}") and res.stderr.count("\n") == 1
    assert lease_bytes(repo, key) == before


def heartbeat_proc(repo: Layout, key: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(GENJOB), "heartbeat", key, "--worker", "ci-1", *args],
        cwd=repo.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def script(body: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(body)]


def test_the_command_runs_heartbeating_and_its_status_is_the_exit_status(repo: Layout) -> None:
    key = claimed(repo, ttl=30)
    first = read_lease(repo, key)
    assert first is not None
    # CMD waits until it sees a heartbeat made after it started, then exits 7.
    waits = f"""
        import json, sys, time
        path = {str(repo.lease(key))!r}
        start = json.load(open(path))["heartbeat"]
        for _ in range(60000):
            if json.load(open(path))["heartbeat"] > start:
                sys.exit(7)
            time.sleep(0.01)
        sys.exit(99)
    """
    proc = heartbeat_proc(repo, key, "--every", "0.2", "--", *script(waits))
    _, err = proc.communicate()
    assert proc.returncode == 7, err
    assert err == ""
    row = job_row(repo, key)
    assert row is not None and row.state is State.RUNNING


def test_a_lost_lease_stops_the_command(repo: Layout) -> None:
    key = claimed(repo, ttl=30)
    takes_it_back = f"""
        import subprocess, time
        subprocess.run([{str(GENJOB)!r}, "requeue", {key!r}, "--force"], check=True, capture_output=True)
        time.sleep(600)
    """
    proc = heartbeat_proc(repo, key, "--every", "0.2", "--", *script(takes_it_back))
    _, err = proc.communicate()
    assert proc.returncode == 2
    assert err == (
        f"genjob: {key}: the lease is no longer ci-1's (requeued, or claimed again); "
        f"stopped {sys.executable}\n"
    )
    assert repo.job_file("queue", key).exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_is_passed_on_to_the_command(repo: Layout, tmp_path: Path, sig: signal.Signals) -> None:
    key = claimed(repo)
    ready = tmp_path / "ready"
    stops = f"""
        import pathlib, signal, sys
        signal.signal({int(sig)}, lambda *_: sys.exit(5))
        pathlib.Path({str(ready)!r}).write_text("")
        signal.pause()
    """
    proc = heartbeat_proc(repo, key, "--", *script(stops))
    while not ready.exists() and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(sig)
    _, err = proc.communicate()
    assert proc.returncode == 5, err
