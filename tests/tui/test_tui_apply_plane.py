"""The apply plane on the board: the ready filter in `apply --ready`'s order, each ready
job's place in that queue, the overlap mark, and a STALE receipt's merge preflight."""

from __future__ import annotations

import pytest
from boardkit import Driver, plain, run_board
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from lineskit import commit_lines, edit, received
from textual.widgets import Static

from core.plan.mint import build_job
from core.review.apply_job import apply_job
from core.store.layout import Layout
from core.store.queue import enqueue
from tui.dialogs.next_step import NextStepDialog
from tui.dialogs.preflight import MergeDialog
from tui.widgets.counts import CountsBar
from tui.widgets.job_table import OVERLAP_MARK


@pytest.fixture
def lines(repo: Layout) -> Layout:
    return commit_lines(repo)


async def plane_read(d: Driver) -> None:
    await d.until(lambda: d.board.plane is not None, "the apply plane read")


def row_of(d: Driver, key: str) -> str:
    return next(line for line in d.lines() if key[:12] in line)


async def test_the_ready_filter_shows_apply_ready_s_queue_in_its_order(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    first = received(lines, signer, "Top.", edit(1, "top"), 1_000)
    second = received(lines, signer, "Bottom.", edit(12, "bottom"), 2_000)
    async with run_board(lines.root, (160, 35)) as d:
        await plane_read(d)
        assert d.board.plane is not None and d.board.plane.ready == (first, second)
        assert "#1 " in row_of(d, first) and "#2 " in row_of(d, second)
        bar = d.board.query_one(CountsBar).render().plain
        assert any(chip in bar for chip in ("p ready 2", "p RDY 2", "p:RDY 2", "p:rdy 2", "p:2")), bar
        await d.press("p")
        await d.until(lambda: d.board.view.only is not None, "the ready filter on")
        assert [d.board.view.key_at(i) for i in range(len(d.board.view))] == [first, second]
        await d.press("p")
        assert d.board.view.only is None


async def test_the_ready_filter_follows_the_plane_when_a_receipt_goes_stale(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    first = received(lines, signer, "Top.", edit(1, "top"), 1_000)
    second = received(lines, signer, "Bottom.", edit(12, "bottom"), 2_000)
    async with run_board(lines.root) as d:
        await plane_read(d)
        await d.press("p")
        apply_job(lines, first)
        await d.until(lambda: d.board.plane is not None and d.board.plane.ready == (), "the plane read again")
        assert len(d.board.view) == 0
        assert second in d.board.plane.left and "STALE" in d.board.plane.left[second]


async def test_an_overlap_is_marked_and_named_in_the_job_tab(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    first = received(lines, signer, "Top.", edit(1, "top"), 1_000)
    other = build_job(lines, "Another over the same file.", ["src/lines.py", "src/app.py"])
    enqueue(lines, other)
    async with run_board(lines.root, key=first) as d:
        await plane_read(d)
        assert OVERLAP_MARK in row_of(d, first) and OVERLAP_MARK in row_of(d, other.key)
        tab = d.board.query_one("#detail-job", Static)
        await d.until(lambda: f"overlaps {other.key[:12]} on src/lines.py" in plain(tab), "the overlap named")


async def test_a_stale_receipt_that_merges_clean_is_offered_merge_and_apply(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    first = received(lines, signer, "Top.", edit(1, "top"), 1_000)
    second = received(lines, signer, "Bottom.", edit(12, "bottom"), 2_000)
    apply_job(lines, first)
    async with run_board(lines.root, key=second) as d:
        assert d.state_of(second) == "STALE"
        await d.press("a")
        dialog = await d.showing(MergeDialog)
        body = plain(dialog.query_one("#merge-body", Static))
        assert "merges clean" in body and "+ bottom" in body
        await d.press("y")
        await d.until(lambda: d.state_of(second) == "APPLIED", "the merged apply")
    assert (lines.root / "src/lines.py").read_bytes() == edit(1, "top").replace(b"line 12\n", b"bottom\n")


async def test_a_stale_receipt_that_conflicts_shows_its_hunks_and_offers_replay(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    first = received(lines, signer, "Top.", edit(1, "top"), 1_000)
    second = received(lines, signer, "Clash.", edit(1, "clash"), 2_000)
    apply_job(lines, first)
    before = (lines.root / "src/lines.py").read_bytes()
    async with run_board(lines.root, key=second) as d:
        await d.press("a")
        dialog = await d.showing(NextStepDialog)
        body = plain(dialog.query_one("#nextstep-body", Static))
        assert "conflicts in 1 file;" in body and ">>>>>>> receipt" in body and "clash" in body
        await d.press("escape")
    assert (lines.root / "src/lines.py").read_bytes() == before
