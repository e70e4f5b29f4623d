"""The board on a job that may write a protected path: marked, and applied only after `p`."""

from __future__ import annotations

import pytest
from boardkit import plain, run_board
from corekit import mint, receive
from textual.widgets import Static

from core.model.models import Job
from core.review.checks import run_checks
from core.store.layout import Layout
from core.store.signing import load_private_key
from tui.demo import Demo
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.preflight import PreflightDialog

STRONGER = b"\n# one more assertion would go here\n"


@pytest.fixture
async def protected_job(demo: Demo) -> Job:
    """A received job of the demo's that writes one of its tests, its checks passed."""
    layout = Layout(demo.root)
    job = mint(layout, "Strengthen the ops tests", ["tests/test_ops.py"])
    test_file = demo.root / "tests/test_ops.py"
    receive(layout, job.key, {"tests/test_ops.py": test_file.read_bytes() + STRONGER}, load_private_key())
    [run] = await run_checks(layout, job.key)
    assert run.passed
    return job


async def test_the_list_marks_it_and_the_preflight_asks_for_p(demo: Demo, protected_job: Job) -> None:
    key = protected_job.key
    test_file = demo.root / "tests/test_ops.py"
    before = test_file.read_bytes()
    async with run_board(demo.root, key=key) as d:
        assert any(key[:8] in line and "⚑ Strengthen" in line for line in d.lines())
        assert "⚑ protected (**/tests/**)" in plain(d.board.query_one("#detail-job", Static))
        await d.press("a")
        dialog = await d.showing(PreflightDialog)
        body = plain(dialog.query_one("#preflight-body", Static))
        assert "it writes protected paths" in body and "⚑ protected (**/tests/**)" in body
        await d.press("y")
        await d.until(lambda: d.inbox.said("read the diff, then p approves writing them"), "the refusal")
        assert d.screen is dialog and test_file.read_bytes() == before
        await d.press("p")
        await d.press("y")
        await d.until(lambda: d.state_of(key) == "APPLIED", "the apply")
    assert test_file.read_bytes() == before + STRONGER


async def test_bulk_approve_leaves_it_out_and_says_why(demo: Demo, protected_job: Job) -> None:
    verified = demo.keys["verified"]
    async with run_board(demo.root) as d:
        for key in (verified, protected_job.key):
            await d.select(key)
            await d.press("space")
        await d.press("a")
        dialog = await d.showing(ConfirmDialog)
        body = plain(dialog.query_one(".dialog-body Static", Static))
        assert "Approve 1 of 2 marked jobs" in body
        assert f"1: it writes protected paths (approved alone, explicitly): {protected_job.key[:12]}" in body
        await d.press("y")
        await d.until(lambda: d.state_of(verified) == "APPLIED", "the apply")
        assert d.state_of(protected_job.key) == "RECEIVED"
