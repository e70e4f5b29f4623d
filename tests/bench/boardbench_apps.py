"""The processes the board's benchmarks measure: the board, a naive DataTable board, a
minimal Textual app that lists every state folder, a raw watcher.

    python tests/bench/boardbench_apps.py board|datatable|minimal start|rss ROOT
    python tests/bench/boardbench_apps.py board update ROOT KEYS_FILE OUT_FILE
    python tests/bench/boardbench_apps.py rawwatch ROOT KEYS_FILE OUT_FILE

Each app runs headless and prints one JSON line: `first_frame` is the wall-clock time at
which the first frame showing jobs had been rendered; `rss` is the resident memory
(bytes, after a garbage collection) once every job is loaded. In `update` mode the board
prints `ready` when loaded and then records, for each key in KEYS_FILE, when that job
was first shown RUNNING; the raw watcher records when watchfiles reported its rename.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))


def rss_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


async def after_refresh(app: Any) -> float:
    """The time once the app has rendered what it holds now."""
    done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    app.call_after_refresh(lambda: done.done() or done.set_result(time.time()))
    return await done


def board(mode: str, root: Path, keys_file: Path | None, out: Path | None) -> None:
    from core.model.lifecycle import State
    from tui.app import make_app

    app = make_app(root)

    async def drive(pilot: Any) -> None:
        while True:
            try:
                b = app.board
                if b.is_mounted and len(b.view):
                    break
            except LookupError:
                pass
            await asyncio.sleep(0.002)
        emit({"first_frame": await after_refresh(app)})
        while b.scanning:
            await asyncio.sleep(0.01)
        await after_refresh(app)
        if mode == "rss":
            gc.collect()
            emit({"rss": rss_bytes(), "jobs": len(b.view.rows)})
        if mode == "update" and keys_file and out:
            watched = set(json.loads(keys_file.read_text()))
            seen: dict[str, float] = {}
            emit({"ready": time.time(), "jobs": len(b.view.rows)})
            stop = Path(str(out) + ".stop")
            while not stop.exists():
                shown = [
                    k for k in watched if (r := b.view.rows.get(k)) is not None and r.state is State.RUNNING
                ]
                if shown:
                    at = await after_refresh(app)
                    for k in shown:
                        seen[k] = at
                    watched.difference_update(shown)
                await asyncio.sleep(0.002)
            out.write_text(json.dumps(seen))
        app.exit()

    app.run(headless=True, size=(200, 60), auto_pilot=drive)


def datatable(mode: str, root: Path) -> None:
    from textual.app import App, ComposeResult
    from textual.widgets import DataTable

    gen = root / ".gen"

    class Naive(App[None]):
        def compose(self) -> ComposeResult:
            yield DataTable()

        def on_mount(self) -> None:
            table = self.query_one(DataTable)
            table.add_columns("key", "state", "created", "instruction")
            rows = []
            for folder in ("queue", "running", "receipts", "applied", "rejected"):
                for name in os.listdir(gen / folder):
                    if name.endswith(".json"):
                        doc = json.loads((gen / folder / name).read_bytes())
                        rows.append((name[:-5], folder, doc.get("created_at"), doc.get("instruction", "")))
            table.add_rows(rows)

    app = Naive()

    async def drive(pilot: Any) -> None:
        table = app.query_one(DataTable)
        while not table.row_count:
            await asyncio.sleep(0.002)
        emit({"first_frame": await after_refresh(app)})
        if mode == "rss":
            gc.collect()
            emit({"rss": rss_bytes(), "jobs": table.row_count})
        app.exit()

    app.run(headless=True, size=(200, 60), auto_pilot=drive)


def minimal(mode: str, root: Path) -> None:
    """The least a board can do: start Textual, list every state folder, show the count."""
    from textual.app import App, ComposeResult
    from textual.widgets import Static

    gen = root / ".gen"
    names: list[str] = []

    class Minimal(App[None]):
        def compose(self) -> ComposeResult:
            yield Static(id="count")

        def on_mount(self) -> None:
            for folder in ("queue", "running", "receipts", "applied", "rejected", "candidates"):
                names.extend(os.listdir(gen / folder))
            self.query_one(Static).update(f"{len(names):,} jobs")

    app = Minimal()

    async def drive(pilot: Any) -> None:
        while not names:
            await asyncio.sleep(0.002)
        emit({"first_frame": await after_refresh(app)})
        if mode == "rss":
            gc.collect()
            emit({"rss": rss_bytes(), "jobs": len(names)})
        app.exit()

    app.run(headless=True, size=(200, 60), auto_pilot=drive)


def rawwatch(root: Path, keys_file: Path, out: Path, debounce: int, step: int) -> None:
    """watchfiles alone, with the board's settings: when each watched rename was reported."""
    from watchfiles import awatch

    watched = set(json.loads(keys_file.read_text()))
    running = str(root / ".gen" / "running") + os.sep
    seen: dict[str, float] = {}
    stop = Path(str(out) + ".stop")

    async def go() -> None:
        emit({"ready": time.time()})
        async for changes in awatch(
            root / ".gen", debounce=debounce, step=step, rust_timeout=200, yield_on_timeout=True
        ):
            now = time.time()
            for _, path in changes:
                if path.startswith(running) and path.endswith(".json"):
                    key = os.path.basename(path)[:-5]
                    if key in watched and key not in seen:
                        seen[key] = now
            if stop.exists():
                break
        out.write_text(json.dumps(seen))

    asyncio.run(go())


if __name__ == "__main__":
    what, args = sys.argv[1], sys.argv[2:]
    if what == "board":
        extra = [Path(a) for a in args[2:4]] + [None, None]
        board(args[0], Path(args[1]), extra[0], extra[1])
    elif what == "datatable":
        datatable(args[0], Path(args[1]))
    elif what == "minimal":
        minimal(args[0], Path(args[1]))
    elif what == "rawwatch":
        from tui.services.feed import DEBOUNCE_MS, STEP_MS

        rawwatch(Path(args[0]), Path(args[1]), Path(args[2]), DEBOUNCE_MS, STEP_MS)
    else:
        raise SystemExit(__doc__)
