"""`recover` on the board (the command palette's Recover): the same words as `genjob recover`."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from boardkit import run_board
from corekit import FILES, cli, tree_files
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from tornkit import killed_apply, untrust_the_key

from core.store.layout import Layout
from tui.text import in_repo


def shown(line: str, root: Path) -> str:
    """`line` as the board shows it, without the moment its evidence folder is named for."""
    return re.sub(r"rolled-back-\d+", "rolled-back-N", in_repo(line, root))


async def test_the_board_rolls_back_a_torn_tree_saying_what_genjob_recover_says(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    layout, job = killed_apply(repo, tmp_path, "after-the-first-swap")
    untrust_the_key(layout, job)
    twin = tmp_path / "twin"
    shutil.copytree(layout.root, twin, symlinks=True)
    [said] = cli("recover", root=twin).stdout.splitlines()
    async with run_board(layout.root) as d:
        [command] = [c for c in d.app.get_system_commands(d.board) if c.title == "Recover"]
        command.callback()
        await d.until(lambda: d.inbox.said("rolled back the interrupted apply"), "recover's report")
    [note] = [n for n in d.inbox.notes if "rolled back the interrupted apply" in n]
    assert shown(note, layout.root) == shown(said, twin)
    assert tree_files(layout.root) == tree_files(twin) == FILES


async def test_a_read_only_board_offers_no_recover(repo: Layout) -> None:
    async with run_board(repo.root, readonly=True, jobs=False) as d:
        assert "Recover" not in [c.title for c in d.app.get_system_commands(d.board)]
        await d.board.run_action("recover")
        await d.until(lambda: d.inbox.said("read-only board: recover refused"), "the refusal")
