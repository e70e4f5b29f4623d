"""A ship is a run of the board's, not of its dialog: hiding the dialog leaves it running,
stopping it asks first, and quitting a board with runs or claims in hand asks what
becomes of them."""

from __future__ import annotations

import json
from pathlib import Path

from boardkit import Driver, plain, run_board
from corekit import mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import gated_host
from textual.widgets import Log, Static

from core.store.events import attempts
from core.store.layout import Layout
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.quit import QuitDialog
from tui.dialogs.ship import ShipDialog
from tui.screens.board import BoardScreen
from tui.services.actions import left_behind


async def ship_and_wait_for_output(d: Driver) -> ShipDialog:
    await d.press("s")
    dialog: ShipDialog = await d.showing(ShipDialog)
    await d.until(lambda: "started" in dialog.query_one(Log).lines, "the generator's first line")
    return dialog


def receipt_status(repo: Layout, key: str) -> str:
    return str(json.loads(repo.receipt(key).read_bytes())["status"])


async def test_escape_hides_the_dialog_and_the_run_goes_on(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gate = gated_host(repo, tmp_path)
    key = mint(repo, "add a comment").key
    async with run_board(repo.root, key=key) as d:
        await ship_and_wait_for_output(d)
        await d.press("escape")
        await d.until(lambda: isinstance(d.screen, BoardScreen), "the board")
        await d.until(lambda: d.state_of(key) == "RUNNING", "the job to show RUNNING")
        assert d.inbox.said("the run goes on; s shows it again, ctrl+k stops it")
        # `s` on the job shows the same run again, with what it printed while hidden.
        await d.press("s")
        again: ShipDialog = await d.showing(ShipDialog)
        await d.until(lambda: "started" in again.query_one(Log).lines, "the output so far")
        assert not again.done
        gate.touch()
        await d.until(lambda: again.done, "the run to end")
        assert again.succeeded, plain(again.query_one("#ship-status", Static))
        assert "edited" in again.query_one(Log).lines
        await d.press("escape")
        await d.until(lambda: d.state_of(key) == "RECEIVED", "the receipt")
        assert not d.board.dispatcher.runs
    assert receipt_status(repo, key) == "ok"


async def test_a_run_that_ends_hidden_says_so(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gate = gated_host(repo, tmp_path)
    key = mint(repo, "add a comment").key
    async with run_board(repo.root, key=key) as d:
        await ship_and_wait_for_output(d)
        await d.press("escape")
        await d.until(lambda: isinstance(d.screen, BoardScreen), "the board")
        gate.touch()
        await d.until(lambda: d.inbox.said("receipt ok"), "the toast of the ended run")
        await d.until(lambda: d.state_of(key) == "RECEIVED", "the receipt")
        assert not d.board.dispatcher.runs


async def test_stopping_a_run_asks_first(repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path) -> None:
    gated_host(repo, tmp_path)
    key = mint(repo, "add a comment").key
    async with run_board(repo.root, key=key) as d:
        dialog = await ship_and_wait_for_output(d)
        await d.press("ctrl+k")
        confirm = await d.showing(ConfirmDialog)
        assert "ends with an aborted receipt" in str(confirm.body)
        await d.press("n")
        await d.until(lambda: d.screen is dialog, "the ship dialog again")
        assert not dialog.done and not dialog.run.stopping
        await d.press("ctrl+k")
        await d.showing(ConfirmDialog)
        await d.press("y")
        await d.until(lambda: dialog.done, "the run to stop")
        assert "aborted" in plain(dialog.query_one("#ship-status", Static))
    assert receipt_status(repo, key) == "aborted"


async def test_ctrl_k_on_the_board_stops_a_hidden_run_after_a_confirm(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gated_host(repo, tmp_path)
    key = mint(repo, "add a comment").key
    async with run_board(repo.root, key=key) as d:
        await ship_and_wait_for_output(d)
        await d.press("escape")
        await d.until(lambda: d.state_of(key) == "RUNNING", "the job to show RUNNING")
        await d.press("ctrl+k")
        confirm = await d.showing(ConfirmDialog)
        assert "This board runs it" in str(confirm.body)
        await d.press("y")
        await d.until(lambda: repo.receipt(key).exists(), "the aborted receipt")
    assert receipt_status(repo, key) == "aborted"


async def test_quit_with_a_run_asks_and_stop_ends_it_aborted(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gated_host(repo, tmp_path)
    key = mint(repo, "add a comment").key
    async with run_board(repo.root, key=key) as d:
        await ship_and_wait_for_output(d)
        await d.press("escape")
        await d.press("q")
        dialog: QuitDialog = await d.showing(QuitDialog)
        assert dialog.runs == [key] and dialog.claims == []
        await d.press("escape")
        await d.until(lambda: isinstance(d.screen, BoardScreen), "the board, still running")
        assert d.app.return_code is None
        await d.press("ctrl+q")
        await d.showing(QuitDialog)
        await d.press("s")
        await d.until(lambda: d.app.return_code is not None, "the board to quit")
    assert receipt_status(repo, key) == "aborted"


async def test_quit_waits_for_a_run_to_end(repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path) -> None:
    gate = gated_host(repo, tmp_path)
    key = mint(repo, "add a comment").key
    async with run_board(repo.root, key=key) as d:
        await ship_and_wait_for_output(d)
        await d.press("escape")
        await d.press("q")
        await d.showing(QuitDialog)
        await d.press("w")
        await d.until(lambda: d.inbox.said("quitting once 1 run has ended"), "the wait")
        assert d.app.return_code is None
        gate.touch()
        await d.until(lambda: d.app.return_code is not None, "the board to quit")
    assert receipt_status(repo, key) == "ok"


async def test_quit_gives_a_held_claim_back_to_the_queue(repo: Layout, signer: Ed25519PrivateKey) -> None:
    key = mint(repo, "add a comment").key
    async with run_board(repo.root, key=key) as d:
        await d.press("c")
        await d.until(lambda: d.board.dispatcher.holds(key), "the claim")
        await d.press("q")
        dialog: QuitDialog = await d.showing(QuitDialog)
        assert dialog.runs == [] and dialog.claims == [key]
        assert not dialog.query("#wait"), "nothing to wait for"
        await d.press("s")
        await d.until(lambda: d.app.return_code is not None, "the board to quit")
    assert repo.job_file("queue", key).exists() and not repo.job_file("running", key).exists()
    assert not repo.lease(key).exists() and not repo.receipt(key).exists()
    assert [a["event"] for a in attempts(repo, key)][-2:] == ["claimed", "released"]


async def test_quit_leaving_a_claim_keeps_it_running(repo: Layout, signer: Ed25519PrivateKey) -> None:
    key = mint(repo, "add a comment").key
    async with run_board(repo.root, key=key) as d:
        await d.press("c")
        await d.until(lambda: d.board.dispatcher.holds(key), "the claim")
        await d.press("q")
        await d.showing(QuitDialog)
        await d.press("l")
        await d.until(lambda: d.app.return_code is not None, "the board to quit")
    assert repo.job_file("running", key).exists() and repo.lease(key).exists()


def test_leaving_names_each_job_and_how_to_put_it_back() -> None:
    text = left_behind(["a" * 64, "b" * 64])
    assert "left 2 jobs RUNNING" in text and "genjob requeue KEY" in text
    assert text.splitlines()[-2:] == ["  " + "a" * 64, "  " + "b" * 64]


async def test_quit_with_a_run_offers_no_leaving_it_running(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """A run is the board's process: it cannot be left behind, only stopped or waited for."""
    gated_host(repo, tmp_path)
    key = mint(repo, "add a comment").key
    async with run_board(repo.root, key=key) as d:
        await ship_and_wait_for_output(d)
        await d.press("escape")
        await d.press("q")
        dialog: QuitDialog = await d.showing(QuitDialog)
        assert not dialog.query("#leave")
        await d.press("l")
        assert d.screen is dialog and d.app.return_code is None
        await d.press("s")
        await d.until(lambda: d.app.return_code is not None, "the board to quit")


async def test_quit_with_nothing_in_hand_does_not_ask(repo: Layout) -> None:
    mint(repo, "add a comment")
    async with run_board(repo.root) as d:
        await d.press("q")
        await d.until(lambda: d.app.return_code is not None, "the board to quit")
