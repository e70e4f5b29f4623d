"""The 1,000,000-job repository the `*_1m` benchmarks share, built once and reused.

Most jobs are finished, as in a queue that has run for a long time: 940,000 applied,
10,000 rejected, 49,800 queued, 100 running (their leases renewed before each run) and
100 received (an ok receipt each). Job files are laid out as genjob writes them. Only the
running and received jobs have an attempts file: no listing of the new engine reads
attempts/, and 950,000 more files would cost the fixture 4 GB of blocks and nothing else.

    uv run python tests/bench/million.py   # builds it (about two minutes), prints its path
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core.model.canonical import canonical  # noqa: E402
from core.store.layout import Layout  # noqa: E402
from core.store.repo import init_repo  # noqa: E402

CACHE = Path(tempfile.gettempdir()) / "genjob-bench"
COUNTS = {"received": 100, "running": 100, "queue": 49_800, "rejected": 10_000, "applied": 940_000}
SOURCE = b"def add(a, b):\n    return a + b\n"
LIVE_TTL = 3600.0


def _job(i: int) -> tuple[str, dict[str, object]]:
    meaning = {
        "schema": "genjob.v2",
        "instruction": f"Job {i}: add type hints and a docstring to every function in src/ops.py",
        "allowed_paths": ["src/ops.py"],
        "inputs": {"src/ops.py": hashlib.sha256(SOURCE).hexdigest()},
    }
    digest = hashlib.sha256(canonical(meaning)).hexdigest()
    return digest[:32], {
        **meaning,
        "idempotency_key": digest[:32],
        "created_at": 1_767_225_600 + i,
        "digest": digest,
    }


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)


def _claimed(layout: Layout, key: str, doc: dict[str, object], worker: str) -> None:
    """A job in running/ with its attempts file, as a claim leaves it."""
    _write(layout.running / f"{key}.json", json.dumps(doc, indent=2).encode())
    attempt = {"at": 1_767_225_700.0, "attempt": 1, "event": "claimed", "worker": worker}
    _write(layout.attempts_file(key), canonical(attempt) + b"\n")


def million(count: int = sum(COUNTS.values())) -> Path:
    """The fixture's root, built if it is not there whole yet."""
    repo = CACHE / f"million-{count}"
    if (repo / ".complete").exists():
        renew_live_leases(Layout(repo))
        return repo
    if repo.exists():
        shutil.rmtree(repo)
    (repo / "src").mkdir(parents=True)
    (repo / "src/ops.py").write_bytes(SOURCE)
    layout, _ = init_repo(repo)
    scale = count / sum(COUNTS.values())
    host = socket.gethostname()
    i = 0
    for kind, n in COUNTS.items():
        for _ in range(max(1, round(n * scale)) if n >= 100 else n):
            key, doc = _job(i)
            i += 1
            worker = f"w{i % 8}"
            if kind == "queue":
                _write(layout.queue / f"{key}.json", json.dumps(doc, indent=2).encode())
            elif kind == "running":
                _claimed(layout, key, doc, worker)
                lease = {
                    "worker": worker,
                    "host": host,
                    "pid": 1,
                    "token": 1,
                    "claimed_at": 1.0,
                    "heartbeat": 1.0,
                }
                _write(layout.lease(key), canonical({**lease, "ttl": LIVE_TTL}))
            elif kind == "received":
                _claimed(layout, key, doc, worker)
                receipt = {
                    "schema": "genjob.v2",
                    "job_digest": doc["digest"],
                    "idempotency_key": key,
                    "status": "ok",
                    "outputs": {"src/ops.py": hashlib.sha256(b"new").hexdigest()},
                    "worker_id": worker,
                }
                _write(layout.receipt(key), canonical(receipt))
            else:
                record = (
                    {"job": doc, "apply": {"at": 1_767_225_800.0, "by": "bench", "changed": ["src/ops.py"]}}
                    if kind == "applied"
                    else {"job": doc, "rejection": {"reason": "bench", "by": "operator", "at": 1.0}}
                )
                _write(layout.job_file(kind, key), canonical(record))
    old = time.time_ns() - 86_400 * 10**9
    for dirpath, _, names in os.walk(repo / ".gen"):
        for name in names:
            os.utime(os.path.join(dirpath, name), ns=(old, old))
    renew_live_leases(layout)
    (repo / ".complete").touch()
    return repo


def renew_live_leases(layout: Layout) -> None:
    """Heartbeat the running jobs' leases now, as their workers would (in place)."""
    now = time.time()
    for name in os.listdir(layout.running):
        if name.endswith(".lease"):
            path = layout.running / name
            lease = json.loads(path.read_bytes())
            with open(path, "r+b") as fh:
                fh.write(canonical({**lease, "heartbeat": now}))
                fh.truncate()


if __name__ == "__main__":
    print(million(int(sys.argv[1])) if len(sys.argv) > 1 else million())
