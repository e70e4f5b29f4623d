"""Under `policy.overlapping = "serialize"`, the board's ways of shipping replay a job whose
inputs the jobs it waited for changed, before any model call, as `genjob worker` does."""

from __future__ import annotations

from pathlib import Path

from boardkit import run_board
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import moved_serialized_jobs, replayed_before_any_call

from core.store.layout import Layout
from core.store.queue import locate
from tui.dialogs.bulk_ship import BulkShipDialog
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.host_picker import HostPicker
from tui.dialogs.ship import ShipDialog


def closed(layout: Layout, key: str) -> bool:
    return locate(layout, key).folder != "queue"


async def test_the_ship_dialog_replays_a_moved_serialized_job(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    called = tmp_path / "called"
    [key] = moved_serialized_jobs(repo, signer, called)
    async with run_board(repo.root, key=key) as d:
        await d.press("s")
        await d.showing(ShipDialog)
        await d.until(lambda: closed(repo, key), "the job to be replayed")
        fresh = replayed_before_any_call(repo, key, called)
        await d.until(lambda: d.state_of(fresh) == "QUEUED", "its replay on the board")


async def test_the_bulk_ship_dialog_replays_a_moved_serialized_job(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    called = tmp_path / "called"
    keys = moved_serialized_jobs(repo, signer, called, ("src/app.py", "src/util.py"))
    async with run_board(repo.root) as d:
        for key in keys:
            await d.select(key)
            await d.press("space")
        await d.press("s")
        await d.showing(ConfirmDialog)
        await d.press("y")
        await d.until(lambda: isinstance(d.screen, (HostPicker, BulkShipDialog)), "a picker or the batch")
        if isinstance(d.screen, HostPicker):
            await d.press("enter")
        dialog = await d.showing(BulkShipDialog)
        await d.until(lambda: dialog.done, "the batch to end")
        for key in keys:
            replayed_before_any_call(repo, key, called)
