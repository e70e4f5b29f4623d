"""Core benchmarks: minting (hashing), racing claims, and cold and warm snapshots.

hash       `build_job` over inputs in several files  vs  `sha256sum` on the same files
claim      8 racing claimer processes               vs  one loop of rename + fsync(folder)
scan       a snapshot in a fresh process, no index  vs  a fresh process reading and
                                                        parsing the same files with json
scan_warm  the same snapshot, the index present     vs  the same bare loop

Fixtures are built once per size under the temp folder (genjob-bench/) and reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Result, best_of

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core.model.canonical import canonical  # noqa: E402
from core.model.models import job_bytes, job_from_obj  # noqa: E402
from core.plan.mint import build_job  # noqa: E402
from core.store.layout import Layout  # noqa: E402
from core.store.repo import init_repo  # noqa: E402

NAMES = ("hash", "claim", "scan", "scan_warm")
CACHE = Path(tempfile.gettempdir()) / "genjob-bench"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def run(quick: bool) -> list[Result]:
    return [bench_hash(quick), bench_claim(quick), *bench_scan(quick)]


def _fresh(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


# -- hash ------------------------------------------------------------------------------------
def bench_hash(quick: bool) -> Result:
    """Mint over files of 4 to 64 MiB; the ones up to 8 MiB are also scanned for secrets."""
    sizes = [4, 4, 8, 8, 16] if quick else [4, 4, 8, 8, 24, 24, 64, 64]
    repo = CACHE / f"hash-{sum(sizes)}"
    names = [f"data/part-{i}.txt" for i in range(len(sizes))]
    if not (repo / ".complete").exists():
        _fresh(repo)
        init_repo(repo)
        (repo / "data").mkdir()
        line = b"def handler(event, context):  # a line of ordinary source code, hashed and scanned\n"
        for name, mib in zip(names, sizes, strict=True):
            size = mib * 1024 * 1024
            (repo / name).write_bytes((line * (size // len(line) + 1))[:size])
        (repo / ".complete").touch()
    layout = Layout(repo)
    files = [str(repo / n) for n in names]
    mint = best_of(3, lambda: build_job(layout, "Summarise the data.", names))
    baseline = best_of(3, lambda: subprocess.run(["sha256sum", *files], check=True, capture_output=True))
    mib = sum(sizes)
    return Result("hash", mint, "s", f"sha256sum over {mib} MiB in {len(files)} files", baseline, 1.1)


# -- claim -----------------------------------------------------------------------------------
RACER = """
import sys, time
from pathlib import Path
from core.errors import NothingToClaim
from core.store.layout import Layout
from core.store.queue import Claimer

layout, go = Layout(Path(sys.argv[1])), Path(sys.argv[2])
claimer = Claimer(layout, sys.argv[3])
print("ready", flush=True)
while not go.exists():
    time.sleep(0.0005)
n = 0
while True:
    try:
        claimer.claim()
    except NothingToClaim:
        break
    n += 1
print(n, flush=True)
"""


def _queue(layout: Layout, count: int) -> None:
    for i in range(count):
        meaning = {
            "schema": "genjob.v2",
            "instruction": f"claim bench job {i}",
            "allowed_paths": ["src/app.py"],
            "inputs": {"src/app.py": None},
        }
        digest = hashlib.sha256(canonical(meaning)).hexdigest()
        doc = {**meaning, "idempotency_key": digest[:32], "created_at": 1_767_225_600 + i, "digest": digest}
        (layout.queue / f"{digest[:32]}.json").write_bytes(job_bytes(job_from_obj(doc, "bench")))


def _race(layout: Layout, workers: int) -> float:
    go = layout.root / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(layout.root), str(go), f"racer-{i}"],
            stdout=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        for i in range(workers)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    start = time.perf_counter()
    go.touch()
    claimed = sum(int(p.communicate()[0]) for p in procs)
    elapsed = time.perf_counter() - start
    assert claimed == len([n for n in os.listdir(layout.running) if n.endswith(".json")])
    assert not os.listdir(layout.queue)
    return elapsed


def _rename_loop(folder: Path, count: int) -> float:
    src, dst = _fresh(folder / "src"), _fresh(folder / "dst")
    for i in range(count):
        (src / f"{i:032x}.json").write_bytes(b"{}")
    names = os.listdir(src)
    os.sync()  # what the setup left to write (and deleted) is not the loop's to pay for
    start = time.perf_counter()
    for name in names:
        os.rename(src / name, dst / name)
        fd = os.open(dst, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)
        os.close(fd)
    return time.perf_counter() - start


def bench_claim(quick: bool) -> Result:
    count = 2_000 if quick else 10_000
    work = CACHE / "claim"
    best = float("inf")
    for _ in range(2):
        repo = _fresh(work / "repo")
        layout, _ = init_repo(repo)
        _queue(layout, count)
        os.sync()  # as before the baseline's loop
        best = min(best, _race(layout, 8))
    baseline = min(_rename_loop(work / "loop", count) for _ in range(2))
    return Result("claim", best, "s", f"1 loop: rename + fsync(folder) x {count}", baseline, 1.5)


# -- scan ------------------------------------------------------------------------------------
SCAN = """
import sys
from pathlib import Path
from core.store.layout import Layout
from core.read.snapshot import take_snapshot

print(len(take_snapshot(Layout(Path(sys.argv[1]))).rows))
"""

BARE = """
import json, os, sys
from pathlib import Path

