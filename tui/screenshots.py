"""Make the screenshots the README and the dashboard topic show: the app saves each SVG
itself from a scripted Pilot session.

    uv run python -m tui.screenshots [OUTDIR]    # default: screenshots/

Each shot builds a fresh demo repository (`tui.demo`), opens the board on it at a fixed
size, drives it with keys and saves what is on screen.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

from textual.pilot import Pilot

from tui.app import GenjobApp, make_app
from tui.demo import Demo, build_demo
from tui.widgets.detail import DetailPane

MAX_PAUSES = 400

Steps = Callable[[Pilot[None], Demo], Awaitable[None]]


async def _until(pilot: Pilot[None], condition: Callable[[], bool]) -> None:
    for _ in range(MAX_PAUSES):
        if condition():
            return
        await pilot.pause(0.05)
    raise RuntimeError("the board did not get there")


async def _loaded(pilot: Pilot[None]) -> None:
    app = pilot.app
    assert isinstance(app, GenjobApp)

    def ready() -> bool:
        try:
            board = app.board
        except LookupError:
            return False
        return board.is_mounted and not board.scanning and len(board.view.rows) > 0

    await _until(pilot, ready)


async def _select(pilot: Pilot[None], key: str, tab: str = "job") -> None:
    app = pilot.app
    assert isinstance(app, GenjobApp)
    board = app.board
    board.table.select(key)
    pane = board.query_one(DetailPane)
    await _until(pilot, lambda: pane.detail is not None and pane.detail.row.key == key)
    pane.show_tab(tab)
    await pilot.pause(0.2)


async def board_shot(pilot: Pilot[None], demo: Demo) -> None:
    await _select(pilot, demo.keys["verified"], "verify")


async def receipt_diff(pilot: Pilot[None], demo: Demo) -> None:
    await _select(pilot, demo.keys["drifted"], "diff")


async def approve_preflight(pilot: Pilot[None], demo: Demo) -> None:
    await _select(pilot, demo.keys["verified"], "diff")
    await pilot.press("a")
    await _until(pilot, lambda: type(pilot.app.screen).__name__ == "PreflightDialog")
    await pilot.pause(0.2)


async def failed_verification(pilot: Pilot[None], demo: Demo) -> None:
    await _select(pilot, demo.keys["untrusted"], "verify")


async def checks_failed(pilot: Pilot[None], demo: Demo) -> None:
    await _select(pilot, demo.keys["checks_failed"], "verify")


async def bulk_approve(pilot: Pilot[None], demo: Demo) -> None:
    app = pilot.app
    assert isinstance(app, GenjobApp)
    for role in ("verified", "checks_failed", "untrusted", "queued"):
        await _select(pilot, demo.keys[role])
        await pilot.press("space")
    await _until(pilot, lambda: all(k in app.board.table.checks for k in (demo.keys["verified"],)))
    await pilot.press("a")
    await _until(pilot, lambda: type(pilot.app.screen).__name__ == "ConfirmDialog")
    await pilot.pause(0.2)


async def orphan(pilot: Pilot[None], demo: Demo) -> None:
    await _select(pilot, demo.keys["orphan"], "lease")


async def literal_markup(pilot: Pilot[None], demo: Demo) -> None:
    await _select(pilot, demo.keys["spoof"], "job")


async def narrow(pilot: Pilot[None], demo: Demo) -> None:
    await _select(pilot, demo.keys["verified"], "verify")


async def medium(pilot: Pilot[None], demo: Demo) -> None:
    await _select(pilot, demo.keys["drifted"], "diff")


async def stale_offer(pilot: Pilot[None], demo: Demo) -> None:
    await _select(pilot, demo.keys["stale"], "verify")
    await pilot.press("a")
    await _until(pilot, lambda: type(pilot.app.screen).__name__ == "NextStepDialog")
    await pilot.pause(0.2)


async def shipped(pilot: Pilot[None], demo: Demo) -> None:
    await _select(pilot, demo.keys["queued3"], "job")
    await pilot.press("c")
    await _until(pilot, lambda: _state(pilot, demo.keys["queued3"]) == "RUNNING")
    await pilot.press("s")
    await _until(pilot, lambda: type(pilot.app.screen).__name__ == "HostPicker")
    await pilot.press("enter")
    await _until(pilot, lambda: getattr(pilot.app.screen, "done", False))
    await pilot.pause(0.2)


def _state(pilot: Pilot[None], key: str) -> str | None:
    app = pilot.app
    assert isinstance(app, GenjobApp)
    row = app.board.view.rows.get(key)
    return row.state.value if row else None


SHOTS: list[tuple[str, tuple[int, int], Steps]] = [
    ("board", (180, 50), board_shot),
    ("receipt-diff", (160, 45), receipt_diff),
    ("approve-preflight", (160, 45), approve_preflight),
    ("failed-verification", (160, 45), failed_verification),
    ("checks-failed", (160, 45), checks_failed),
    ("bulk-approve", (120, 35), bulk_approve),
    ("orphan", (160, 45), orphan),
    ("literal-markup", (160, 45), literal_markup),
    ("narrow-80x24", (80, 24), narrow),
    ("medium-120x35", (120, 35), medium),
    ("stale-offer", (120, 35), stale_offer),
    ("claimed-then-shipped", (120, 35), shipped),
]


async def shoot(out: Path) -> list[Path]:
    made = []
    for name, size, steps in SHOTS:
        with tempfile.TemporaryDirectory(prefix="genjob-shot-") as tmp:
            demo = build_demo(Path(tmp) / "calc")
            os.environ["XDG_CONFIG_HOME"] = str(demo.config_home)
            try:
                app = make_app(demo.root)
                async with app.run_test(size=size) as pilot:
                    await _loaded(pilot)
                    await steps(pilot, demo)
                    made.append(Path(app.save_screenshot(filename=f"{name}.svg", path=str(out))))
            finally:
                demo.stop()
    return made


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    for path in asyncio.run(shoot(out)):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
