"""The listing at 1,000,000 jobs (`million.py` builds the repository once and keeps it).

board_start_1m  process start to the board's first frame showing jobs (no index: its first
                run), vs a minimal Textual app that lists every state folder and shows the
                count. Goal ratio <= 2.
board_rss_1m    the board's resident memory once its scan is done, vs the same minimal
                app's once it has listed. Goal ratio <= 2.
ls_state_1m     `genjob ls --state RECEIVED` (100 of the 1,000,000), vs a process that lists
                every state folder. Goal ratio <= 3.

Quick: 100,000 jobs in the same proportions.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bench_board import first_frame, rss
from common import Result
from million import million

NAMES = ("board_start_1m", "board_rss_1m", "ls_state_1m")
GENJOB = Path(sys.executable).parent / "genjob"

LIST_FOLDERS = """
import os, sys
gen = os.path.join(sys.argv[1], ".gen")
names = [n for f in ("queue", "running", "receipts", "applied", "rejected", "candidates")
         for n in os.listdir(os.path.join(gen, f))]
print(len(names))
"""


def _timed(args: list[str], root: Path) -> float:
    start = time.perf_counter()
    subprocess.run(args, cwd=root, check=True, capture_output=True)
    return time.perf_counter() - start


def run(quick: bool) -> list[Result]:
    root = million(100_000 if quick else 1_000_000)
    n = "100k" if quick else "1M"
    board = min(first_frame("board", root) for _ in range(2))
    base = min(first_frame("minimal", root) for _ in range(2))
    results = [Result("board_start_1m", board, "s", f"minimal app listing {n} names", base, 2.0)]
    results.append(
        Result(
            "board_rss_1m",
            rss("board", root),
            "MB",
            f"minimal app listing {n} names",
            rss("minimal", root),
            2.0,
        )
    )
    ls = min(_timed([str(GENJOB), "ls", "--state", "RECEIVED"], root) for _ in range(3))
    listing = min(_timed([sys.executable, "-c", LIST_FOLDERS, str(root)], root) for _ in range(3))
    results.append(Result("ls_state_1m", ls, "s", f"listing the state folders, {n} jobs", listing, 3.0))
    return results
