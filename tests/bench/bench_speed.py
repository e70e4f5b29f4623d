"""Speed against the fastest tool for the same work.

hash_openssl  `build_job` over 200 MiB in 8 files (hashed, the small ones scanned for
              secrets)  vs  `openssl dgst -sha256` of the same files
cli_start     `genjob ls` on a one-job queue, as a process (median of 20)
              vs  `python -c pass` with the same interpreter (median of 20)
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Result, best_of

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core.plan.mint import build_job  # noqa: E402
from core.store.layout import Layout  # noqa: E402
from core.store.repo import init_repo  # noqa: E402

NAMES = ("hash_openssl", "cli_start")
CACHE = Path(tempfile.gettempdir()) / "genjob-bench"
GENJOB = Path(sys.executable).parent / "genjob"


def run(quick: bool) -> list[Result]:
    return [bench_hash_openssl(quick), bench_cli_start(quick)]


def _hash_fixture(sizes: list[int]) -> tuple[Path, list[str]]:
    repo = CACHE / f"hash-openssl-{sum(sizes)}"
    names = [f"data/part-{i}.txt" for i in range(len(sizes))]
    if not (repo / ".complete").exists():
        if repo.exists():
            shutil.rmtree(repo)
        repo.mkdir(parents=True)
        init_repo(repo)
        (repo / "data").mkdir()
        line = b"def handler(event, context):  # a line of ordinary source code, hashed and scanned\n"
        for name, mib in zip(names, sizes, strict=True):
            size = mib << 20
            (repo / name).write_bytes((line * (size // len(line) + 1))[:size])
        (repo / ".complete").touch()
    return repo, names


def bench_hash_openssl(quick: bool) -> Result:
    sizes = [4, 4, 8, 8, 16] if quick else [4, 4, 8, 8, 24, 24, 64, 64]
    repo, names = _hash_fixture(sizes)
    layout = Layout(repo)
    files = [str(repo / n) for n in names]
    openssl = shutil.which("openssl") or "openssl"
    genjob = best_of(5, lambda: build_job(layout, "Summarise the data.", names))
    baseline = best_of(
        5, lambda: subprocess.run([openssl, "dgst", "-sha256", *files], check=True, capture_output=True)
    )
    return Result(
        "hash_openssl",
        genjob,
        "s",
        f"openssl dgst -sha256 over {sum(sizes)} MiB in {len(files)} files",
        baseline,
        1.5,
    )


def _median_of_processes(argv: list[str], cwd: Path, runs: int) -> float:
    times = []
    # Bytecode is written and used, as it is for an installed genjob.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, cwd=cwd, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_cli_start(quick: bool) -> Result:
    repo = CACHE / "cli-start"
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    layout, _ = init_repo(repo)
    (repo / "a.py").write_text("x = 1\n")
    build = build_job(layout, "One job.", ["a.py"])
    from core.store.queue import enqueue

    enqueue(layout, build)
    # Files written in the last two seconds are read again by every scan (their
    # content may still change); a queue's files are older than that when someone lists it.
    minute_ago = time.time() - 60
    for folder, _, names in os.walk(layout.gen):
        for name in names:
            os.utime(Path(folder, name), (minute_ago, minute_ago))
    runs = 10 if quick else 20
    _median_of_processes([str(GENJOB), "ls"], repo, 2)  # warm the page cache and the bytecode
    genjob = _median_of_processes([str(GENJOB), "ls"], repo, runs)
    baseline = _median_of_processes([sys.executable, "-c", "pass"], repo, runs)
    return Result("cli_start", genjob, "s", f"python -c pass (median of {runs})", baseline, 5.0)
