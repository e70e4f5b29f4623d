"""A run never depends on genjob's own terminal: a reader that stopped early (`| head -1`),
closed standard streams, a terminal that stopped reading, and a closed terminal (SIGHUP)
leave a job's outcome as it would have been. And what is streamed shows OpenSSH's CRLF
line ends as plain ones, as `genjob show` shows the kept output."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from corekit import cli, mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import (
    GENJOB,
    CommandHost,
    assert_stopped,
    genjob_env,
    host_block,
    openssh_argv,
    read_report,
    script,
    sleeper,
    start_genjob,
    stop_process,
    toml_str,
    wait_for,
    write_config,
)
from ssh_servers import SSHServer

from core.model.lifecycle import State
from core.read.snapshot import take_snapshot
from core.store.layout import Layout
from tui.cli.worker import _Visible

pytestmark = pytest.mark.timeout(180)

# A generator that says a great deal (far more than a pipe holds), then edits its file.
CHATTY = (
    "import sys\n"
    "for i in range(20000):\n"
    "    print(f'line {i} ' + 'x' * 80)\n"
    "sys.stdout.flush()\n"
    "open('src/app.py', 'a').write('# chatty was here\\n')\n"
)


def receipt(layout: Layout, key: str) -> dict[str, object]:
    return json.loads(layout.receipt(key).read_bytes())


def chatty_host(tmp_path: Path, transport: str) -> str:
    return host_block(
        "gen", CommandHost(None) if transport == "command" else None, script(tmp_path, "chatty", CHATTY)
    )


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", command], cwd=cwd, env=genjob_env(), capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("transport", ["local", "command"])
def test_a_reader_that_leaves_early_never_touches_the_run(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, transport: str
) -> None:
    write_config(repo, chatty_host(tmp_path, transport))
    job = mint(repo)
    piped = shell(f"{shlex.quote(GENJOB)} ship {job.key} --host gen 2>&1 | head -1", repo.root)
    assert piped.stdout.startswith("line 0 ")
    assert receipt(repo, job.key)["status"] == "ok"
    assert (repo.root / "src/app.py").read_text() == "def main():\n    return 1\n", (
        "not applied, only received"
    )


@pytest.mark.parametrize("closed", [">&- 2>&-", "2>&-", ">&-"])
def test_closed_standard_streams_never_touch_the_run(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, closed: str
) -> None:
    write_config(repo, chatty_host(tmp_path, "local"))
    job = mint(repo)
    shell(f"exec {shlex.quote(GENJOB)} ship {job.key} --host gen {closed}", repo.root)
    assert receipt(repo, job.key)["status"] == "ok"
    assert cli("show", job.key, root=repo.root).output.count("line 19999 ") == 1, "the kept output is whole"


def test_a_terminal_that_stopped_reading_never_touches_the_run(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """Nothing reads genjob's output while the job runs: the job still ends, `ok`."""
    write_config(repo, chatty_host(tmp_path, "local"))
    job = mint(repo)
    proc = subprocess.Popen(
        [GENJOB, "ship", job.key, "--host", "gen"],
        cwd=repo.root,
        env=genjob_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(
            lambda: repo.receipt(job.key).exists(), "the receipt, while nothing reads genjob's output", 90
        )
        assert receipt(repo, job.key)["status"] == "ok"
    finally:
        assert proc.stdout is not None
        proc.stdout.close()
        stop_process(proc)


@pytest.mark.parametrize("command", ["ship", "worker"])
def test_a_closed_terminal_ends_the_job_aborted_not_orphaned(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, command: str
) -> None:
    gen, report = sleeper(tmp_path)
    write_config(repo, host_block("gen", None, gen))
    job = mint(repo)
    args = ("ship", job.key, "--host", "gen") if command == "ship" else ("worker", "--host", "gen")
    proc = start_genjob(*args, cwd=repo.root, log=tmp_path / "genjob.log")
    try:
        read_report(report)
        proc.send_signal(signal.SIGHUP)  # what a closing terminal or SSH session sends
        proc.wait(timeout=60)
    finally:
        stop_process(proc)
    assert receipt(repo, job.key)["status"] == "aborted"
    assert take_snapshot(repo, disk_cache=False).rows[job.key].state == State.FAILED
    assert_stopped(report)


def test_crlf_is_shown_as_a_line_end_across_chunks(capsys: pytest.CaptureFixture[str]) -> None:
    shown = _Visible()
    for chunk in (b"Warning: added.\r", b"\nnext\r\n", b"progress\r50%\rdone\r\n"):
        shown(chunk)
    shown.close()
    assert capsys.readouterr().err == "Warning: added.\nnext\nprogress␍50%␍done\n"


def test_openssh_clients_own_lines_show_without_a_carriage_return(
    openssh_server: SSHServer, repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """OpenSSH's client ends its own messages with CRLF (here: learning the host key, as
    `StrictHostKeyChecking=accept-new` does); streamed and in `show`, they end plainly."""
    argv = openssh_argv(openssh_server, tmp_path / "fresh_known_hosts")
    argv[argv.index("StrictHostKeyChecking=yes")] = "StrictHostKeyChecking=accept-new"
    write_config(
        repo,
        "[hosts.gpu]\n"
        'transport = "command"\n'
        f"command = [{', '.join(toml_str(a) for a in argv)}]\n"
        f"python = {toml_str(sys.executable)}\n"
        'generator = "echo generated"\n',
    )
    job = mint(repo)
    shipped = subprocess.run(
        [GENJOB, "ship", job.key, "--host", "gpu"],
        cwd=repo.root,
        env=genjob_env(),
        capture_output=True,
        text=True,
    )
    assert "to the list of known hosts.\ngenerated\n" in shipped.stderr
    assert "␍" not in shipped.stderr and "\r" not in shipped.stderr
    shown = cli("show", job.key, root=repo.root).output
    assert "  Warning: Permanently added" in shown and "to the list of known hosts.\n  generated\n" in shown
    assert "␍" not in shown
