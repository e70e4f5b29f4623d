"""The fleet: the command transport over OpenSSH's own client, on a bench-started sshd.

throughput_command  200 jobs (quick: 40) through `genjob worker --once` over four
                    `command`-transport hosts (`ssh -T` with its own options, one job
                    at a time each), with a generator that waits a fixed second, as a
                    model call does, then rewrites the file; baseline: 200 sequential
                    `ssh host 'cd ws && generator'` runs, a fresh `ssh` process each, the
                    same generator on a one-file workspace. Goal: at most 0.5x.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

from bench_ship import REWRITE, RUNNER_PYTHON, Bench, bench, mint
from common import Result

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from shipkit import CommandHost, host_block, write_config  # noqa: E402

from core.layout import Layout  # noqa: E402
from core.repo import init_repo  # noqa: E402
from core.signing import trust  # noqa: E402

NAMES = ("throughput_command",)
HOSTS = 4
# A model call's fixed wait, then the edit.
WAIT_THEN_REWRITE = "sleep 1 && " + REWRITE.format(f="app.py")


def command_repo(b: Bench, name: str, generator: str, hosts: int, concurrency: int = 1) -> Layout:
    """A repository with `hosts` command hosts `c1`…, each `ssh -T` to the bench's sshd."""
    root = b.folder / name
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "app.py").write_bytes(b"print('hello')\n")
    layout, _ = init_repo(root)
    trust(layout.trusted_keys, b.folder / "xdg/genjob/worker_ed25519.pub")
    target = CommandHost(b.server)
    blocks = [
        host_block(f"c{i}", target, generator, timeout=600, concurrency=concurrency, python=RUNNER_PYTHON)
        for i in range(1, hosts + 1)
    ]
    write_config(layout, *blocks)
    return layout


def throughput_command(b: Bench, quick: bool) -> Result:
    count = 40 if quick else 200
    layout = command_repo(b, "fleet", WAIT_THEN_REWRITE, HOSTS)
    for i in range(count):
        mint(layout, f"Small job {i}.", "app.py")
    start = time.perf_counter()
    out = b.genjob("worker", "--once", cwd=layout.root)
    genjob_s = time.perf_counter() - start
    if f"worker done: {count} ok" not in out:
        raise RuntimeError(out[-2000:])

    workspace = b.folder / "ssh-workspace-fleet"
    workspace.mkdir()
    (workspace / "app.py").write_bytes(b"print('hello')\n")
    ssh = ["ssh", *b.ssh_options(), "-p", str(b.server.port), b.server.address]
    command = f"cd {shlex.quote(str(workspace))} && {WAIT_THEN_REWRITE}"
    start = time.perf_counter()
    for _ in range(count):
        subprocess.run([*ssh, command], check=True)
    ssh_s = time.perf_counter() - start
    return Result("throughput_command", genjob_s, "s", f"{count} sequential ssh runs, 1 s each", ssh_s, 0.5)


def run(quick: bool) -> list[Result]:
    with bench() as b:
        return [throughput_command(b, quick)]
