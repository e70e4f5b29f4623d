"""The board against what a host or a repository chose to show: output without end, and
Textual markup in file names, host names and reasons. Nothing is kept without a bound,
and nothing is read as markup: it shows as the characters it is."""

from __future__ import annotations

from pathlib import Path

import pytest
from boardkit import run_board
from corekit import mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import endless_line, host_block, write_config
from textual.widgets import Log

from core.evidence import MAX_TAIL_BYTES, keep
from core.layout import Layout
from core.submit import submit_job
from tui.dialogs.ship import MAX_LINE_CHARS, MAX_UNSHOWN_CHARS, ShipDialog, Unshown
from tui.feed import LOG_LINE_CHARS
from tui.widgets.detail import DetailPane

CUT = f" … [line cut at {MAX_LINE_CHARS} characters]"


async def test_the_ship_dialog_cuts_a_line_without_end(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """80 MB without a newline: the dialog once kept it all, joined again on each chunk."""
    write_config(repo, host_block("local", None, endless_line(tmp_path), timeout=300))
    key = submit_job(repo, "say a lot", ["src/app.py"], []).key
    held: list[int] = []
    add = Unshown.add

    def measured(unshown: Unshown, data: bytes) -> None:
        add(unshown, data)
        held.append(unshown.size)

    monkeypatch.setattr(Unshown, "add", measured)
    async with run_board(repo.root, key=key) as d:
        await d.press("s")
        dialog = await d.showing(ShipDialog)
        await d.until(lambda: dialog.done, "the ship to end")
        lines = dialog.query_one(Log).lines
    assert len(held) > 80 and max(held) <= MAX_UNSHOWN_CHARS, "output waiting to be drawn"
    assert max(len(line) for line in lines) == MAX_LINE_CHARS + len(CUT)
    assert "x" * MAX_LINE_CHARS + CUT in lines and "done" in lines


def test_output_the_screen_has_not_drawn_is_held_within_its_bound() -> None:
    unshown = Unshown()
    for _ in range(8):
        unshown.add(b"y\n" * (MAX_UNSHOWN_CHARS // 4))
    assert unshown.size <= MAX_UNSHOWN_CHARS
    shown = unshown.take()
    assert shown.startswith("\n[genjob] ") and "characters of output came faster" in shown
    assert (unshown.size, unshown.take()) == (0, "")


async def test_the_detail_cuts_a_generator_log_of_one_endless_line(repo: Layout) -> None:
    """A host's output is kept as the job's log: all of its tail can be one line."""
    job = mint(repo, "say a lot")
    keep(repo, job.key, "attempt-1.log", b"z" * MAX_TAIL_BYTES)
    async with run_board(repo.root, key=job.key) as d:
        detail = d.board.query_one(DetailPane).detail
        assert detail is not None
    assert detail.log_tail == "z" * LOG_LINE_CHARS + f" … [line cut at {LOG_LINE_CHARS} characters]"
