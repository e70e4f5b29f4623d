"""Under `policy.overlapping = "serialize"`, a job whose inputs the jobs it waited for changed
is STALE on the board before anyone ships it: neither the ship dialog nor a batch ship
spends a model call on it, and it stays in the queue for a replay."""

from __future__ import annotations

from pathlib import Path

from boardkit import run_board
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import moved_serialized_jobs

from core.store.layout import Layout
from core.store.queue import locate
from tui.dialogs.ship import ShipDialog


def untouched(layout: Layout, key: str, called: Path) -> bool:
    return locate(layout, key).folder == "queue" and not called.exists()


async def test_a_moved_serialized_job_is_stale_and_the_ship_dialog_never_opens(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    called = tmp_path / "called"
    [key] = moved_serialized_jobs(repo, signer, called)
    async with run_board(repo.root, key=key) as d:
        await d.until(lambda: d.state_of(key) == "STALE", "the moved job to show STALE")
        await d.press("s")
        await d.until(lambda: d.inbox.said("is STALE"), "the ship refused, naming the state")
        assert not isinstance(d.screen, ShipDialog)
    assert untouched(repo, key, called)


async def test_a_batch_ship_of_moved_serialized_jobs_ships_none(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    called = tmp_path / "called"
    keys = moved_serialized_jobs(repo, signer, called, ("src/app.py", "src/util.py"))
    async with run_board(repo.root) as d:
        for key in keys:
            await d.until(lambda key=key: d.state_of(key) == "STALE", "the moved jobs to show STALE")
            await d.select(key)
            await d.press("space")
        await d.press("s")
        await d.until(lambda: d.inbox.said("marked jobs allows ship"), "the batch refused")
        assert not isinstance(d.screen, ShipDialog)
    assert all(untouched(repo, key, called) for key in keys)
