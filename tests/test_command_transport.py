"""The command transport's own rules: how the runner's start joins the argv template, and
the operator's own ssh options riding along."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from shipkit import openssh_argv
from ssh_servers import SSHServer

from core import runner
from core.transport import JobSpec, run_job
from core.transport.command import CommandTransport, guess_mode, last_words, runner_argv


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
    assert as_line[:3] == ["ssh", "-T", "gen@host"] and len(as_line) == 4
    assert shlex.split(as_line[3]) == ["python3", *start]


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