gen = Path(sys.argv[1]) / ".gen"
n = 0
for folder in ("queue", "running", "applied", "rejected", "receipts"):
    for name in os.listdir(gen / folder):
        with open(gen / folder / name, "rb") as fh:
            json.loads(fh.read())
        n += 1
for name in os.listdir(gen / "attempts"):
    with open(gen / "attempts" / name, "rb") as fh:
        for line in fh.read().splitlines():
            json.loads(line)
for rel in sys.argv[2:]:
    with open(Path(sys.argv[1]) / rel, "rb") as fh:
        fh.read()
print(n)
"""

TREE = [f"src/mod_{i}.py" for i in range(50)]
# The ttl of the fixture's live leases, whose heartbeat is renewed before each run.
LIVE_TTL = 3600.0


def _scan_fixture(count: int) -> Path:
    """`count` jobs: 30% queued, 10% running (half with a live lease), 15% received,
    5% failed, 30% applied, 10% rejected; attempts for every claimed job."""
    repo = CACHE / f"scan-{count}"
    if (repo / ".complete").exists():
        _renew_live_leases(Layout(repo))
        return repo
    _fresh(repo)
    layout, _ = init_repo(repo)
    (repo / "src").mkdir()
    tree = {}
    for rel in TREE:
        data = f"# {rel}\nVALUE = {len(rel)}\n".encode()
        (repo / rel).write_bytes(data)
        tree[rel] = hashlib.sha256(data).hexdigest()
    host = socket.gethostname()
    for i in range(count):
        rel = TREE[i % len(TREE)]
        meaning = {
            "schema": "genjob.v2",
            "instruction": f"Scan bench job {i}: tidy {rel} and keep its public names.",
            "allowed_paths": [rel],
            "inputs": {rel: tree[rel]},
        }
        digest = hashlib.sha256(canonical(meaning)).hexdigest()
        key = digest[:32]
        doc = {**meaning, "idempotency_key": key, "created_at": 1_767_225_600 + i, "digest": digest}
        body = job_bytes(job_from_obj(doc, "bench"))
        bucket = i % 20
        if bucket < 6:
            (layout.queue / f"{key}.json").write_bytes(body)
            continue
        attempt = {"at": 1_767_225_700.0 + i, "event": "claimed", "attempt": 1, "worker": f"w{i % 8}"}
        layout.attempts_file(key).write_bytes(canonical(attempt) + b"\n")
        if bucket < 8:
            (layout.running / f"{key}.json").write_bytes(body)
            live = bucket == 6
            lease = {
                "worker": f"w{i % 8}",
                "host": host,
                "pid": 1,
                "token": 1,
                "claimed_at": 1_767_225_700.0,
                "heartbeat": 1_767_225_700.0,
                "ttl": LIVE_TTL if live else 60.0,
            }
            layout.lease(key).write_bytes(canonical(lease))
        elif bucket < 12:
            (layout.running / f"{key}.json").write_bytes(body)
            status = "ok" if bucket < 11 else "aborted"
            outputs = {rel: hashlib.sha256(b"new").hexdigest()} if status == "ok" else {}
            receipt = {
                "schema": "genjob.v2",
                "job_digest": digest,
                "idempotency_key": key,
                "status": status,
                "outputs": outputs,
                "worker_id": f"w{i % 8}",
            }
            layout.receipt(key).write_bytes(canonical(receipt))
        elif bucket < 18:
            record = {"job": doc, "apply": {"at": 1_767_225_800.0, "by": "bench", "changed": [rel]}}
            layout.job_file("applied", key).write_bytes(canonical(record))
        else:
            record = {"job": doc, "rejection": {"reason": "bench", "by": "operator", "at": 1.0}}
            layout.job_file("rejected", key).write_bytes(canonical(record))
    old = time.time_ns() - 86_400 * 10**9
    for dirpath, _, names in os.walk(repo):
        for name in names:
            os.utime(os.path.join(dirpath, name), ns=(old, old))
    _renew_live_leases(layout)
    (repo / ".complete").touch()
    return repo


def _renew_live_leases(layout: Layout) -> None:
    """Heartbeat the fixture's live leases now, as their workers would (in place, so
    running/ itself does not change)."""
    now = time.time()
    for name in os.listdir(layout.running):
        if name.endswith(".lease"):
            path = layout.running / name
            lease = json.loads(path.read_bytes())
            if lease["ttl"] == LIVE_TTL:
                with open(path, "r+b") as fh:
                    fh.write(canonical({**lease, "heartbeat": now}))
                    fh.truncate()


def _process(script: str, *args: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", script, *args], check=True, capture_output=True, env=ENV)
    return time.perf_counter() - start


def bench_scan(quick: bool) -> list[Result]:
    count = 20_000 if quick else 100_000
    repo = _scan_fixture(count)
    index = Layout(repo).cache / "listing.jsonl"

    cold_times, warm_times, bare_times = [], [], []
    for _ in range(3):
        index.unlink(missing_ok=True)
        cold_times.append(_process(SCAN, str(repo)))
        warm_times.append(_process(SCAN, str(repo)))
        bare_times.append(_process(BARE, str(repo), *TREE))
    bare = min(bare_times)
    label = f"fresh process: read + json.loads of the same files ({count} jobs)"
    return [
        Result("scan", min(cold_times), "s", label, bare, 1.5),
        Result("scan_warm", min(warm_times), "s", label, bare, 0.3),
    ]
