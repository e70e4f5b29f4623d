"""One contract, eight transports: local subprocess, asyncssh server, OpenSSH sshd, and the
command transport riding OpenSSH's own client, bwrap, Slurm's `srun`, `docker exec -i`
into a running container and `docker run --rm -i` of a fresh one.

The SSH servers, the one-node Slurm cluster and the Docker daemon run on this machine, so
a generator's absolute paths (interpreter, pid files) mean the same on both sides; bwrap
and the containers share this machine's processes and /tmp for the same reason (the
containers with `--pid=host`, `dockerkit`). Processes are checked through /proc.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shlex
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncssh
import pytest
from dockerkit import DOCKER_GROUP, DockerDaemon, exec_argv, run_argv
from shipkit import KINDS, alive, bwrap_argv, openssh_argv, sleeper, wait_dead
from slurmkit import SlurmCluster
from ssh_servers import HOST_ENV, SSHServer, known_hosts_line, write_key

from core.errors import BadInput
from core.remote.rules import Limits
from core.work.transport import (
    CommandTransport,
    HostKeyError,
    JobSpec,
    LocalTransport,
    SSHTransport,
    Transport,
    run_job,
)

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[3]
PY = shlex.quote(sys.executable)
LIMITS = Limits(max_file_bytes=1 << 16, max_total_bytes=1 << 18, max_files=20, max_tail_bytes=4096)


# Every worker-plane kind, and the command transport through `srun` to a real cluster and
# through `docker exec -i` and `docker run --rm -i` to a real Docker daemon.
# The Docker kinds share one xdist worker, and so one daemon (`dockerkit.DOCKER_GROUP`).
DOCKER_KINDS = ("command-docker-exec", "command-docker-run")
CONTRACT_KINDS = [
    *KINDS,
    "command-srun",
    *(pytest.param(kind, marks=pytest.mark.xdist_group(DOCKER_GROUP)) for kind in DOCKER_KINDS),
]


# What the runner and the result's checks decide alone, the same whatever carries the
# stream: these run over `docker exec -i`, and over `docker run --rm -i` would only start
# a fresh container for each job (half a second each), so they are not run again there.
RUNNERS_OWN_CHECKS = frozenset(
    {
        "test_writes_outside_allowed_paths",
        "test_symlink_at_allowed_path",
        "test_huge_file_is_refused",
        "test_running_jobs_leave_the_thread_pool_free",
        "test_inputs_over_the_limits_are_refused_before_anything_is_sent",
    }
)


@pytest.fixture(params=CONTRACT_KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    if request.param == "command-docker-run" and request.node.originalname in RUNNERS_OWN_CHECKS:
        pytest.skip("the runner's own checks: run over docker exec -i, a fresh container adds nothing")
    return str(request.param)


@pytest.fixture
def cluster(kind: str, request: pytest.FixtureRequest) -> SlurmCluster | None:
    """The Slurm cluster `srun` reaches; None for every other kind."""
    return request.getfixturevalue("slurm_cluster") if kind == "command-srun" else None


@pytest.fixture
def daemon(kind: str, request: pytest.FixtureRequest) -> DockerDaemon | None:
    """The Docker daemon `docker` reaches; None for every other kind."""
    return request.getfixturevalue("docker_daemon") if kind in DOCKER_KINDS else None


@pytest.fixture
def server(
    kind: str, request: pytest.FixtureRequest, cluster: SlurmCluster | None, daemon: DockerDaemon | None
) -> SSHServer | None:
    """The SSH server the transport talks to; None for the local transport, bwrap, srun and docker."""
    if kind in ("local", "command-bwrap", "command-srun", *DOCKER_KINDS):
        return None
    return request.getfixturevalue(f"{kind.removeprefix('command-')}_server")


def docker_argv(kind: str, daemon: DockerDaemon, env_names: tuple[str, ...]) -> list[str]:
    """`docker exec -i` into the daemon's running container, or `docker run --rm -i` of a
    fresh one in this machine's pids; each handing the container the client's values of
    `env_names` (`--env NAME`), the environment the runner starts with there."""
    forward = [f"--env={name}" for name in env_names]
    if kind == "command-docker-exec":
        return [*exec_argv(daemon.container)[:-1], *forward, daemon.container]
    return run_argv("--pid=host", *forward)


def make_transport(
    kind: str,
    server: SSHServer | None,
    cluster: SlurmCluster | None = None,
    daemon: DockerDaemon | None = None,
    *,
    env_names: tuple[str, ...] = (),
    **kwargs: object,
) -> Transport:
    if kind == "local":
        return LocalTransport(**kwargs)  # type: ignore[arg-type]
    if kind == "command-bwrap":
        return CommandTransport(bwrap_argv(), python=str(kwargs.pop("python", sys.executable)), **kwargs)  # type: ignore[arg-type]
    if kind == "command-srun":
        assert cluster is not None
        python = str(kwargs.pop("python", sys.executable))
        return CommandTransport(cluster.srun(), python=python, env=cluster.env, **kwargs)  # type: ignore[arg-type]
    if kind in DOCKER_KINDS:
        assert daemon is not None
        python = str(kwargs.pop("python", sys.executable))
        argv = docker_argv(kind, daemon, env_names)
        return CommandTransport(argv, python=python, env={**daemon.env, **os.environ}, **kwargs)  # type: ignore[arg-type]
    assert server is not None
    known_hosts = kwargs.pop("known_hosts", server.known_hosts)
    if kind == "command-openssh":
        return CommandTransport(openssh_argv(server, known_hosts), **kwargs)  # type: ignore[arg-type]
    return SSHTransport(
        server.address,
        server.port,
        server.identity,
        known_hosts,  # type: ignore[arg-type]
        connect_timeout=10,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture
async def transport(
    kind: str, server: SSHServer | None, cluster: SlurmCluster | None, daemon: DockerDaemon | None
):  # type: ignore[no-untyped-def]
    t = make_transport(kind, server, cluster, daemon)
    yield t
    await t.close()


def script(tmp: Path, name: str, code: str) -> str:
    path = tmp / f"{name}.py"
    path.write_text(code)
    return f"{PY} {shlex.quote(str(path))}"


async def job(
    transport: Transport,
    tmp: Path,
    generator: str,
    paths: list[str],
    files: dict[str, bytes] | Callable[[], dict[str, bytes]] | None = None,
    *,
    instruction: str = "Tidy up.",
    timeout: float = 30,
    limits: Limits = LIMITS,
    on_output=None,  # type: ignore[no-untyped-def]
    cancel: asyncio.Event | None = None,
    dest: str = "out",
    pass_env: tuple[str, ...] = (),
    on_start=None,  # type: ignore[no-untyped-def]
):  # type: ignore[no-untyped-def]
    doc = json.dumps({"instruction": instruction, "allowed_paths": paths}).encode()
    spec = JobSpec(
        job_doc=doc,
        instruction=instruction,
        allowed_paths=paths,
        files=files if callable(files) else lambda: files or {},
        generator=generator,
        timeout=timeout,
        limits=limits,
        pass_env=pass_env,
    )
    return await run_job(transport, spec, tmp / dest, on_output, cancel, on_start=on_start)


async def wait_for_file(path: Path) -> str:
    deadline = time.monotonic() + 30
    while not (path.exists() and path.read_text().endswith("\n")):
        assert time.monotonic() < deadline, f"{path} never written"
        await asyncio.sleep(0.02)
    return path.read_text()


async def check_stopped(report: Path) -> None:
    pid, child, workdir = (await wait_for_file(report)).split()
    assert await asyncio.to_thread(wait_dead, [int(pid), int(child)]) == []
    deadline = time.monotonic() + 30
    while Path(workdir).exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not Path(workdir).exists(), "workspace left behind"


async def test_round_trip(transport: Transport, tmp_path: Path) -> None:
    seen: list[bytes] = []
    gen = f"PYTHONPATH={shlex.quote(str(ROOT))} {PY} -m core.remote.demo_generator"
    outcome, info = await job(
        transport,
        tmp_path,
        gen,
        ["src/app.py", "docs/new.md"],
        {"src/app.py": b"x = 1\n"},
        on_output=seen.append,
    )
    assert outcome.error is None and outcome.exit_status == 0
    assert info is not None and info.ok, info
    assert (tmp_path / "out/src/app.py").read_bytes() == (
        b"x = 1\n# genjob demo edit\n# instruction: Tidy up.\n"
    )
    assert (tmp_path / "out/docs/new.md").exists()
    assert b"edited src/app.py" in b"".join(seen)


async def test_concurrent_jobs_share_the_transport(transport: Transport, tmp_path: Path) -> None:
    gen = script(tmp_path, "upper", "t = open('a.txt').read()\nopen('a.txt', 'w').write(t.upper())\n")
    runs = [
        job(transport, tmp_path, gen, ["a.txt"], {"a.txt": f"job {i}".encode()}, dest=f"out{i}")
        for i in range(4)
    ]
    for i, (outcome, info) in enumerate(await asyncio.gather(*runs)):
        assert outcome.error is None and info is not None and info.ok
        assert (tmp_path / f"out{i}/a.txt").read_bytes() == f"JOB {i}".encode()


async def test_nonzero_exit(transport: Transport, tmp_path: Path) -> None:
    gen = script(tmp_path, "fail", "import sys\nprint('it broke', flush=True)\nsys.exit(3)\n")
    outcome, info = await job(transport, tmp_path, gen, ["a.py"], {"a.py": b"a"})
    assert outcome.error is None and outcome.marked, "the runner started: the failure is the run's"
    assert info is not None and info.exit_code == 3 and not info.ok
    assert "it broke" in info.tail
    assert info.outputs == {"a.py": info.outputs["a.py"]}


async def test_timeout_stops_every_process(transport: Transport, tmp_path: Path) -> None:
    gen, report = sleeper(tmp_path)
    _outcome, info = await job(transport, tmp_path, gen, ["a.py"], timeout=1)
    assert info is not None and info.timed_out and info.exit_code is None and not info.ok
    await check_stopped(report)


async def test_writes_outside_allowed_paths(transport: Transport, tmp_path: Path) -> None:
    code = "import os\nopen('a.py','w').write('ok')\nos.makedirs('sub/x')\nopen('stray.txt','w')\n"
    _outcome, info = await job(transport, tmp_path, script(tmp_path, "stray", code), ["a.py"])
    assert info is not None and not info.ok
    assert "stray.txt: file created outside the allowed paths" in info.violations
    assert "sub: directory created outside the allowed paths" in info.violations
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.py"]


async def test_symlink_at_allowed_path(transport: Transport, tmp_path: Path) -> None:
    code = "import os\nos.remove('a.py')\nos.symlink('/etc/passwd', 'a.py')\n"
    _outcome, info = await job(transport, tmp_path, script(tmp_path, "link", code), ["a.py"], {"a.py": b"a"})
    assert info is not None and not info.ok
    assert info.violations == ("a.py: symlink at an allowed path",)
    assert info.outputs == {} and not (tmp_path / "out/a.py").exists()


async def test_huge_file_is_refused(transport: Transport, tmp_path: Path) -> None:
    code = "open('a.bin', 'wb').write(b'x' * 100000)\nopen('b.txt', 'w').write('small')\n"
    _outcome, info = await job(transport, tmp_path, script(tmp_path, "huge", code), ["a.bin", "b.txt"])
    assert info is not None and not info.ok
    assert info.violations == (f"a.bin: 100000 bytes, over max_file_bytes ({LIMITS.max_file_bytes})",)
    assert sorted(info.outputs) == ["b.txt"]


async def test_cancel_mid_run(transport: Transport, tmp_path: Path) -> None:
    gen, report = sleeper(tmp_path)
    cancel = asyncio.Event()

    def on_output(chunk: bytes) -> None:
        if b"started" in chunk:
            cancel.set()

    outcome, info = await job(transport, tmp_path, gen, ["a.py"], on_output=on_output, cancel=cancel)
    assert outcome.error == "cancelled" and info is None
    await check_stopped(report)


def lost_connection(kind: str) -> str:
    """How a run cut off by a dropped connection says so: asyncssh in its own words,
    OpenSSH's client in its own (quoted by the command transport)."""
    return "ssh exited with status 255: Connection to" if kind == "command-openssh" else "connection lost"


