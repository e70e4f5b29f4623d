"""A host whose login shell prints before genjob's runner starts: an `echo` in ~/.bashrc,
conda's or Lmod's messages, a banner that looks like a tar header.

The runner's stdout starts with its hello (a marker holding the run's nonce); what came
before it is skipped and kept, up to a cap, and a host that never lets the runner answer
is told so, with where to look. Over both SSH transports to a real sshd whose user's
~/.bashrc prints (`ssh_servers.talkative_server`), and through a command that prints
before it execs the runner, as any remote shell could.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from corekit import cli, mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import PY, openssh_argv, toml_str, write_config
from ssh_servers import LoginShell, SSHServer

from core.remote.runner import write_tar
from core.store.layout import Layout
from core.work.ship import ship
from core.work.transport import CommandTransport, JobSpec, SSHTransport, Transport, run_job
from core.work.transport.base import MAX_PREAMBLE_BYTES, QUIET_SHELL

pytestmark = pytest.mark.timeout(120)

KINDS = ["asyncssh", "command-openssh", "command-sh"]
# What login shells print: a greeting and conda's line; Lmod's words with no line end; a
# tar header and data block for an output the job never had.
BANNERS = {
    "text": b"Welcome to the cluster!\n(base) conda activated\n",
    "no-newline": b"Lmod: loading the default modules",
    "tar-header": write_tar([("outputs/a.txt", b"pwned by the banner\n"), ("result.json", b"{}")])[:1536],
}


class Printing:
    """What the far side prints before the runner starts, for each kind of host."""

    def __init__(self, kind: str, talkative: tuple[SSHServer, LoginShell] | None, tmp: Path) -> None:
        self.kind = kind
        self.banner = tmp / "banner"
        self.quit = tmp / "quit"
        self.talkative = talkative

    def prints(self, data: bytes, *, quits: bool = False) -> None:
        if self.talkative is not None:
            self.talkative[1].prints(data, quits=quits)
        else:
            self.banner.write_bytes(data)
            if quits:
                self.quit.touch()

    def transport(self) -> Transport:
        if self.kind == "command-sh":
            # A "remote shell" that prints before it runs what it was given, as a login shell does.
            banner, quit_flag = shlex.quote(str(self.banner)), shlex.quote(str(self.quit))
            script = f'cat {banner}; [ -e {quit_flag} ] && exit 0; exec "$@"'
            return CommandTransport(["sh", "-c", script, "sh"], python=sys.executable, mode="argv")
        assert self.talkative is not None
        server = self.talkative[0]
        if self.kind == "command-openssh":
            return CommandTransport(openssh_argv(server), python=sys.executable)
        return SSHTransport(
            server.address, server.port, server.identity, server.known_hosts, python=sys.executable
        )


@pytest.fixture(params=KINDS)
def host(request: pytest.FixtureRequest, tmp_path: Path) -> Printing:
    kind = str(request.param)
    talkative = None if kind == "command-sh" else request.getfixturevalue("talkative_sshd")
    return Printing(kind, talkative, tmp_path)


async def run(transport: Transport, tmp: Path, generator: str = "echo edited >> a.txt"):  # type: ignore[no-untyped-def]
    doc = json.dumps({"instruction": "x", "allowed_paths": ["a.txt"]}).encode()
    spec = JobSpec(doc, "x", ["a.txt"], lambda: {"a.txt": b"original\n"}, generator, 30)
    try:
        return await run_job(transport, spec, tmp / "out")
    finally:
        await transport.close()


@pytest.mark.parametrize("banner", list(BANNERS))
async def test_what_a_login_shell_prints_is_skipped_and_kept(
    host: Printing, tmp_path: Path, banner: str
) -> None:
    host.prints(BANNERS[banner])
    outcome, info = await run(host.transport(), tmp_path)
    assert outcome.error is None and info is not None and info.ok, (outcome, info)
    assert outcome.hello and outcome.preamble == BANNERS[banner]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.txt"]
    assert (tmp_path / "out/a.txt").read_bytes() == b"original\nedited\n"


async def test_a_login_shell_that_prints_past_the_cap_is_refused_unheld(
    host: Printing, tmp_path: Path
) -> None:
    host.prints(b"Welcome!\n" + b"x" * (4 * MAX_PREAMBLE_BYTES))
    outcome, info = await run(host.transport(), tmp_path)
    assert info is None and not outcome.hello
    assert outcome.error == (
        f"the generator host printed over {MAX_PREAMBLE_BYTES} bytes on stdout before genjob's runner "
        f"started (they begin 'Welcome!'): {QUIET_SHELL}"
    )
    assert len(outcome.preamble) <= MAX_PREAMBLE_BYTES
    assert not (tmp_path / "out").exists()


async def test_a_login_shell_that_prints_and_never_lets_the_runner_answer_says_where_to_look(
    host: Printing, tmp_path: Path
) -> None:
    host.prints(BANNERS["text"], quits=True)
    outcome, info = await run(host.transport(), tmp_path)
    assert info is None and not outcome.hello and outcome.preamble == BANNERS["text"]
    assert outcome.error is not None
    assert outcome.error.endswith(
        f"; the generator host printed {len(BANNERS['text'])} bytes on stdout and genjob's runner never "
        f"answered (they begin 'Welcome to the cluster!'): {QUIET_SHELL}"
    )
    assert "~/.bashrc" in outcome.error


def banner_host(server: SSHServer) -> str:
    return (
        "[hosts.cluster]\n"
        'transport = "ssh"\n'
        f"address = {toml_str(server.address)}\n"
        f"port = {server.port}\n"
        f"identity = {toml_str(str(server.identity))}\n"
        f"known_hosts = {toml_str(str(server.known_hosts))}\n"
        f"python = {toml_str(sys.executable)}\n"
        f"generator = {toml_str(f'{PY} -c pass')}\n"
        "timeout = 30.0\n"
    )


async def test_a_worker_keeps_what_the_login_shell_printed_as_evidence(
    repo: Layout, signer: Ed25519PrivateKey, talkative_sshd: tuple[SSHServer, LoginShell]
) -> None:
    server, shell = talkative_sshd
    write_config(repo, banner_host(server))
    shell.prints(BANNERS["tar-header"])
    job = mint(repo, "tidy", ["src/app.py"])
    res = await ship(repo, job.key, "cluster", worker_id="tester")
    assert (res.status, res.reason) == ("ok", None)
    kept = repo.log_dir(job.key) / "attempt-1.login"
    assert kept.read_bytes() == BANNERS["tar-header"]
    shown = cli("show", job.key, root=repo.root)
    assert (
        f"login   attempt-1: the host printed {len(BANNERS['tar-header'])} bytes before the runner started"
        in (shown.output)
    )

    shell.prints(BANNERS["text"], quits=True)
    again = mint(repo, "tidy again", ["src/util.py"])
    res = await ship(repo, again.key, "cluster", worker_id="tester")
    # The runner never started: the host's fault, so the job is back in the queue.
    assert res.requeued and res.reason is not None
    assert "genjob's runner never answered (they begin 'Welcome to the cluster!')" in res.reason
    assert (
        f"; what it printed is kept in .gen/logs/{again.key}/attempt-1.login; back in the queue" in res.reason
    )
    assert (repo.log_dir(again.key) / "attempt-1.login").read_bytes() == BANNERS["text"]
