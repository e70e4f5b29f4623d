"""A batch of marked jobs is a run of the board's, not of its dialog: hiding the dialog
leaves the batch going and the board usable, `s` on any of its jobs shows it again,
stopping it asks first, and quitting a board with a batch going asks what becomes of it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING

from boardkit import Driver, run_board
from corekit import mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import gated_host
from textual.worker import WorkerState

from core.store.layout import Layout
from tui.dialogs.bulk_ship import BulkShipDialog
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.quit import QuitDialog
from tui.screens.board import BoardScreen
from tui.widgets.detail import DetailPane

if TYPE_CHECKING:
    from tui.services.runs import BoardBatch


def two_jobs(repo: Layout) -> tuple[str, str]:
    """Two queued jobs, in the order a batch of them starts (on a host of concurrency 1,
    the first runs while the second waits)."""
    first, second = sorted(mint(repo, f"job {i}").key for i in range(2))
    return first, second


async def batch_running(d: Driver, keys: tuple[str, ...]) -> BulkShipDialog:
    """Mark `keys`, ship them as a batch, and wait for its first job to run."""
    await d.ship_marked(keys)
    dialog: BulkShipDialog = await d.showing(BulkShipDialog)
    await d.until(lambda: "running on local" in d.text("#bulk-jobs"), "a job of the batch running")
    return dialog


async def hide(d: Driver) -> BoardBatch:
    """Hide the batch dialog on top; the batch it showed."""
    screen = d.screen
    assert isinstance(screen, BulkShipDialog)
    await d.press("escape")
    await d.until(lambda: isinstance(d.screen, BoardScreen), "the board")
    return screen.board_batch


def receipt_status(repo: Layout, key: str) -> str:
    return str(json.loads(repo.receipt(key).read_bytes())["status"])


async def test_escape_hides_the_batch_and_it_goes_on_to_its_receipts(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gate = gated_host(repo, tmp_path)
    first, second = two_jobs(repo)
    async with run_board(repo.root) as d:
        await batch_running(d, (first, second))
        batch = await hide(d)
        assert d.inbox.said("the batch goes on; s on any of them shows it again, ctrl+k stops it")
        assert not batch.stopping and not batch.done
        await d.until(lambda: d.state_of(first) == "RUNNING", "the running job to show RUNNING")
        # The board moves while the batch runs, and shows the running job's output.
        await d.press("g")
        top = d.table.cursor_key
        await d.press("G")
        assert {top, d.table.cursor_key} == {first, second}
        await d.select(first)
        pane = d.board.query_one(DetailPane)
        pane.show_tab("output")
        await d.until(
            lambda: "started" in d.text("#detail-output"), "the generator's output in the Output tab"
        )
        gate.touch()
        await d.until(lambda: d.state_of(first) == d.state_of(second) == "RECEIVED", "both receipts")
        await d.until(lambda: d.inbox.said("batch of 2 jobs ended: 2 ok, 0 failed, 0 refused"), "the toast")
        await d.settle()
    assert sum("batch of 2 jobs ended" in note for note in d.inbox.notes) == 1, "one toast"
    assert receipt_status(repo, first) == receipt_status(repo, second) == "ok"


async def test_s_on_any_job_of_the_batch_shows_it_again(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gate = gated_host(repo, tmp_path)
    first, second = two_jobs(repo)
    async with run_board(repo.root) as d:
        await batch_running(d, (first, second))
        batch = await hide(d)
        assert not d.table.marks, "the marks went with the batch"
        await d.select(second)
        await d.press("s")
        again: BulkShipDialog = await d.showing(BulkShipDialog)
        assert again.board_batch is batch
        assert f"{second[:12]}  waiting" in d.text("#bulk-jobs")
        assert "running on local" in d.text("#bulk-jobs")
        await hide(d)
        gate.touch()
        await d.until(lambda: d.inbox.said("batch of 2 jobs ended"), "the toast of the hidden batch")
        # Ended hidden, it is shown once more, with its end.
        await d.select(first)
        await d.press("s")
        ended: BulkShipDialog = await d.showing(BulkShipDialog)
        assert ended.board_batch is batch and ended.done
        assert "2 ok, 0 failed, 0 refused" in d.text("#bulk-status")
        await d.press("escape")
        await d.until(lambda: isinstance(d.screen, BoardScreen), "the board")
        assert not d.board.dispatcher.batches
        await d.press("s")
        await d.until(lambda: d.inbox.said(f"{first[:12]}: is RECEIVED"), "the refusal: it shipped")


async def test_ctrl_k_on_a_job_of_the_batch_asks_then_stops_it(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gated_host(repo, tmp_path)
    first, second = two_jobs(repo)
    async with run_board(repo.root) as d:
        await batch_running(d, (first, second))
        batch = await hide(d)
        await d.select(first)
        await d.press("ctrl+k")
        confirm: ConfirmDialog = await d.showing(ConfirmDialog)
        assert "Stop the batch of 2 jobs?" in str(confirm.body)
        await d.press("n")
        await d.until(lambda: isinstance(d.screen, BoardScreen), "the board")
        assert not batch.stopping and not batch.cancel.is_set()
        # A job of the batch still waiting for the host stops it too.
        await d.select(second)
        await d.press("ctrl+k")
        await d.showing(ConfirmDialog)
        await d.press("y")
        await d.until(lambda: batch.done, "the batch to stop")
        await d.until(lambda: d.inbox.said("0 ok, 1 failed, 0 refused, 1 not started"), "the toast")
    assert receipt_status(repo, first) == "aborted"
    assert repo.job_file("queue", second).exists() and not repo.receipt(second).exists()


async def test_stop_all_in_the_dialog_asks_first(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gated_host(repo, tmp_path)
    first, second = two_jobs(repo)
    async with run_board(repo.root) as d:
        dialog = await batch_running(d, (first, second))
        await d.pilot.click("#bulk-stop")
        await d.showing(ConfirmDialog)
        await d.press("n")
        await d.until(lambda: d.screen is dialog, "the batch dialog again")
        assert not dialog.board_batch.stopping
        await d.press("ctrl+k")
        await d.showing(ConfirmDialog)
        await d.press("y")
        await d.until(lambda: dialog.done, "the batch to stop")
        assert "0 ok, 1 failed, 0 refused, 1 not started" in d.text("#bulk-status")
        await d.press("escape")
        await d.until(lambda: isinstance(d.screen, BoardScreen), "the board")
    assert not d.inbox.said("batch of 2 jobs ended"), "it ended in view: no toast"
    assert receipt_status(repo, first) == "aborted"
    assert not repo.receipt(second).exists()


async def test_quit_with_a_batch_asks_and_stop_exits_clean(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gated_host(repo, tmp_path)
    first, second = two_jobs(repo)
    async with run_board(repo.root) as d:
        await batch_running(d, (first, second))
        await hide(d)
        await d.press("ctrl+q")
        dialog: QuitDialog = await d.showing(QuitDialog)
        assert (dialog.runs, dialog.claims, dialog.waiting) == ([first], [], 1)
        assert dialog.query("#wait") and not dialog.query("#leave")
        await d.press("escape")
        await d.until(lambda: isinstance(d.screen, BoardScreen), "the board, the batch going on")
        assert d.app.return_code is None
        await d.press("ctrl+q")
        await d.showing(QuitDialog)
        workers = list(d.app.workers)
        await d.press("s")
        await d.until(lambda: d.app.return_code is not None, "the board to quit")
    assert d.app.return_code == 0
    # The board's watchers are cancelled as it closes; nothing ended in an error of its own.
    failed = [w for w in workers if w.error is not None and not isinstance(w.error, asyncio.CancelledError)]
    assert failed == [], "no worker ended in an error"
    batch = [w for w in workers if w.group == "runs"]
    assert batch and all(w.state is WorkerState.SUCCESS for w in batch), "the batch ended before the board"
    assert receipt_status(repo, first) == "aborted"
    assert repo.job_file("queue", second).exists() and not repo.receipt(second).exists()


async def test_quit_waits_for_the_whole_batch(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gate = gated_host(repo, tmp_path)
    first, second = two_jobs(repo)
    async with run_board(repo.root) as d:
        await batch_running(d, (first, second))
        await hide(d)
        await d.press("q")
        await d.showing(QuitDialog)
        await d.press("w")
        await d.until(lambda: d.inbox.said("quitting once 2 runs have ended"), "the wait")
        assert d.app.return_code is None
        gate.touch()
        await d.until(lambda: d.app.return_code is not None, "the board to quit")
    assert d.app.return_code == 0
    assert receipt_status(repo, first) == receipt_status(repo, second) == "ok"


async def test_marked_jobs_already_in_a_batch_do_not_ship_twice(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gate = gated_host(repo, tmp_path)
    first, second = two_jobs(repo)
    third = mint(repo, "job 2").key
    async with run_board(repo.root) as d:
        batch = (await batch_running(d, (first, second))).board_batch
        await hide(d)
        for key in (first, third):
            await d.select(key)
            await d.press("space")
        await d.press("s")
        await d.showing(ConfirmDialog)
        await d.press("y")
        other: BulkShipDialog = await d.showing(BulkShipDialog)
        assert other.board_batch is not batch and other.board_batch.keys == [third]
        assert d.inbox.said("1 of the marked jobs ship on this board already")
        assert d.board.dispatcher.batches[first] is batch
        gate.touch()
        await d.until(lambda: other.done and batch.done, "both batches to end")
    assert {receipt_status(repo, k) for k in (first, second, third)} == {"ok"}