async def test_connection_dropped_then_reused(
    kind: str, server: SSHServer | None, transport: Transport, tmp_path: Path
) -> None:
    if server is None:
        pytest.skip("the local transport has no connection to drop")
    gen, report = sleeper(tmp_path)
    running = asyncio.ensure_future(job(transport, tmp_path, gen, ["a.py"]))
    await wait_for_file(report)
    server.drop()
    outcome, info = await running
    assert info is None and outcome.error is not None and lost_connection(kind) in outcome.error
    await check_stopped(report)

    again = script(tmp_path, "again", "open('a.py', 'w').write('second')\n")
    outcome, info = await job(transport, tmp_path, again, ["a.py"], dest="out2")
    assert outcome.error is None and info is not None and info.ok
    assert (tmp_path / "out2/a.py").read_text() == "second"


HOSTILE = (
    "$(touch {marker}) `touch {marker}` ${{HOME}} '; touch {marker}; '\" \\\n"
    "line two | cat /etc/passwd & rm -rf / ; {{paths}} {{instruction_file}} %s %n\n"
    "\t\r\x1b[31m ünïcødé 🙂 \u202e \ufeff \udcff-free? \x00 end"
)


async def test_instruction_arrives_byte_for_byte(transport: Transport, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    instruction = HOSTILE.replace("\udcff", "").format(marker=marker)
    code = (
        "import os, shutil\n"
        "shutil.copyfile(os.environ['GENJOB_INSTRUCTION_FILE'], 'got.txt')\n"
        "shutil.copyfile(os.environ['GENJOB_JOB_FILE'], 'job.json')\n"
    )
    gen = script(tmp_path, "copy", code) + " {instruction_file} {paths}"
    _outcome, info = await job(transport, tmp_path, gen, ["got.txt", "job.json"], instruction=instruction)
    assert info is not None and info.ok, info
    assert (tmp_path / "out/got.txt").read_bytes() == instruction.encode("utf-8")
    assert json.loads((tmp_path / "out/job.json").read_bytes())["instruction"] == instruction
    assert not marker.exists()


async def test_pass_env_gives_the_generator_what_it_names_and_nothing_else(
    kind: str,
    server: SSHServer | None,
    cluster: SlurmCluster | None,
    daemon: DockerDaemon | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The runner's environment (an SSH session's, the worker's under bwrap and srun, the
    container's with what `--env` hands it, and genjob's own for the local transport)
    reaches the generator only where `pass_env` names it, and never over what the runner
    sets itself (`HO*` matches HOME)."""
    for name, value in HOST_ENV.items():
        monkeypatch.setenv(name, value)
    patterns = ("PASSME_*", "HO*", "NOT_SET_ANYWHERE")
    transport = make_transport(
        kind,
        server,
        cluster,
        daemon,
        env_names=tuple(HOST_ENV),
        **({"pass_env": patterns} if kind == "local" else {}),
    )
    code = "import json, os\njson.dump(dict(os.environ), open('env.json', 'w'))\n"
    try:
        _outcome, info = await job(
            transport, tmp_path, script(tmp_path, "env", code), ["env.json"], pass_env=patterns
        )
    finally:
        await transport.close()
    assert info is not None and info.ok, info
    env = json.loads((tmp_path / "out/env.json").read_text())
    assert {name: env.get(name) for name in HOST_ENV} == {
        "PASSME_ONE": "one",
        "PASSME_TWO": "two",
        "OTHER_SECRET": None,
    }
    assert "NOT_SET_ANYWHERE" not in env
    home = Path(env["HOME"])  # the runner's own empty home beside the workspace, not the session's
    assert home.name == "home" and home.parent.name.startswith("genjob-")


async def test_missing_python(
    kind: str,
    server: SSHServer | None,
    cluster: SlurmCluster | None,
    daemon: DockerDaemon | None,
    tmp_path: Path,
) -> None:
    transport = make_transport(kind, server, cluster, daemon, python="/nonexistent/python3")
    try:
        outcome, info = await job(transport, tmp_path, "true", ["a.py"])
    finally:
        await transport.close()
    # The runner never said it started: the ship puts the job back (the host's fault).
    assert info is None and outcome.error is not None and not outcome.marked
    if kind == "command-bwrap":
        # bwrap execs the argv itself and says why it could not, in its own words.
        assert outcome.error == (
            "bwrap exited with status 1: bwrap: execvp /nonexistent/python3: No such file or directory"
        )
    elif kind == "command-srun":
        # The step's slurmstepd execs the argv and says why it could not, in its own words.
        assert outcome.error.startswith("srun exited with status 2: ")
        assert "execve(): /nonexistent/python3: No such file or directory" in outcome.error
    elif kind == "command-docker-exec":
        # The daemon refuses to start the command; docker exec says so on stdout, not
        # stderr, and those are its last words, not a login shell's banner.
        assert outcome.error.startswith("docker exited with status 126: OCI runtime exec failed: ")
        assert "stat /nonexistent/python3: no such file or directory" in outcome.error
        assert "login shell" not in outcome.error
    else:
        assert "/nonexistent/python3 not found" in outcome.error


async def test_unknown_host_key_is_refused(kind: str, server: SSHServer | None, tmp_path: Path) -> None:
    if server is None:
        pytest.skip("no host key on the local transport")
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    transport = make_transport(kind, server, known_hosts=empty)
    with pytest.raises(HostKeyError) as caught:
        await job(transport, tmp_path, "true", ["a.py"])
    message = str(caught.value)
    if kind == "command-openssh":
        # OpenSSH names no fingerprint for a key it does not know; genjob passes on its words.
        assert caught.value.fingerprint is None
        assert message.startswith(f"host key for [127.0.0.1]:{server.port} is not known to ssh")
        assert "No ED25519 host key is known" in message and "ssh-keyscan" in message
    else:
        assert caught.value.fingerprint == server.fingerprint
        assert server.fingerprint in message and "not in" in message
        assert f"ssh-keyscan -p {server.port} 127.0.0.1 >> {empty}" in message
    assert empty.read_text() == "", "nothing is learned silently"


async def test_changed_host_key_is_refused(kind: str, server: SSHServer | None, tmp_path: Path) -> None:
    if server is None:
        pytest.skip("no host key on the local transport")
    other = asyncssh.generate_private_key("ssh-ed25519")
    stale = tmp_path / "known_hosts"
    stale.write_text(known_hosts_line(server.port, other))
    transport = make_transport(kind, server, known_hosts=stale)
    with pytest.raises(HostKeyError) as caught:
        await job(transport, tmp_path, "true", ["a.py"])
    message = str(caught.value)
    assert "CHANGED" in message and server.fingerprint in message
    assert caught.value.fingerprint == server.fingerprint
    assert other.get_fingerprint("sha256") not in message
    if kind == "command-openssh":
        assert f'ssh-keygen -f "{stale}" -R "[127.0.0.1]:{server.port}"' in message
    else:
        assert f"ssh-keyscan -p {server.port} 127.0.0.1 >> {stale}" in message


async def test_failing_output_callback_stops_the_run(transport: Transport, tmp_path: Path) -> None:
    gen, report = sleeper(tmp_path)

    def on_output(chunk: bytes) -> None:
        raise RuntimeError("display broke")

    with pytest.raises(RuntimeError, match="display broke"):
        await job(transport, tmp_path, gen, ["a.py"], on_output=on_output)
    await check_stopped(report)


async def test_unreachable_or_refused(kind: str, server: SSHServer | None, tmp_path: Path) -> None:
    if server is None:
        pytest.skip("nothing to reach on the local transport")
    stranger = tmp_path / "id_stranger"
    write_key(stranger)
    refused = make_transport(kind, dataclasses.replace(server, identity=stranger))
    outcome, info = await job(refused, tmp_path, "true", ["a.py"])
    assert info is None and outcome.error is not None and not outcome.marked
    if kind == "command-openssh":
        assert outcome.error.startswith("ssh exited with status 255: ")
    else:
        assert outcome.error.startswith(f"ssh {server.address} port {server.port}: ")
    assert "ermission denied" in outcome.error

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    nowhere = make_transport(kind, dataclasses.replace(server, port=closed_port))
    outcome, info = await job(nowhere, tmp_path, "true", ["a.py"], dest="out2")
    assert info is None and outcome.error is not None and "refused" in outcome.error.lower()
    assert not outcome.marked


async def test_local_runs_the_default_generator_command(tmp_path: Path) -> None:
    """``python3`` resolves to this interpreter and ``core`` imports, as config.toml assumes."""
    transport = LocalTransport()
    outcome, info = await job(transport, tmp_path, "python3 -m core.remote.demo_generator {paths}", ["a.py"])
    assert outcome.error is None and info is not None and info.ok, (outcome, info)
    assert (tmp_path / "out/a.py").read_bytes().startswith(b"# genjob demo edit\n")


async def test_idle_connection_dropped_between_jobs(
    server: SSHServer | None, transport: Transport, tmp_path: Path
) -> None:
    if server is None:
        pytest.skip("the local transport has no connection to drop")
    gen = script(tmp_path, "write", "open('a.py', 'w').write('ok')\n")
    for round_ in range(3):
        outcome, info = await job(transport, tmp_path, gen, ["a.py"], dest=f"out{round_}")
        assert outcome.error is None and info is not None and info.ok, outcome
        server.drop()


async def test_cancelling_the_task_stops_the_remote(transport: Transport, tmp_path: Path) -> None:
    gen, report = sleeper(tmp_path)
    task = asyncio.ensure_future(job(transport, tmp_path, gen, ["a.py"]))
    await wait_for_file(report)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await check_stopped(report)


def runners() -> set[int]:
    """The pids of every runner on this machine (all three servers are local)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if b"genjob-runner" in (entry / "cmdline").read_bytes() and alive(int(entry.name)):
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


async def wait_for_runner(before: set[int]) -> None:
    deadline = time.monotonic() + 30
    while not runners() - before:
        assert time.monotonic() < deadline, "the runner never started"
        await asyncio.sleep(0.02)


async def test_a_job_that_cannot_be_prepared_stops_the_started_runner(
    transport: Transport, tmp_path: Path
) -> None:
    before = runners()
    go = threading.Event()

    def files() -> dict[str, bytes]:
        go.wait(30)
        raise BadInput("a.py: changed since the job was minted; replay the job")

    marker = tmp_path / "ran"
    task = asyncio.ensure_future(
        job(transport, tmp_path, f"touch {shlex.quote(str(marker))}", ["a.py"], files)
    )
    await wait_for_runner(before)  # started while the files are still being read
    go.set()
    with pytest.raises(BadInput, match=r"a\.py: changed since the job was minted"):
        await task
    assert await asyncio.to_thread(wait_dead, list(runners() - before)) == []
    assert not marker.exists() and not (tmp_path / "out").exists()
    outcome, info = await job(transport, tmp_path, "true", ["a.py"], {"a.py": b"x"}, dest="next")
    assert outcome.error is None and info is not None and info.ok, "the transport still works"


async def test_a_cancel_while_the_job_is_prepared(transport: Transport, tmp_path: Path) -> None:
    before = runners()
    release = threading.Event()
    cancel = asyncio.Event()

    def files() -> dict[str, bytes]:
        release.wait(30)
        return {"a.py": b"x"}

    task = asyncio.ensure_future(job(transport, tmp_path, "touch ran", ["a.py"], files, cancel=cancel))
    await wait_for_runner(before)
    cancel.set()
    outcome, info = await task
    release.set()
    assert outcome.error == "cancelled" and info is None
    assert await asyncio.to_thread(wait_dead, list(runners() - before)) == []


async def test_inputs_over_the_limits_are_refused_before_anything_is_sent(
    transport: Transport, tmp_path: Path
) -> None:
    big = {"a.bin": b"x" * (LIMITS.max_file_bytes + 1)}
    marker = tmp_path / "ran"
    with pytest.raises(
        BadInput, match=r"cannot bundle the job: files/a\.bin: 65537 bytes, over max_file_bytes"
    ):
        await job(transport, tmp_path, f"touch {shlex.quote(str(marker))}", ["a.bin"], big)
    assert not marker.exists() and not (tmp_path / "out").exists()


async def test_running_jobs_leave_the_thread_pool_free(transport: Transport, tmp_path: Path) -> None:
    """A job waits for its result through the whole run; that must not hold a pool thread,
    or as many jobs as the pool has threads would leave none for anything else (a worker's
    heartbeats among them). Here the generators wait for a file that only the pool writes."""
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=2))
    flag = tmp_path / "go"
    gen = f"while [ ! -e {shlex.quote(str(flag))} ]; do sleep 0.05; done; echo done >> a.txt"
    before = runners()
    runs = asyncio.gather(
        *(job(transport, tmp_path, gen, ["a.txt"], {"a.txt": b"x"}, dest=f"out{i}") for i in range(3))
    )
    deadline = time.monotonic() + 30
    while len(runners() - before) < 3:
        assert time.monotonic() < deadline, "the runners never started"
        await asyncio.sleep(0.02)
    await asyncio.wait_for(asyncio.to_thread(flag.touch), 30)
    for outcome, info in await asyncio.wait_for(runs, 60):
        assert outcome.error is None and info is not None and info.ok, outcome
    assert all((tmp_path / f"out{i}/a.txt").read_bytes() == b"xdone\n" for i in range(3))
