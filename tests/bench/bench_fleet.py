"""The fleet: the command transport over OpenSSH's own client, on a bench-started sshd.

throughput_command  200 jobs (quick: 40) through `genjob worker --once` over four
                    `command`-transport hosts (`ssh -T` with its own options, one job
                    at a time each), with a generator that waits a fixed second, as a
                    model call does, then rewrites the file; baseline: 200 sequential
                    `ssh host 'cd ws && generator'` runs, a fresh `ssh` process each, the
                    same generator on a one-file workspace. Goal: at most 0.5x.
candidates          one job as 4 candidates, one on each of four such hosts (`genjob ship
                    KEY --candidates 4 --host c1 … --host c4`, a fresh process), the same
                    one-second generator; baseline: four sequential `genjob ship` runs of
                    the same work (four jobs of it, minted apart), each a fresh process on
                    c1. Best of three rounds each. Goal: at most 0.4x.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

from bench_ship import REWRITE, RUNNER_PYTHON, Bench, bench, mint
from common import Result, best_of

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from shipkit import CommandHost, host_block, write_config  # noqa: E402

from core.store.layout import Layout  # noqa: E402
from core.store.repo import init_repo  # noqa: E402
from core.store.signing import trust_repository  # noqa: E402

NAMES = ("throughput_command", "candidates")
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
    trust_repository(layout, b.folder / "xdg/genjob/worker_ed25519.pub")
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


def candidates(b: Bench, quick: bool) -> Result:
    layout = command_repo(b, "best-of", WAIT_THEN_REWRITE, HOSTS)
    rounds = iter(range(1000))
    hosts = [arg for i in range(1, HOSTS + 1) for arg in ("--host", f"c{i}")]

    def best_of_four() -> None:
        key = mint(layout, f"Rewrite it, round {next(rounds)}.", "app.py")
        out = b.genjob("ship", key, "--candidates", str(HOSTS), *hosts, cwd=layout.root)
        if f"candidates of {key}: {HOSTS}, {HOSTS} verify" not in out:
            raise RuntimeError(out)

    def four_ships() -> None:
        round_ = next(rounds)
        for i in range(HOSTS):
            key = mint(layout, f"Rewrite it, round {round_}, ship {i}.", "app.py")
            out = b.genjob("ship", key, "--host", "c1", "-q", cwd=layout.root)
            if f"{key}: ok on c1" not in out:
                raise RuntimeError(out)

    runs = 2 if quick else 3
    sequential_s = best_of(runs, four_ships)
    candidates_s = best_of(runs, best_of_four)
    return Result(
        "candidates", candidates_s, "s", f"{HOSTS} sequential genjob ship, 1 s each", sequential_s, 0.4
    )


def run(quick: bool) -> list[Result]:
    with bench() as b:
        return [throughput_command(b, quick), candidates(b, quick)]
