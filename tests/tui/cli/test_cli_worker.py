"""`genjob ship` and `genjob worker` as real processes: end to end over sshd, kills,
SIGTERM, Ctrl-C, and per-host concurrency."""

from __future__ import annotations

import json
import os
import shlex
import signal
from pathlib import Path

import pytest
from corekit import git, mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import (
    DEMO,
    GIT_IDENTITY,
    assert_not_applyable,
    assert_stopped,
    evidence,
    genjob,
    hang_once,
    host_block,
    moved_serialized_jobs,
    read_report,
    replayed_before_any_call,
    script,
    sleeper,
    start_genjob,
    stop_process,
    worktree,
    write_config,
)
from ssh_servers import SSHServer

from core.model.lifecycle import State
from core.read.snapshot import take_snapshot
from core.store.layout import Layout
from core.store.queue import locate

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(autouse=True)
def git_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commits work on machines without a git identity of their own."""
    for name, value in GIT_IDENTITY.items():
        monkeypatch.setenv(name, value)


def receipt(layout: Layout, key: str) -> dict[str, object]:
    return json.loads(layout.receipt(key).read_bytes())


def test_end_to_end_over_sshd(openssh_server: SSHServer, tmp_path: Path) -> None:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src/app.py").write_bytes(b"def main():\n    return 1\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")

    def ok(*args: str) -> str:
        res = genjob(*args, cwd=root)
        assert res.returncode == 0, (args, res.stdout, res.stderr)
        return res.stdout

    ok("init")
    pub = ok("keygen").strip()
    assert "trusted SHA256:" in ok("trust", pub)
    layout = Layout(root.resolve())
    with layout.config.open("a") as config:
        config.write("\n" + host_block("sshd", openssh_server, DEMO + " {paths}"))
    assert "host sshd: over ssh to" in ok("allow", "--yes")
    key = ok("mint", "-m", "Document main.", "src/app.py").strip()

    shipped = ok("ship", key, "--host", "sshd", "-q")
    assert f"{key}: ok on sshd" in shipped and "=> apply may run" in shipped
    verified = ok("verify", key)
    assert "signature required" in verified and "signed by trusted key" in verified
    applied = ok("apply", key, "--commit")
    assert "applied" in applied and "committed " in applied
    message = git(root, "log", "-1", "--format=%B")
    assert f"Genjob-Key: {key}" in message.splitlines()
    assert git(root, "status", "--porcelain", "--", "src/app.py") == ""
    assert (root / "src/app.py").read_bytes().endswith(b"# instruction: Document main.\n")


def test_killed_worker_leaves_an_orphan_that_requeue_makes_whole(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gen, report = hang_once(tmp_path, "from the second worker")
    write_config(repo, host_block("gen", None, gen))
    job = mint(repo)
    worker = start_genjob("worker", "--worker", "first", cwd=repo.root, log=tmp_path / "first.log")
    try:
        read_report(report)
    finally:
        stop_process(worker, signal.SIGKILL)
    assert take_snapshot(repo, disk_cache=False).rows[job.key].state == State.ORPHANED
    assert_stopped(report)

    requeued = genjob("requeue", job.key, cwd=repo.root)
    assert requeued.returncode == 0, requeued.stderr
    assert take_snapshot(repo, disk_cache=False).rows[job.key].state == State.QUEUED
    second = genjob("worker", "--once", "--worker", "second", cwd=repo.root)
    assert second.returncode == 0, second.stderr
    assert "worker done: 1 ok" in second.stdout
    assert receipt(repo, job.key)["worker_id"] == "second"
    applied = genjob("apply", job.key, cwd=repo.root)
    assert applied.returncode == 0, applied.stderr
    assert (repo.root / "src/app.py").read_bytes() == b"from the second worker"


def test_sigterm_stops_the_worker_cleanly(repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path) -> None:
    gen, report = sleeper(tmp_path)
    write_config(repo, host_block("gen", None, gen))
    job = mint(repo)
    before = worktree(repo.root)
    log = tmp_path / "worker.log"
    worker = start_genjob("worker", "--worker", "w", cwd=repo.root, log=log)
    try:
        read_report(report)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, log.read_text()
    finally:
        stop_process(worker)
    assert "worker done: 1 aborted" in log.read_text()
    assert receipt(repo, job.key)["status"] == "aborted"
    assert evidence(repo, job.key, 1)[0]["reason"] == "interrupted: the worker was stopped"
    assert_stopped(report)
    assert_not_applyable(repo, job, before)


def test_ctrl_c_on_ship_aborts(
    openssh_server: SSHServer, repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gen, report = sleeper(tmp_path)
    write_config(repo, host_block("sshd", openssh_server, gen))
    job = mint(repo)
    before = worktree(repo.root)
    log = tmp_path / "ship.log"
    ship = start_genjob("ship", job.key, "--host", "sshd", cwd=repo.root, log=log)
    try:
        read_report(report)
        os.killpg(ship.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        assert ship.wait(timeout=60) == 1, log.read_text()
    finally:
        stop_process(ship)
    assert f"{job.key}: aborted (cancelled by the operator) on sshd" in log.read_text()
    assert receipt(repo, job.key)["status"] == "aborted"
    assert_stopped(report)
    assert_not_applyable(repo, job, before)


def overlap(markers: Path) -> tuple[int, int]:
    """The most generators running at once on one host, and how many ran."""
    now = most = runs = 0
    for line in markers.read_text().splitlines():
        event, _pid = line.split()
        now += 1 if event == "start" else -1
        runs += event == "start"
        most = max(most, now)
    assert now == 0, "every start has its end"
    return most, runs


def marking_generator(markers: Path, concurrency: int) -> str:
    """Marks its start and end in `markers` (outside the workspace). It waits, for a
    bounded while, until `concurrency` runs have started on its host, so a worker that
    runs that many at once shows it whatever the machine's speed."""
    f = shlex.quote(str(markers))
    return (
        f'echo "start $$" >> {f}; i=0; '
        f'while [ "$(grep -c start {f})" -lt {concurrency} ] && [ $i -lt 200 ]; '
        "do sleep 0.05; i=$((i+1)); done; "
        f'sleep 0.1; echo "end $$" >> {f}'
    )


