"""The board's first frame in a real terminal.

board_first_frame  `genjob tui` on a one-job repository, run in a pseudo-terminal of
                   120x35: from process start to the first bytes on the terminal that
                   show the job's key (its first 8 characters)  vs  a minimal Textual app
                   showing that key on one line, in the same terminal (median of 7 each,
                   run in turn).
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

from common import Result

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core.plan.mint import build_job  # noqa: E402
from core.store.queue import enqueue  # noqa: E402
from core.store.repo import init_repo  # noqa: E402

NAMES = ("board_first_frame",)
CACHE = Path(tempfile.gettempdir()) / "genjob-bench"
GENJOB = Path(sys.executable).parent / "genjob"
COLUMNS, LINES = 120, 35
# No start may take longer than this (a hung one is killed and reported).
START_TIMEOUT = 60.0

MINIMAL_APP = """
import sys
from textual.app import App, ComposeResult
from textual.widgets import Static

class OneLine(App[None]):
    def compose(self) -> ComposeResult:
        yield Static(sys.argv[1])

OneLine().run()
"""


def run(quick: bool) -> list[Result]:
    return [bench_first_frame(quick)]


def _repository() -> tuple[Path, str]:
    repo = CACHE / "first-frame"
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    layout, _ = init_repo(repo)
    (repo / "a.py").write_text("x = 1\n")
    job = build_job(layout, "One job on the board.", ["a.py"])
    enqueue(layout, job)
    # Files written in the last two seconds are read again by every scan; a queue's
    # files are older than that when someone opens the board.
    minute_ago = time.time() - 60
    for folder, _, names in os.walk(layout.gen):
        for name in names:
            os.utime(Path(folder, name), (minute_ago, minute_ago))
    return repo, job.key


def first_frame(argv: list[str], cwd: Path, needle: bytes) -> float:
    """Seconds from starting `argv` in a fresh pseudo-terminal to `needle` appearing in
    what it writes there; the process is killed then."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", LINES, COLUMNS, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=cwd, stdin=follower, stdout=follower, stderr=follower, env=env, start_new_session=True
    )
    os.close(follower)
    seen = b""
    try:
        while needle not in seen:
            left = START_TIMEOUT - (time.perf_counter() - start)
            ready, _, _ = select.select([leader], [], [], max(left, 0))
            if not ready:
                raise TimeoutError(f"{argv[1:]}: {needle!r} not shown after {START_TIMEOUT:g}s")
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:  # the terminal closed: the process is gone
                chunk = b""
            if not chunk:
                raise RuntimeError(f"{argv[1:]} ended before showing {needle!r}: {seen[-500:]!r}")
            seen += chunk
        return time.perf_counter() - start
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        os.close(leader)


def bench_first_frame(quick: bool) -> Result:
    repo, key = _repository()
    needle = key[:8].encode()
    board = [str(GENJOB), "tui"]
    minimal = [sys.executable, "-c", MINIMAL_APP, key]
    runs = 3 if quick else 7
    for argv in (board, minimal):  # the page cache and bytecode warm, as for a second start
        first_frame(argv, repo, needle)
    board_times, minimal_times = [], []
    for _ in range(runs):
        board_times.append(first_frame(board, repo, needle))
        minimal_times.append(first_frame(minimal, repo, needle))
    return Result(
        "board_first_frame",
        statistics.median(board_times),
        "s",
        f"a minimal Textual app showing one line (median of {runs})",
        statistics.median(minimal_times),
        1.2,
    )
