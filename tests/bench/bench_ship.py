"""The worker plane against OpenSSH, both on a bench-started sshd on 127.0.0.1.

ship        one 50 MB job (quick: 10 MB) through `genjob ship` (the CLI, a fresh process:
            claim, bundle, run, fetch, check, sign, verify), with a generator that
            rewrites the file; baseline: `scp` (SFTP, its default) of the same bytes
            there and back (two calls, same keys and known_hosts). Goal: at most 1.2x.
throughput  200 small jobs (quick: 40) through `genjob worker --once` at concurrency 4;
            baseline: 200 sequential `ssh host 'cd ws && generator'` runs, a fresh `ssh`
            process each, the same generator on a one-file workspace. Goal: at most 0.5x.

The sshd host's config names `python = "/usr/bin/python3"` (where that exists) for the
runner. genjob processes take their bytecode from cache, as an installed genjob does.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from common import Result, best_of

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from shipkit import GENJOB, host_block, write_config  # noqa: E402
from ssh_servers import SSHServer, run_sshd  # noqa: E402

from core.plan.mint import build_job  # noqa: E402
from core.store.layout import Layout  # noqa: E402
from core.store.queue import enqueue  # noqa: E402
from core.store.repo import init_repo  # noqa: E402
from core.store.signing import trust_repository  # noqa: E402

NAMES = ("ship", "throughput")
# The generator host's own interpreter for the runner, as its [hosts] entry would name it
# (`python3` on a login PATH may be a version manager's shim that costs every job).
RUNNER_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else None
# Rewrites the file with a small change, through a temp name, as an editor would.
REWRITE = "{{ cat {f}; echo '# edited'; }} > .next && mv .next {f}"


@dataclass
class Bench:
    folder: Path
    server: SSHServer
    env: dict[str, str]

    def ssh_options(self) -> list[str]:
        return [
            "-F",
            "/dev/null",
            "-i",
            str(self.server.identity),
            "-o",
            f"UserKnownHostsFile={self.server.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-q",
        ]

    def genjob(self, *args: str, cwd: Path) -> str:
        proc = subprocess.run([GENJOB, *args], cwd=cwd, env=self.env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"genjob {' '.join(args)}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
        return proc.stdout

    def repo(self, name: str, files: dict[str, bytes], generator: str, concurrency: int = 1) -> Layout:
        root = self.folder / name
        root.mkdir()
        subprocess.run(["git", "init", "-q", str(root)], check=True)
        for rel, data in files.items():
            (root / rel).write_bytes(data)
        layout, _ = init_repo(root)
        trust_repository(layout, self.folder / "xdg/genjob/worker_ed25519.pub")
        block = host_block(
            "sshd", self.server, generator, timeout=600, concurrency=concurrency, python=RUNNER_PYTHON
        )
        write_config(layout, block, max_file_bytes=64 << 20)
        return layout


@contextlib.contextmanager
def bench() -> Iterator[Bench]:
    with tempfile.TemporaryDirectory(prefix="genjob-bench-ship-") as tmp:
        folder = Path(tmp)
        # As installed, genjob runs from cached bytecode: allow writing it, then warm it.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["XDG_CONFIG_HOME"] = str(folder / "xdg")
        with run_sshd(folder / "sshd") as server:
            b = Bench(folder, server, env)
            b.genjob("keygen", cwd=folder)
            warm = b.repo("warm", {"a.txt": b"a\n"}, REWRITE.format(f="a.txt"))
            b.genjob("ship", mint(warm, "Warm up.", "a.txt"), "--host", "sshd", "-q", cwd=warm.root)
            yield b


def mint(layout: Layout, instruction: str, path: str) -> str:
    job = build_job(layout, instruction, [path])
    enqueue(layout, job)
    return job.key


def ship_round_trip(b: Bench, quick: bool) -> Result:
    size = (10 if quick else 50) << 20
    data = os.urandom(size)
    layout = b.repo("big", {"data.bin": data}, REWRITE.format(f="data.bin"))
    runs = iter(range(1000))

    def genjob_ship() -> None:
        key = mint(layout, f"Rewrite it, take {next(runs)}.", "data.bin")
        out = b.genjob("ship", key, "--host", "sshd", "-q", cwd=layout.root)
        if f"{key}: ok on sshd" not in out:
            raise RuntimeError(out)

    local, back = b.folder / "scp-local.bin", b.folder / "scp-back.bin"
    local.write_bytes(data)
    remote = f"{b.server.address}:{b.folder / 'scp-remote.bin'}"
    scp = ["scp", *b.ssh_options(), "-P", str(b.server.port)]

    def scp_round_trip() -> None:
        subprocess.run([*scp, str(local), remote], check=True)
        subprocess.run([*scp, remote, str(back)], check=True)

    rounds = 2 if quick else 3
    scp_s = best_of(rounds, scp_round_trip)
    genjob_s = best_of(rounds, genjob_ship)
    mb = size >> 20
    return Result("ship", genjob_s, "s", f"scp {mb} MB there and back", scp_s, 1.2)


def throughput(b: Bench, quick: bool) -> Result:
    count = 40 if quick else 200
    generator = REWRITE.format(f="app.py")
    layout = b.repo("many", {"app.py": b"print('hello')\n"}, generator, concurrency=4)
    for i in range(count):
        mint(layout, f"Small job {i}.", "app.py")
    start = time.perf_counter()
    out = b.genjob("worker", "--once", "--host", "sshd", cwd=layout.root)
    genjob_s = time.perf_counter() - start
    if f"worker done: {count} ok" not in out:
        raise RuntimeError(out[-2000:])

    workspace = b.folder / "ssh-workspace"
    workspace.mkdir()
    (workspace / "app.py").write_bytes(b"print('hello')\n")
    ssh = ["ssh", *b.ssh_options(), "-p", str(b.server.port), b.server.address]
    command = f"cd {shlex.quote(str(workspace))} && {generator}"
    start = time.perf_counter()
    for _ in range(count):
        subprocess.run([*ssh, command], check=True)
    ssh_s = time.perf_counter() - start
    return Result("throughput", genjob_s, "s", f"{count} sequential ssh runs", ssh_s, 0.5)


def run(quick: bool) -> list[Result]:
    with bench() as b:
        return [ship_round_trip(b, quick), throughput(b, quick)]