def test_worker_once_keeps_each_host_within_its_concurrency(
    openssh_server: SSHServer, repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    local, remote = tmp_path / "local.markers", tmp_path / "sshd.markers"
    write_config(
        repo,
        host_block("here", None, marking_generator(local, 2), concurrency=2),
        host_block("sshd", openssh_server, marking_generator(remote, 3), concurrency=3),
    )
    keys = {mint(repo, f"job {i}").key for i in range(12)}
    res = genjob("worker", "--once", "--host", "here", "--host", "sshd", cwd=repo.root)
    assert res.returncode == 0, res.stderr
    assert "worker done: 12 ok" in res.stdout
    (most_local, runs_local), (most_remote, runs_remote) = overlap(local), overlap(remote)
    assert (most_local, most_remote) == (2, 3)
    assert runs_local + runs_remote == 12
    assert {receipt(repo, key)["status"] for key in keys} == {"ok"}


def test_generator_output_never_reaches_the_terminal_raw(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """Escape sequences in the generator's output and in the names of files it leaves
    are shown, not obeyed: the title-setting sequence arrives as visible characters."""
    code = (
        "import sys, time\n"
        "out = sys.stdout.buffer\n"
        "out.write(b'\\x1b]0;owned\\x07 \\x1b[2J \\xe2\\x80\\xae flipped\\n'); out.flush()\n"
        "out.write(b'caf\\xc3'); out.flush(); time.sleep(0.2)\n"
        "out.write(b'\\xa9\\n'); out.flush()\n"
        "open('src/\\x1b[31mred', 'w').write('x')\n"
    )
    write_config(repo, host_block("gen", None, script(tmp_path, "loud", code)))
    job = mint(repo)
    res = genjob("ship", job.key, "--host", "gen", cwd=repo.root)
    assert res.returncode == 1
    for stream in (res.stdout, res.stderr):
        assert "\x1b" not in stream and "\x07" not in stream and "\u202e" not in stream
    assert "owned" in res.stderr and "café\n" in res.stderr, "a character split across chunks stays whole"
    assert f"{job.key}: rejected (src/" in res.stdout and "red: file created outside" in res.stdout


@pytest.mark.parametrize(
    "args", [("ship", "{key}"), ("ship", "{key}", "--candidates", "2")], ids=["ship", "ship-candidates"]
)
def test_every_cli_ship_replays_a_moved_serialized_job_before_any_call(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, args: tuple[str, ...]
) -> None:
    called = tmp_path / "called"
    [key] = moved_serialized_jobs(repo, signer, called)
    genjob(*(a.format(key=key) for a in args), cwd=repo.root)
    replayed_before_any_call(repo, key, called)


def test_the_worker_ships_the_replay_of_a_moved_serialized_job_not_the_job(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    [key] = moved_serialized_jobs(repo, signer, tmp_path / "called")
    genjob("worker", "--once", cwd=repo.root)
    closed = locate(repo, key)
    assert closed.folder == "rejected" and not repo.receipt(key).exists()
    fresh = str(closed.record).split("replayed as ")[1][:32]
    assert locate(repo, fresh).job.replay_of == key  # type: ignore[union-attr]
    assert repo.receipt(fresh).exists()
