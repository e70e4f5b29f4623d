"""The command transport's own rules: how the runner's start joins the argv template, and
the operator's own ssh options riding along."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from shipkit import openssh_argv, wait_for
from ssh_servers import HOST, SSHD, SSHServer, run_sshd

from core.remote import runner
from core.work.transport import JobSpec, run_job
from core.work.transport.command import CommandTransport, guess_mode, last_words, runner_argv


@pytest.mark.parametrize(
    ("argv", "mode"),
    [
        (["ssh", "-T", "gen@host"], "shell"),
        (["/usr/bin/ssh", "-F", "/dev/null", "host"], "shell"),
        (["kubectl", "exec", "-i", "-n", "gen", "deploy/generator", "--"], "argv"),
        (["docker", "exec", "-i", "gen1"], "argv"),
        (["srun", "--partition=gen", "--quiet"], "argv"),
        (["sshpass-wrapper", "host"], "argv"),
    ],
)
def test_ssh_gets_one_shell_line_and_every_other_program_an_argv(argv: list[str], mode: str) -> None:
    assert guess_mode(argv) == mode


def test_the_runner_start_as_arguments_or_as_one_quoted_line() -> None:
    as_args = runner_argv(["docker", "exec", "-i", "gen1"], "/opt/py/bin/python3", "argv")
    start = ["-I", "-S", "-c", runner.BOOTSTRAP]
    assert as_args == ["docker", "exec", "-i", "gen1", "/opt/py/bin/python3", *start]
    as_line = runner_argv(["ssh", "-T", "gen@host"], "python3", "shell")
    off = ["-a", "-x", "-o", "ClearAllForwardings=yes"]  # see the forwarding tests below
    assert as_line[:-1] == ["ssh", *off, "-T", "gen@host"]
    assert shlex.split(as_line[-1]) == ["python3", *start]


def test_an_explicit_mode_wins_over_the_guess() -> None:
    assert CommandTransport(["ssh", "host"], mode="argv").mode == "argv"
    assert CommandTransport(["gcloud", "compute", "ssh", "vm", "--"], mode="shell").mode == "shell"
    with pytest.raises(ValueError, match="needs a program"):
        CommandTransport([])


def test_last_words_quote_the_clients_last_line_cut_short() -> None:
    assert last_words(b"generator output\nConnection closed by 10.0.0.1 port 22\r\n\n") == (
        "Connection closed by 10.0.0.1 port 22"
    )
    assert last_words(b"") == ""
    long = last_words(b"x" * 1000)
    assert len(long) == 301 and long.endswith("…")


def failing_client(stdout: str, stderr: str = "", status: int = 1) -> CommandTransport:
    """A client that prints `stdout` and `stderr` and exits with `status`, never starting
    the runner (the runner's start, appended, lands in its positional parameters)."""
    code = f"printf %s {shlex.quote(stdout)}; printf %s {shlex.quote(stderr)} >&2; exit {status}"
    return CommandTransport(["/bin/sh", "-c", code, "client"])


async def one_job(transport: CommandTransport, out: Path) -> str | None:
    spec = JobSpec(
        job_doc=json.dumps({"instruction": "x", "allowed_paths": ["a.txt"]}).encode(),
        instruction="x",
        allowed_paths=["a.txt"],
        files=lambda: {"a.txt": b"a"},
        generator="true",
        timeout=30,
    )
    outcome, info = await run_job(transport, spec, out)
    assert info is None
    return outcome.error


@pytest.mark.parametrize(
    ("stdout", "reason"),
    [
        # `docker exec` passes the daemon's refusal to start the command on stdout.
        (
            'OCI runtime exec failed: exec failed: exec: "python3": '
            "executable file not found in $PATH: unknown\r\n",
            'sh exited with status 126: OCI runtime exec failed: exec failed: exec: "python3": '
            "executable file not found in $PATH: unknown",
        ),
        ("Error: No such container: gen1\n", "sh exited with status 126: Error: No such container: gen1"),
        ("several lines\nthe last says why\n\n", "sh exited with status 126: the last says why"),
    ],
)
async def test_a_client_that_says_why_it_failed_on_stdout_is_quoted(
    stdout: str, reason: str, tmp_path: Path
) -> None:
    """A client silent on stderr that failed having printed on stdout, before the runner
    ever answered, said why in what it printed: that is the reason, not a login shell's
    banner to keep quiet."""
    assert await one_job(failing_client(stdout, status=126), tmp_path / "out") == reason


async def test_a_banner_before_a_failing_client_is_still_a_banner(tmp_path: Path) -> None:
    """Words on stderr are the client's; what it printed on stdout is then a banner, and
    the advice about quiet login shells stays. So it does when the client exited 0."""
    banner = "Welcome to the cluster!\n"
    error = await one_job(failing_client(banner, "Connection closed by 10.0.0.1\n", 255), tmp_path / "a")
    assert error is not None
    assert error.startswith(
        "sh exited with status 255: Connection closed by 10.0.0.1; the generator host printed 24 bytes"
    )
    assert "never answered (they begin 'Welcome to the cluster!')" in error and "login shell" in error
    quits = await one_job(failing_client(banner, status=0), tmp_path / "b")
    assert quits is not None and quits.startswith(
        "runner produced no result; the generator host printed 24 bytes"
    )


async def test_openssh_with_a_control_master_shares_one_connection(
    openssh_server: SSHServer, tmp_path: Path
) -> None:
    """The operator's own ssh options ride along: here ControlMaster, so every job after
    the first opens a session on the one connection instead of a new one."""
    # A socket path is short (108 bytes at most): not under pytest's long tmp_path.
    sockets = Path(tempfile.mkdtemp(prefix="cm-", dir="/tmp"))
    control = ["-o", "ControlMaster=auto", "-o", f"ControlPath={sockets}/%p", "-o", "ControlPersist=60"]
    argv = openssh_argv(openssh_server)
    argv[1:1] = control
    transport = CommandTransport(argv)
    try:
        for i in range(3):
            spec = JobSpec(
                job_doc=json.dumps({"instruction": "x", "allowed_paths": ["a.txt"]}).encode(),
                instruction="x",
                allowed_paths=["a.txt"],
                files=lambda: {"a.txt": b"a"},
                generator="echo more >> a.txt",
                timeout=30,
            )
            outcome, info = await run_job(transport, spec, tmp_path / f"out{i}")
            assert outcome.error is None and info is not None and info.ok, outcome
            assert (tmp_path / f"out{i}/a.txt").read_bytes() == b"amore\n"
        check = subprocess.run(
            [*argv[:-1], "-O", "check", argv[-1]], capture_output=True, text=True, timeout=30
        )
        assert check.returncode == 0 and "Master running" in check.stderr
    finally:
        subprocess.run([*argv[:-1], "-O", "exit", argv[-1]], capture_output=True, timeout=30)
        shutil.rmtree(sockets, ignore_errors=True)


# --- what OpenSSH's client forwards to a generator host --------------------------------
# The user's ssh config may forward the agent, X11 or ports to every host: a generator host
# is untrusted, so the command transport turns each off unless the template asks for it.


@pytest.mark.parametrize(
    ("template", "added"),
    [
        (["ssh", "-T", "gen@host"], ["-a", "-x", "-o", "ClearAllForwardings=yes"]),
        (["/usr/bin/ssh", "-TA", "gen@host"], ["-x", "-o", "ClearAllForwardings=yes"]),
        (["ssh", "-o", "ForwardAgent yes", "gen@host"], ["-x", "-o", "ClearAllForwardings=yes"]),
        (["ssh", "-oForwardAgent=/run/agent.sock", "h"], ["-x", "-o", "ClearAllForwardings=yes"]),
        (["ssh", "-oforwardagent=no", "-Y", "h"], ["-a", "-o", "ClearAllForwardings=yes"]),
        (["ssh", "-p", "2222", "h", "-L", "8080:db:5432"], ["-a", "-x"]),
        (["ssh", "-o", "RemoteForward=9000 localhost:9000", "h"], ["-a", "-x"]),
        # An option's argument, or a word of the remote command, asks for nothing.
        (["ssh", "-l", "-A", "h"], ["-a", "-x", "-o", "ClearAllForwardings=yes"]),
        (["ssh", "h", "env", "-A"], ["-a", "-x", "-o", "ClearAllForwardings=yes"]),
    ],
)
def test_ssh_gets_its_forwardings_off_unless_the_template_asks(template: list[str], added: list[str]) -> None:
    argv = runner_argv(template, "python3", "shell")
    assert argv == [template[0], *added, *template[1:], argv[-1]]


def test_other_programs_get_their_argv_as_it_is() -> None:
    template = ["kubectl", "exec", "-i", "gen", "--"]
    assert runner_argv(template, "python3", "argv")[: len(template)] == template


@pytest.fixture(scope="module")
def forwarding_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """sshd as a hostile host runs it: agent and TCP forwarding allowed."""
    if not os.access(SSHD, os.X_OK):
        pytest.skip(f"{SSHD} is missing: install openssh-server")
    with run_sshd(tmp_path_factory.mktemp("forwarding"), forwarding=True) as server:
        yield server


@dataclass(frozen=True)
class Agent:
    socket: Path
    key: str  # the public key it holds, as `ssh-add -L` lists it


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    """A real ssh-agent holding a key generated for the test (its socket under /tmp: a
    socket path is short)."""
    folder = Path(tempfile.mkdtemp(prefix="agent-", dir="/tmp"))
    sock = folder / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        wait_for(sock.exists, "the agent's socket")
        key = tmp_path / "operator_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        subprocess.run(["ssh-add", "-q", str(key)], env={"SSH_AUTH_SOCK": str(sock)}, check=True)
        yield Agent(sock, Path(f"{key}.pub").read_text().split()[1])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


# Run on the host: which agent (found in the environment of the runner or of the session
# above it, as any process there may look) and which forwarded ports it can reach.
SNOOP = """
import json, os, socket, subprocess, sys

def environ(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = (e.split(b"=", 1) for e in f.read().split(b"\\0") if b"=" in e)
        return {k.decode(): v.decode() for k, v in pairs}

def ancestors():
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/comm") as f:
            if f.read().startswith("sshd"):
                return
        yield pid
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])

def reachable(port):
    try:
        socket.create_connection(("127.0.0.1", port), 5).close()
        return True
    except OSError:
        return False

sock = next((environ(p)["SSH_AUTH_SOCK"] for p in ancestors() if "SSH_AUTH_SOCK" in environ(p)), None)
listed = ""
if sock:
    add = subprocess.run(["ssh-add", "-L"], env={"SSH_AUTH_SOCK": sock}, capture_output=True, text=True)
    listed = add.stdout
report = {
    "agent": sock,
    "keys": listed,
    "local": reachable(int(sys.argv[1])),
    "remote": reachable(int(sys.argv[2])),
}
open("report.json", "w").write(json.dumps(report))
"""


def forwarding_config(server: SSHServer, folder: Path, local: int, remote: int) -> Path:
    """An operator's ssh config that forwards the agent and two ports to every host."""
    config = folder / "ssh_config"
    config.write_text(
        "Host *\n"
        "  ForwardAgent yes\n"
        f"  LocalForward 127.0.0.1:{local} 127.0.0.1:{server.port}\n"
        f"  RemoteForward 127.0.0.1:{remote} 127.0.0.1:{server.port}\n"
        f"  IdentityFile {server.identity}\n"
        "  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {server.known_hosts}\n"
        "  StrictHostKeyChecking yes\n"
        "  BatchMode yes\n"
    )
    return config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


async def snoop(server: SSHServer, agent: Agent, tmp_path: Path, *options: str) -> dict[str, object]:
    """Ship a job through OpenSSH's client, with the forwarding config and the agent in
    its environment, to a generator that snoops; what it found."""
    local, remote = free_port(), free_port()
    config = forwarding_config(server, tmp_path, local, remote)
    argv = ["ssh", "-F", str(config), *options, "-p", str(server.port), "-T", server.address]
    transport = CommandTransport(argv, env={**os.environ, "SSH_AUTH_SOCK": str(agent.socket)})
    code = tmp_path / "snoop.py"
    code.write_text(SNOOP)
    spec = JobSpec(
        job_doc=json.dumps({"instruction": "x", "allowed_paths": ["report.json"]}).encode(),
        instruction="x",
        allowed_paths=["report.json"],
        files=dict,
        generator=f"{shlex.quote(sys.executable)} {shlex.quote(str(code))} {local} {remote}",
        timeout=30,
    )
    outcome, info = await run_job(transport, spec, tmp_path / "out")
    assert outcome.error is None and info is not None and info.ok, (outcome, info)
    found: dict[str, object] = json.loads((tmp_path / "out/report.json").read_bytes())
    return found


async def test_openssh_forwards_no_agent_nor_port_the_users_config_sets_up(
    forwarding_sshd: SSHServer, agent: Agent, tmp_path: Path
) -> None:
    found = await snoop(forwarding_sshd, agent, tmp_path)
    assert found == {"agent": None, "keys": "", "local": False, "remote": False}


async def test_an_explicit_a_in_the_template_keeps_the_agent_and_only_it(
    forwarding_sshd: SSHServer, agent: Agent, tmp_path: Path
) -> None:
    found = await snoop(forwarding_sshd, agent, tmp_path, "-A")
    assert found["agent"] and agent.key in str(found["keys"])
    assert (found["local"], found["remote"]) == (False, False)
