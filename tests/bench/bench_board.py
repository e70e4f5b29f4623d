"""The board at scale: start, live update latency and memory, each against a baseline.

board_start   process start to the first frame showing jobs, with N jobs on disk (no
              index cache: the board's first run), vs a plain Textual DataTable app that
              loads the same job files naively. Goal ratio <= 0.07.
board_update  p95 from a job file's rename (queue/ -> running/) to its new state on the
              board while 200 jobs/s arrive, N loaded, vs the raw watchfiles event latency
              of the same renames in the same run (same debounce). Goal ratio <= 2.
board_rss     resident memory with N jobs loaded vs the DataTable app. Goal ratio <= 1.

N is 100,000 (quick: 20,000). Every measurement runs in its own process.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common import Result

HERE = Path(__file__).resolve().parent
APPS = HERE / "boardbench_apps.py"
PROJECT = HERE.parent.parent
sys.path.insert(0, str(PROJECT))

from core.model.canonical import canonical, sha256_bytes  # noqa: E402
from core.store.repo import init_repo  # noqa: E402

NAMES = ("board_start", "board_update", "board_rss")
SOURCE = b"def add(a, b):\n    return a + b\n"
ARRIVALS_PER_SECOND = 200
RENAMES = 100
RENAME_EVERY = 0.1
# No child may take longer than this (a hung one is killed and reported).
CHILD_TIMEOUT = 300.0


def job_doc(i: int, created: int) -> tuple[str, bytes]:
    """A valid genjob.v2 job document, laid out as `genjob mint` writes it."""
    meaning = {
        "schema": "genjob.v2",
        "instruction": f"Job {i}: add type hints and a docstring to every function in src/ops.py",
        "allowed_paths": ["src/ops.py"],
        "inputs": {"src/ops.py": hashlib.sha256(SOURCE).hexdigest()},
    }
    digest = sha256_bytes(canonical(meaning))
    doc = {**meaning, "idempotency_key": digest[:32], "created_at": created, "digest": digest}
    return digest[:32], json.dumps(doc, indent=2).encode()


def make_repo(root: Path, n: int) -> list[str]:
    (root / "src").mkdir(parents=True)
    (root / "src/ops.py").write_bytes(SOURCE)
    layout, _ = init_repo(root)
    keys = []
    start = int(time.time()) - n
    for i in range(n):
        key, data = job_doc(i, start + i)
        (layout.queue / f"{key}.json").write_bytes(data)
        keys.append(key)
    return keys


def child(*args: str) -> subprocess.Popen[str]:
    """A measured process; its stderr goes to a file (a pipe nobody reads could block it)."""
    return subprocess.Popen(
        [sys.executable, str(APPS), *args],
        stdout=subprocess.PIPE,
        stderr=tempfile.TemporaryFile(mode="w+"),
        text=True,
        cwd=PROJECT,
    )


def errors(proc: subprocess.Popen[str]) -> str:
    """The end of what a child wrote to stderr."""
    err = proc.stderr
    if err is None:
        return ""
    err.seek(0)
    return err.read()[-2000:]


def lines(proc: subprocess.Popen[str], timeout: float = CHILD_TIMEOUT) -> list[dict[str, float]]:
    """The JSON lines a child printed; it is killed (and its error shown) if it overruns."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"{proc.args[2:4]} ran past {timeout:g}s: {errors(proc)}") from None
    got = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if proc.returncode or not got:
        raise RuntimeError(f"{proc.args[2:4]} failed ({proc.returncode}): {errors(proc)}")
    return got


