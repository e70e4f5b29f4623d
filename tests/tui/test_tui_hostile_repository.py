"""The board on a cloned repository that ships its own `.gen/`: it runs nothing of it."""

from __future__ import annotations

from pathlib import Path

import pytest
from boardkit import run_board
from corekit import tree_state
from hostilekit import Hostile, build_hostile

from core.review import sandbox
from core.review.consent import allow, consent
from tui.messages import ChecksConfigured
from tui.services import feed


@pytest.fixture
def hostile(tmp_path: Path) -> Hostile:
    if sandbox.bwrap_problem() is not None:
        pytest.skip("the fixture's author runs a sandboxed check")
    return build_hostile(tmp_path)


async def test_the_board_runs_nothing_and_says_what_waits(hostile: Hostile) -> None:
    checks_before = tree_state(hostile.clone.checks)
    async with run_board(hostile.clone.root) as d:
        await d.until(lambda: d.board.config_held is not None, "the policy read")
        await d.until(lambda: ChecksConfigured in d.inbox.kinds, "the checks read")
        await d.settle()
        assert "config waits for approval" in d.text("#status")
        assert d.board.untrusted  # the author's key counts for nothing
    assert hostile.marked() == []
    assert tree_state(hostile.clone.checks) == checks_before


async def test_allowing_the_config_in_another_terminal_shows_within_a_tick(
    hostile: Hostile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`genjob allow` pins the config in the operator's own folder, outside `.gen/`, where
    no file event comes from: the board looks at the policy's files on each tick, not only
    at its full scans (none comes during this test)."""
    monkeypatch.setattr(feed, "FULL_SCAN_SECONDS", 10.0**9)
    layout = hostile.clone
    async with run_board(layout.root) as d:
        await d.until(lambda: d.board.config_held is not None, "the policy read")
        allow(layout, consent(layout).digest)
        await d.until(lambda: d.board.config_held is None, "the allowed config read again")
        await d.until(lambda: "config waits for approval" not in d.text("#status"), "the status line")
