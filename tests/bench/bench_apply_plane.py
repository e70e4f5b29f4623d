"""The apply plane: 20 jobs over 5 shared files (four on each, on lines of their own),
minted on one base and shipped in parallel to 4 local hosts (not timed), then applied.

apply_plane_calls  model calls to land all 20 with `genjob apply --ready --merge` (each
                   STALE receipt merged over the tree; a conflict would cost a replay);
                   baseline: the calls when every STALE receipt is replayed instead (one
                   more call each, the stale ones counted by the baseline below). Goal:
                   at most 0.6x.
apply_plane_time   wall clock of one `genjob apply --ready --merge` over the 20 receipts;
                   baseline: the same receipts applied one by one with `genjob apply KEY`
                   in queue order, a process each (15 of them end STALE at once). Best of
                   three, interleaved, each on a fresh copy of the shipped repository.
                   Goal: at most 1x.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Result

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS.parent))

from corekit import carry_pins  # noqa: E402
from planekit import GENJOB, expected_tree, files_now, make_scenario  # noqa: E402

from core.review.ready import receipt_order  # noqa: E402
from core.store.layout import Layout  # noqa: E402

NAMES = ("apply_plane_calls", "apply_plane_time")
SPREAD = [(j % 5, (j // 5) * 8 + 1) for j in range(20)]
RUNS = 3


def _fresh(template: Path, work: Path) -> Path:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(template, work, symlinks=True)
    carry_pins(template, work)
    return work


def _ready(root: Path) -> None:
    proc = subprocess.run([GENJOB, "--root", str(root), "apply", "--ready", "--merge"], capture_output=True)
    assert proc.returncode == 0, proc.stderr


def _one_by_one(root: Path, keys: list[str]) -> int:
    """`genjob apply KEY` for each key in turn; how many ended STALE."""
    stale = 0
    for key in keys:
        proc = subprocess.run([GENJOB, "--root", str(root), "apply", key], capture_output=True, text=True)
        stale += proc.returncode != 0 and "genjob replay" in proc.stderr
    return stale


def run(quick: bool) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="genjob-bench-plane-") as tmp:
        folder = Path(tmp)
        os.environ["XDG_CONFIG_HOME"] = str(folder / "xdg")
        s = make_scenario(folder / "shipped" / "repo", SPREAD)
        want, conflicted = expected_tree(s)
        order = receipt_order(s.layout)
        work = folder / "work" / "repo"
        work.parent.mkdir()
        best_ready = best_each = float("inf")
        stale = 0
        for _ in range(RUNS):
            root = _fresh(s.layout.root, work)
            start = time.perf_counter()
            _ready(root)
            best_ready = min(best_ready, time.perf_counter() - start)
            assert files_now(type(s)(Layout(root), s.files, s.keys, s.base)) == want
            root = _fresh(s.layout.root, work)
            start = time.perf_counter()
            stale = _one_by_one(root, order)
            best_each = min(best_each, time.perf_counter() - start)
    jobs = len(SPREAD)
    return [
        Result(
            "apply_plane_calls",
            jobs + len(conflicted),
            "calls",
            f"replaying every STALE receipt ({stale} of {jobs})",
            jobs + stale,
            0.6,
        ),
        Result(
            "apply_plane_time",
            best_ready,
            "s",
            f"`genjob apply KEY` one by one ({jobs} processes, {stale} end STALE)",
            best_each,
            1.0,
        ),
    ]