def wait_ready(proc: subprocess.Popen[str], timeout: float = CHILD_TIMEOUT) -> None:
    """Read the child's lines until it says it is ready; kill it if it never does."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
            line = proc.stdout.readline()
            if '"ready"' in line:
                return
            if not line:
                break
    proc.kill()
    proc.communicate()
    raise RuntimeError(f"{proc.args[2:4]} never became ready: {errors(proc)}")


def first_frame(app: str, root: Path) -> float:
    shutil.rmtree(root / ".gen" / "cache", ignore_errors=True)
    started = time.time()
    got = lines(child(app, "start", str(root)))
    return got[0]["first_frame"] - started


def rss(app: str, root: Path) -> float:
    shutil.rmtree(root / ".gen" / "cache", ignore_errors=True)
    got = lines(child(app, "rss", str(root)))
    return next(g["rss"] for g in got if "rss" in g) / 2**20


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1] if len(values) >= 2 else values[0]


def update_latency(root: Path, keys: list[str], work: Path) -> tuple[float, float]:
    """p95 rename-to-screen on the board and rename-to-event for raw watchfiles, in ms."""
    watched = keys[:: max(1, len(keys) // RENAMES)][:RENAMES]
    keys_file = work / "keys.json"
    keys_file.write_text(json.dumps(watched))
    board_out, raw_out = work / "board.json", work / "raw.json"
    for out in (board_out, raw_out):
        out.unlink(missing_ok=True)
        Path(str(out) + ".stop").unlink(missing_ok=True)
    board = child("board", "update", str(root), str(keys_file), str(board_out))
    wait_ready(board)
    raw = child("rawwatch", str(root), str(keys_file), str(raw_out))
    wait_ready(raw)
    time.sleep(0.5)

    stop = threading.Event()
    queue = root / ".gen" / "queue"

    def arrivals() -> None:
        i = len(keys)
        while not stop.is_set():
            tick = time.monotonic()
            for _ in range(ARRIVALS_PER_SECOND // 20):
                key, data = job_doc(i, int(time.time()))
                tmp = queue / f".tmp-{key}"
                tmp.write_bytes(data)
                os.rename(tmp, queue / f"{key}.json")
                i += 1
            time.sleep(max(0.0, 0.05 - (time.monotonic() - tick)))

    feeder = threading.Thread(target=arrivals)
    feeder.start()
    renamed: dict[str, float] = {}
    try:
        time.sleep(1.0)
        for key in watched:
            at = time.time()
            os.rename(queue / f"{key}.json", root / ".gen" / "running" / f"{key}.json")
            renamed[key] = at
            time.sleep(RENAME_EVERY)
        time.sleep(2.0)
    finally:
        stop.set()
        feeder.join()
        for out in (board_out, raw_out):
            Path(str(out) + ".stop").write_text("")
        for proc in (board, raw):
            try:
                proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
    board_seen = json.loads(board_out.read_text())
    raw_seen = json.loads(raw_out.read_text())
    missing = [k for k in renamed if k not in board_seen or k not in raw_seen]
    if missing:
        raise RuntimeError(f"{len(missing)} renames never showed (board or raw watcher)")
    board_ms = [(board_seen[k] - renamed[k]) * 1000 for k in renamed]
    raw_ms = [(raw_seen[k] - renamed[k]) * 1000 for k in renamed]
    return p95(board_ms), p95(raw_ms)


def run(quick: bool) -> list[Result]:
    n = 20_000 if quick else 100_000
    work = Path(tempfile.mkdtemp(prefix="genjob-bench-board-"))
    try:
        root = work / "repo"
        keys = make_repo(root, n)
        start_board = min(first_frame("board", root) for _ in range(2))
        start_table = first_frame("datatable", root)
        results = [
            Result("board_start", start_board, "s", f"DataTable app, {n:,} jobs", start_table, 0.07),
        ]
        rss_board, rss_table = rss("board", root), rss("datatable", root)
        board_p95, raw_p95 = update_latency(root, keys, work)
        results.append(
            Result("board_update", board_p95, "ms", f"raw watchfiles p95, {n:,} jobs", raw_p95, 2.0)
        )
        results.append(Result("board_rss", rss_board, "MB", f"DataTable app, {n:,} jobs", rss_table, 1.0))
        return results
    finally:
        shutil.rmtree(work, ignore_errors=True)
