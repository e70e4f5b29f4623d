"""`genjob tui` on a `.gen/` that lost one of its folders (a fresh clone keeps no empty
folder): the board opens, lists what is there, and makes nothing others could write."""

from __future__ import annotations

import shutil

import pytest
from boardkit import run_board
from test_missing_folders import FOLDERS, Template, copy, group_or_other_writable, template, umask_002

from core.store.layout import Layout

__all__ = ["copy", "template", "umask_002"]  # the fixtures this module uses, from there


@pytest.mark.parametrize("missing", FOLDERS)
async def test_the_board_opens_on_a_gen_folder_without_a_subfolder(
    copy: Template, umask_002: None, missing: str
) -> None:
    layout = Layout(copy.root)
    shutil.rmtree(layout.gen / missing)
    async with run_board(copy.root) as d:
        rows = d.board.view.rows
        assert copy.jobs.rejected in rows or missing == "rejected"
        assert copy.jobs.received in rows or missing in ("running", "receipts")
        # A check the received job started may still be probing its sandbox in scratch/.
        await d.until(lambda: not d.board.checks.live, "the checks under way to end")
    assert group_or_other_writable(layout.gen) == []
