"""The worker plane's contract at the level of `ship()`, over all three transports.

Each test ships a real job from a real git repository with `.gen/` to a generator
host: the local subprocess, an in-process asyncssh server, or a real sshd. Every
outcome is a receipt; only an `ok` one, signed and verified, lets apply touch the tree.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import sys
from pathlib import Path

import pytest
from corekit import cli, mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import (
    DEMO,
    KINDS,
    CommandHost,
    alive,
    assert_not_applyable,
    assert_stopped,
    evidence,
    finished,
    hang_once,
    host_block,
    read_report,
    script,
    sleeper,
    worktree,
    write_config,
)
from ssh_servers import SSHServer, write_key

from core.errors import BadInput, WrongState
from core.model.lifecycle import State
from core.model.models import job_from_bytes
from core.read.inspect_job import job_detail
from core.read.snapshot import take_snapshot
from core.review.apply_job import apply_job
from core.store.config import load_config
from core.store.events import attempts
from core.store.layout import Layout
from core.store.queue import HOST_FAILED, MAX_HOST_FAILURES, locate
from core.work.fleet import NOT_STARTED, fleet
from core.work.ship import Hosts, ShipResult, ship
from core.work.transport import LocalTransport
from tui.render import job_text

pytestmark = pytest.mark.timeout(120)


Target = SSHServer | CommandHost | None


@pytest.fixture(params=KINDS)
def server(request: pytest.FixtureRequest) -> Target:
    """None for the local transport, a live SSH server of the given kind, or how the
    command transport reaches a host (OpenSSH's client to sshd, or bwrap)."""
    if request.param == "local":
        return None
    if request.param == "command-bwrap":
        return CommandHost(None)
    if request.param == "command-openssh":
        return CommandHost(request.getfixturevalue("openssh_server"))
    return request.getfixturevalue(f"{request.param}_server")


def needs_ssh(server: Target) -> SSHServer | CommandHost:
    if server is None or (isinstance(server, CommandHost) and server.server is None):
        pytest.skip("the local transport and bwrap have no SSH connection or host key")
    return server


def configure(repo: Layout, server: Target, generator: str, **host: object) -> None:
    write_config(repo, host_block("gen", server, generator, **host))  # type: ignore[arg-type]


async def ship_job(repo: Layout, key: str, **kwargs: object) -> ShipResult:
    return await ship(repo, key, "gen", worker_id="tester", **kwargs)  # type: ignore[arg-type]


async def test_ok_receipt_is_signed_verifies_and_applies(
    server: Target, repo: Layout, signer: Ed25519PrivateKey
) -> None:
    configure(repo, server, DEMO + " {paths}")
    job = mint(repo, "Add a note.", ["src/app.py"])
    seen: list[bytes] = []
    res = await ship_job(repo, job.key, on_output=seen.append)
    assert (res.status, res.reason, res.won, res.attempt) == ("ok", None, True, 1)
    assert res.host == "gen" and set(res.outputs) == {"src/app.py"}
    assert b"edited src/app.py" in b"".join(seen)
    receipt = json.loads(repo.receipt(job.key).read_bytes())
    assert receipt["status"] == "ok" and receipt["worker_id"] == "tester"
    assert receipt["outputs"] == res.outputs
    assert repo.signature(job.key).exists()

    verified = cli("verify", job.key, root=repo.root)
    assert verified.exit_code == 0, verified.output
    assert "signed by trusted key" in verified.output
    summary, log = evidence(repo, job.key, 1)
    assert summary["status"] == "ok" and summary["exit_code"] == 0
    assert b"edited src/app.py" in log

    applied = apply_job(repo, job.key)
    assert applied.changed == ["src/app.py"]
    assert (repo.root / "src/app.py").read_bytes() == (
        b"def main():\n    return 1\n# genjob demo edit\n# instruction: Add a note.\n"
    )


async def test_failing_generator_is_rejected(
    server: Target, repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    code = "import sys\nopen('src/app.py', 'w').write('half done')\nprint('it broke')\nsys.exit(3)\n"
    configure(repo, server, script(tmp_path, "fail", code))
    job = mint(repo)
    before = worktree(repo.root)
    res = await ship_job(repo, job.key)
    assert (res.status, res.won, res.outputs) == ("rejected", True, {})
    assert res.reason == "the generator exited with status 3"
    assert finished(repo, job.key)[-1]["reason"] == res.reason
    summary, log = evidence(repo, job.key, 1)
    assert summary["exit_code"] == 3 and summary["reason"] == res.reason
    assert b"it broke" in log
    assert_not_applyable(repo, job, before)


async def test_timeout_aborts(
    server: Target, repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gen, report = sleeper(tmp_path)
    configure(repo, server, gen, timeout=1)
    job = mint(repo)
    before = worktree(repo.root)
    res = await ship_job(repo, job.key)
    assert res.status == "aborted" and res.reason is not None and "timeout" in res.reason
    assert_stopped(report)
    assert_not_applyable(repo, job, before)


async def test_write_outside_the_paths_is_rejected(
    server: Target, repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    code = "open('src/app.py', 'w').write('fine')\nopen('src/evil.py', 'w').write('stray')\n"
    configure(repo, server, script(tmp_path, "stray", code))
    job = mint(repo)
    before = worktree(repo.root)
    res = await ship_job(repo, job.key)
    assert res.status == "rejected"
    assert res.reason == "src/evil.py: file created outside the allowed paths"
    assert evidence(repo, job.key, 1)[0]["violations"] == [res.reason]
    assert_not_applyable(repo, job, before)
    assert not (repo.root / "src/evil.py").exists()


async def test_symlink_at_an_allowed_path_is_rejected(
    server: Target, repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    code = "import os\nos.remove('src/app.py')\nos.symlink('/etc/passwd', 'src/app.py')\n"
    configure(repo, server, script(tmp_path, "link", code))
    job = mint(repo)
    before = worktree(repo.root)
    res = await ship_job(repo, job.key)
    assert (res.status, res.reason) == ("rejected", "src/app.py: symlink at an allowed path")
    assert_not_applyable(repo, job, before)


async def test_huge_file_is_rejected(
    server: Target, repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    code = "open('src/app.py', 'wb').write(b'x' * 70000)\n"
    write_config(repo, host_block("gen", server, script(tmp_path, "huge", code)), max_file_bytes=65536)
    job = mint(repo)
    before = worktree(repo.root)
    res = await ship_job(repo, job.key)
    assert (res.status, res.reason) == ("rejected", "src/app.py: 70000 bytes, over max_file_bytes (65536)")
    assert_not_applyable(repo, job, before)


async def test_dropped_connection_aborts_and_the_pool_recovers(
    server: Target, repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    ssh = needs_ssh(server)
    gen, report = hang_once(tmp_path, "second")
    configure(repo, ssh, gen)
    first = mint(repo, "first")
    second = mint(repo, "second")
    before = worktree(repo.root)
    pool = Hosts(load_config(repo.config))
    try:
        running = asyncio.ensure_future(ship(repo, first.key, "gen", worker_id="tester", hosts=pool))
        await asyncio.to_thread(read_report, report)
        ssh.drop()
        res = await running
        assert res.status == "aborted" and res.reason is not None
        # OpenSSH's client says it in its own words, which the command transport quotes.
        lost = (
            "ssh exited with status 255: Connection to" if isinstance(ssh, CommandHost) else "connection lost"
        )
        assert res.reason.startswith(lost)
        assert_stopped(report)
        assert_not_applyable(repo, first, before)
        again = await ship(repo, second.key, "gen", worker_id="tester", hosts=pool)
    finally:
        await pool.close()
    assert again.status == "ok", again.reason
    apply_job(repo, second.key)
    assert (repo.root / "src/app.py").read_bytes() == b"second"


async def test_genjob_cancel_aborts_and_stops_the_generator(
    server: Target, repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gen, report = sleeper(tmp_path)
    configure(repo, server, gen)
    job = mint(repo)
    before = worktree(repo.root)
    running = asyncio.ensure_future(ship_job(repo, job.key))
    pids, _ = await asyncio.to_thread(read_report, report)
    cancelled = await asyncio.to_thread(cli, "cancel", job.key, root=repo.root)
    assert cancelled.exit_code == 0, cancelled.output
    res = await running
    assert (res.status, res.reason) == ("aborted", "cancelled by the operator (genjob cancel)")
    assert_stopped(report)
    assert not any(alive(p) for p in pids)
    assert not (repo.running / f"{job.key}.cancel").exists()
    assert_not_applyable(repo, job, before)


async def test_cancel_event_aborts_and_stops_the_generator(
    server: Target, repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gen, report = sleeper(tmp_path)
    configure(repo, server, gen)
    job = mint(repo)
    before = worktree(repo.root)
    cancel = asyncio.Event()

    def on_output(chunk: bytes) -> None:
        if b"started" in chunk:
            cancel.set()

    res = await ship_job(repo, job.key, on_output=on_output, cancel=cancel)
    assert (res.status, res.reason) == ("aborted", "cancelled by the operator")
    assert_stopped(report)
    assert_not_applyable(repo, job, before)


HOSTILE = (
    "$(touch {marker}) `touch {marker}` ${{HOME}} '; touch {marker}; '\" \\\n"
    "line two | cat /etc/passwd & rm -rf / ; {{paths}} {{instruction_file}} %s %n *\n"
    "\t\r\x1b[31m ünïcødé 🙂 \u202e \ufeff -- --help; exit 1\n"
)


async def test_instruction_reaches_the_generator_byte_for_byte(
    server: Target, repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    instruction = HOSTILE.format(marker=marker)
    code = "import os, shutil\nshutil.copyfile(os.environ['GENJOB_INSTRUCTION_FILE'], 'got.txt')\n"
    configure(repo, server, script(tmp_path, "copy", code) + " {instruction_file} {paths}")
    job = mint(repo, instruction, [], new=["got.txt"])
    queued = repo.job_file("queue", job.key)
    assert job_from_bytes(queued.read_bytes(), str(queued)).instruction == instruction
    res = await ship_job(repo, job.key)
    assert res.status == "ok", res.reason
    apply_job(repo, job.key)
    assert (repo.root / "got.txt").read_bytes() == instruction.encode("utf-8")
    assert not marker.exists()


async def test_unknown_host_key_is_refused_with_its_fingerprint(
    server: Target, repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    ssh = needs_ssh(server)
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    configure(repo, ssh, "true", known_hosts=empty)
    job = mint(repo)
    before = worktree(repo.root)
    res = await ship_job(repo, job.key)
    assert res.requeued and res.reason is not None, "a host that is not who it should be ran nothing"
    if isinstance(ssh, CommandHost):
        # OpenSSH prints no fingerprint for a key it does not know; its words are passed on.
        assert "is not known to ssh" in res.reason and "No ED25519 host key is known" in res.reason
    else:
        assert ssh.fingerprint in res.reason and f"is not in {empty}" in res.reason
    [failed] = [r for r in attempts(repo, job.key) if r["event"] == HOST_FAILED]
    assert failed["reason"] in res.reason and locate(repo, job.key).folder == "queue"
    assert empty.read_text() == "", "a host key is never learned silently"
    assert worktree(repo.root) == before and list(repo.out.iterdir()) == []
    with pytest.raises(WrongState, match="is QUEUED; only a job with a receipt can be applied"):
        apply_job(repo, job.key)


async def test_the_runner_interpreter_is_the_hosts_python_setting(
    server: Target, repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    if server is None:
        pytest.skip("the local transport runs genjob's own interpreter")
    ssh = server
    missing = "/nonexistent/python3"
    write_config(
        repo,
        # The generator's shell is the runner's child: name the runner's executable.
        host_block("gen", ssh, "readlink /proc/$PPID/exe > src/app.py", python=sys.executable),
        host_block("broken", ssh, "true", python=missing),
    )
    first, second = mint(repo, "first"), mint(repo, "second")
    res = await ship(repo, first.key, "gen", worker_id="tester")
    assert res.status == "ok", res.reason
    runner = repo.out_dir(first.digest) / "src/app.py"
    assert runner.read_text().strip() == os.path.realpath(sys.executable)
    refused = await ship(repo, second.key, "broken", worker_id="tester")
    if server == CommandHost(None):
        # bwrap execs the argv itself and says why it could not, in its own words.
        why = f"bwrap exited with status 1: bwrap: execvp {missing}: No such file or directory"
    else:
        why = f"{missing} not found on the generator host"
    # The runner never started: the host's fault, so the job is back in the queue.
    assert refused.requeued and refused.reason == (
        f"attempt 1 on broken did not start: {why}; "
        f"back in the queue (1 of {MAX_HOST_FAILURES} such failures)"
    )


def test_a_local_host_refuses_a_python_setting(repo: Layout) -> None:
    with pytest.raises(BadInput, match="python is for ssh hosts"):
        write_config(repo, host_block("gen", None, "true", python="/usr/bin/python3"))


async def test_an_input_changed_since_minting_is_refused_before_any_claim(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    write_config(repo, host_block("gen", None, f"touch {marker}"))
    job = mint(repo)
    (repo.root / "src/app.py").write_bytes(b"edited by hand\n")
    before = worktree(repo.root)
    with pytest.raises(WrongState, match="is STALE: its inputs changed since it was minted"):
        await ship_job(repo, job.key)
    assert not marker.exists(), "nothing was shipped"
    assert (repo.queue / f"{job.key}.json").exists(), "the job stays queued, byte for byte"
    assert not repo.attempts_file(job.key).exists(), "no attempt was spent"
    assert not repo.receipt(job.key).exists()
    assert worktree(repo.root) == before


async def test_a_running_jobs_output_is_kept_in_its_log_while_it_runs(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, server: Target
) -> None:
    """Every board tails a run through its log, whoever ships it: the log holds the output
    so far while the generator still runs, and the whole tail once the receipt is in."""
    from core.store.evidence import newest_log_tail

    gate = tmp_path / "gate"
    configure(
        repo,
        server,
        f"echo started; while [ ! -e {gate} ]; do sleep 0.05; done; echo finished",
        timeout=120,
    )
    job = mint(repo, "say two things")
    run = asyncio.create_task(ship_job(repo, job.key))
    while "started" not in newest_log_tail(repo, job.key):
        assert not run.done(), run
        await asyncio.sleep(0.05)
    assert "finished" not in newest_log_tail(repo, job.key)
    gate.touch()
    res = await run
    assert res.status == "ok"
    assert newest_log_tail(repo, job.key).splitlines()[-2:] == ["started", "finished"]


def unstartable(repo: Layout, server: Target) -> Hosts:
    """Host `gen` on `server`'s transport, whose runner cannot start: its interpreter is
    missing (for the local transport, one that names no such interpreter)."""
    missing = "/nonexistent/python3"
    if server is None:
        configure(repo, None, "true")
        pool = Hosts(load_config(repo.config))
        pool._transports["gen"] = LocalTransport(python=missing)
        return pool
    configure(repo, server, "true", python=missing)
    return Hosts(load_config(repo.config))


async def test_a_host_that_cannot_start_the_run_puts_the_job_back_in_the_queue(
    server: Target, repo: Layout, signer: Ed25519PrivateKey
) -> None:
    """The host's fault is not the job's: the job goes back to the queue, byte for byte,
    under its key, with the host's error in its attempt record and the fleet's notes, and
    no receipt; the MAX_HOST_FAILURES-th such failure ends it FAILED, naming the host."""
    job = mint(repo)
    queued = repo.job_file("queue", job.key).read_bytes()
    before = worktree(repo.root)
    pool = unstartable(repo, server)
    try:
        for n in range(1, MAX_HOST_FAILURES):
            res = await ship(repo, job.key, "gen", worker_id="tester", hosts=pool)
            assert res.requeued and (res.attempt, res.won) == (n, True)
            assert res.reason is not None and res.reason.startswith(f"attempt {n} on gen did not start: ")
            assert "back in the queue" in res.reason
            assert repo.job_file("queue", job.key).read_bytes() == queued
            assert not repo.receipt(job.key).exists() and not repo.lease(job.key).exists()
            assert take_snapshot(repo, disk_cache=False).rows[job.key].state == State.QUEUED
            [note] = [v.last_error for v in fleet(repo, load_config(repo.config))]
            assert note is not None and (note.key, note.attempt, note.status) == (job.key, n, NOT_STARTED)
            assert note.reason is not None and note.reason.startswith("did not start: ")
            said = f"attempt {n} on gen did not start: "
            shown, hosts = cli("show", job.key, root=repo.root), cli("hosts", root=repo.root)
            assert (
                f"host    {said}" in shown.output and f"{job.key[:8]} #{n}: did not start: " in hosts.output
            )
            assert said in job_text(job_detail(repo, job.key)).plain, "the board's detail pane says it"
        last = await ship(repo, job.key, "gen", worker_id="tester", hosts=pool)
    finally:
        await pool.close()
    assert not last.requeued and last.status == "aborted" and last.reason is not None
    assert f"could not start it {MAX_HOST_FAILURES} times" in last.reason and "replay" in last.reason
    assert take_snapshot(repo, disk_cache=False).rows[job.key].state == State.FAILED
    failed = [r for r in attempts(repo, job.key) if r["event"] == HOST_FAILED]
    assert [(r["attempt"], r["host"]) for r in failed] == [
        (n, "gen") for n in range(1, MAX_HOST_FAILURES + 1)
    ]
    assert all(r["reason"] for r in failed)
    assert_not_applyable(repo, job, before)


async def test_an_unreachable_or_refusing_ssh_host_puts_the_job_back(
    server: Target, repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """A closed port and a key the server refuses: each a host that cannot be reached."""
    ssh = needs_ssh(server)
    inner = ssh.server if isinstance(ssh, CommandHost) else ssh
    assert inner is not None
    stranger = tmp_path / "id_stranger"
    write_key(stranger)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    for broken, said in (
        (dataclasses.replace(inner, port=closed), "refused"),
        (dataclasses.replace(inner, identity=stranger), "ermission denied"),
    ):
        target = CommandHost(broken) if isinstance(ssh, CommandHost) else broken
        configure(repo, target, "true")
        job = mint(repo, f"reach {said}")
        res = await ship_job(repo, job.key)
        assert res.requeued and res.reason is not None and said in res.reason, res.reason
        assert locate(repo, job.key).folder == "queue" and not repo.receipt(job.key).exists()


async def test_a_run_that_started_and_failed_is_the_runs_not_the_hosts(
    server: Target, repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """Once the runner has said it started, every failure is the run's: a receipt, as ever,
    even when the host's session dies under it."""
    code = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
    configure(repo, server, script(tmp_path, "kill_runner", code))
    job = mint(repo)
    res = await ship_job(repo, job.key)
    assert not res.requeued and res.status in ("aborted", "rejected"), res.reason
    assert repo.receipt(job.key).exists()
    assert not [r for r in attempts(repo, job.key) if r["event"] == HOST_FAILED]
