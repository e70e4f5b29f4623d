"""What the board looks like, at 80x24 and 120x35: the board, every dialog, help, the diff.

Each test drives the board on a frozen demo (fixed clock, keys and folder name) and
compares the screen with the SVG kept under `__snapshots__/` (pytest-textual-snapshot's
format). After a deliberate change of look, run `uv run pytest tests/tui/test_snapshots.py
--snapshot-update` and look at the new SVGs before committing them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from boardkit import Driver, plain, run_board
from corekit import set_config
from pytest_textual_snapshot import SVGImageExtension
from syrupy.assertion import SnapshotAssertion
from textual.widgets import Button, DataTable, Input, Log, MarkdownViewer, OptionList, Static, TextArea

from core.store.layout import Layout
from core.work.ship_candidates import CandidateRequest, ship_candidates
from tui.demo import WORKER, Demo
from tui.dialogs.bulk_ship import BulkShipDialog
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.host_picker import HostPicker
from tui.dialogs.new_job import NewJobDialog
from tui.dialogs.preflight import PreflightDialog
from tui.dialogs.quit import QuitDialog
from tui.dialogs.reason import ReasonDialog
from tui.dialogs.ship import ShipDialog
from tui.screens.board import BoardScreen
from tui.screens.candidates import CandidatesScreen
from tui.screens.diff import DiffScreen
from tui.screens.fleet import FleetScreen
from tui.screens.help import HelpScreen
from tui.widgets.detail import DetailPane

SIZES = [pytest.param((80, 24), id="80x24"), pytest.param((120, 35), id="120x35")]


class SVGFile(SVGImageExtension):
    """pytest-textual-snapshot's SVG format, kept as `.svg` files that a browser opens."""

    file_extension = "svg"


@pytest.fixture
def svg(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    return snapshot.use_extension(SVGFile)


async def screenshot(d: Driver, running: bool = False) -> str:
    """The screen once it is still: every row read, animations over, no cursor
    blinking, verdicts and check marks in, and (unless `running`) no check under way."""
    board = d.board
    await d.until(lambda: not board.view.unread, "every job read (a queue this small is read whole)")
    # A job whose candidates wait for a choice has no receipt to judge yet.
    received = [k for k, r in board.view.rows.items() if r.state.value == "RECEIVED" and r.receipt_status]
    await d.until(lambda: all(k in board.table.verdicts for k in received), "the list's verdicts")
    await d.until(lambda: board.table.check_column, "the checks' column")
    await d.until(lambda: all(k in board.table.checks for k in received), "the list's check marks")
    if not running:
        await d.until(lambda: not board.checks.live, "the checks under way to end")
    await d.until(lambda: board.plane_settled, "the apply plane read after its last change")
    for widget in d.screen.query("Input, TextArea"):
        if isinstance(widget, (Input, TextArea)):
            widget.cursor_blink = False
    await d.pilot.wait_for_scheduled_animations()
    await d.pilot.pause()
    return d.app.export_screenshot(title="genjob")


async def on_job(d: Driver, key: str, tab: str = "job") -> None:
    await d.select(key)
    d.board.query_one(DetailPane).show_tab(tab)
    await d.pilot.pause()


Steps = Callable[[Driver, Demo], Awaitable[None]]


async def board(d: Driver, demo: Demo) -> None:
    await on_job(d, demo.keys["verified"], "verify")


async def help_screen(d: Driver, demo: Demo) -> None:
    await on_job(d, demo.keys["verified"])
    await d.press("question_mark")
    await d.showing(HelpScreen)


async def help_topic(d: Driver, demo: Demo) -> None:
    """The help on a topic of the reference, its table of contents beside it."""
    await help_screen(d, demo)
    screen = d.screen
    assert isinstance(screen, HelpScreen)
    await d.press("down", "down")
    viewer = screen.query_one(MarkdownViewer)
    await d.until(
        lambda: screen.page == "dashboard" and bool(viewer.table_of_contents.table_of_contents), "the topic"
    )


async def diff_view(d: Driver, demo: Demo) -> None:
    await on_job(d, demo.keys["drifted"])
    await d.press("d")
    await d.showing(DiffScreen)


async def preflight(d: Driver, demo: Demo) -> None:
    await on_job(d, demo.keys["verified"])
    await d.press("a")
    await d.showing(PreflightDialog)


async def preflight_refused(d: Driver, demo: Demo) -> None:
    await on_job(d, demo.keys["untrusted"])
    await d.press("a")
    await d.showing(PreflightDialog)


async def reject_reason(d: Driver, demo: Demo) -> None:
    await on_job(d, demo.keys["drifted"])
    await d.press("x")
    await d.showing(ReasonDialog)


async def requeue_confirm(d: Driver, demo: Demo) -> None:
    await on_job(d, demo.keys["orphan"])
    await d.press("r")
    await d.showing(ConfirmDialog)


async def stop_confirm(d: Driver, demo: Demo) -> None:
    await on_job(d, demo.keys["running"])
    await d.press("ctrl+k")
    await d.showing(ConfirmDialog)


async def discard_confirm(d: Driver, demo: Demo) -> None:
    await on_job(d, demo.keys["invalid"])
    await d.press("D")
    await d.showing(ConfirmDialog)


async def stale_merge(d: Driver, demo: Demo) -> None:
    """`a` on the demo's STALE job: its receipt merges clean over the tree, so the preflight
    offers Merge and apply with the merged diff."""
    from tui.dialogs.preflight import MergeDialog

    await on_job(d, demo.keys["stale"])
    await d.press("a")
    await d.showing(MergeDialog)


async def host_picker(d: Driver, demo: Demo) -> None:
    await on_job(d, demo.keys["queued3"])
    await d.press("s")
    await d.showing(HostPicker)


async def new_job(d: Driver, demo: Demo) -> None:
    """The dialog opened once the board is still: a note of a check that ends while it is
    open would be written into it, so the screenshot would depend on when it ended."""
    await on_job(d, demo.keys["queued3"])
    await d.until(lambda: not d.board.checks.live, "the checks under way to end")
    await d.until(lambda: d.board.plane_settled, "the apply plane read after its last change")
    await d.press("n")
    dialog = await d.showing(NewJobDialog)
    await d.until(lambda: bool(dialog.files), "the repository's files")


async def new_job_refused(d: Driver, demo: Demo) -> None:
    await new_job(d, demo)
    await d.press("ctrl+s")  # with no instruction written
    error = d.screen.query_one("#newjob-error", Static)
    await d.until(lambda: "instruction: empty" in plain(error), "the refusal inside the dialog")


async def fleet(d: Driver, demo: Demo) -> None:
    await on_job(d, demo.keys["verified"])
    await d.press("h")
    screen = await d.showing(FleetScreen)
    table = screen.query_one("#fleet-table")
    await d.until(lambda: table.row_count == 3, "a row per host: local, tidy, slow-local")  # type: ignore[attr-defined]


async def checks_failed(d: Driver, demo: Demo) -> None:
    await on_job(d, demo.keys["checks_failed"], "verify")


async def preflight_checks_refused(d: Driver, demo: Demo) -> None:
    await on_job(d, demo.keys["checks_failed"])
    await d.press("a")
    await d.showing(PreflightDialog)


async def bulk_approve(d: Driver, demo: Demo) -> None:
    for role in ("verified", "checks_failed", "untrusted", "queued"):
        await d.select(demo.keys[role])
        await d.press("space")
    await d.press("a")
    await d.showing(ConfirmDialog)


async def bulk_confirm(d: Driver, demo: Demo) -> None:
    for role in ("queued", "queued3"):
        await d.select(demo.keys[role])
        await d.press("space")
    await d.press("c")
    await d.showing(ConfirmDialog)


STILL: list[tuple[str, Steps]] = [
    ("board", board),
    ("help", help_screen),
    ("help-topic", help_topic),
    ("diff", diff_view),
    ("preflight", preflight),
    ("preflight-refused", preflight_refused),
    ("reject-reason", reject_reason),
    ("requeue-confirm", requeue_confirm),
    ("stop-confirm", stop_confirm),
    ("discard-confirm", discard_confirm),
    ("stale-merge", stale_merge),
    ("host-picker", host_picker),
    ("new-job", new_job),
    ("new-job-refused", new_job_refused),
    ("bulk-confirm", bulk_confirm),
    ("checks-failed", checks_failed),
    ("preflight-checks-refused", preflight_checks_refused),
    ("bulk-approve", bulk_approve),
    ("fleet", fleet),
]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize(("name", "steps"), STILL, ids=[name for name, _ in STILL])
async def test_looks(
    name: str, steps: Steps, size: tuple[int, int], still_demo: Demo, svg: SnapshotAssertion
) -> None:
    async with run_board(still_demo.root, size) as d:
        await steps(d, still_demo)
        assert await screenshot(d) == svg


@pytest.mark.parametrize("size", SIZES)
async def test_ship_dialog_at_its_end(
    size: tuple[int, int], fresh_frozen_demo: Demo, svg: SnapshotAssertion
) -> None:
    demo = fresh_frozen_demo
    async with run_board(demo.root, size) as d:
        await on_job(d, demo.keys["queued3"])
        await d.press("s")
        picker = await d.showing(HostPicker)
        picker.query_one("OptionList").highlighted = 0
        await d.press("enter")
        dialog = await d.showing(ShipDialog)
        await d.until(lambda: dialog.done, "the ship to end")
        await d.until(lambda: d.state_of(demo.keys["queued3"]) == "RECEIVED", "the receipt on the board")
        assert await screenshot(d) == svg


@pytest.mark.parametrize("size", SIZES)
async def test_bulk_ship_at_its_end(
    size: tuple[int, int], fresh_frozen_demo: Demo, svg: SnapshotAssertion
) -> None:
    demo = fresh_frozen_demo
    keys = [demo.keys["queued"], demo.keys["queued3"]]
    async with run_board(demo.root, size) as d:
        await d.ship_marked(keys)
        picker = await d.showing(HostPicker)
        picker.query_one("OptionList").highlighted = 0
        await d.press("enter")
        dialog = await d.showing(BulkShipDialog)
        await d.until(lambda: dialog.done, "the batch to end")
        await d.until(lambda: all(d.state_of(k) == "RECEIVED" for k in keys), "the receipts on the board")
        assert await screenshot(d) == svg


def slower(demo: Demo) -> None:
    """The demo's slow host slower still: after each file it edits, its generator waits ten
    minutes, so that a run shown mid-way is still where it was when its frame is taken."""
    layout = Layout(demo.root)
    text = layout.config.read_text()
    assert "GENJOB_DEMO_DELAY=0.7" in text, "the demo's slow host"
    set_config(layout, text.replace("GENJOB_DEMO_DELAY=0.7", "GENJOB_DEMO_DELAY=600"))


async def ship_to(d: Driver, host: str) -> None:
    """Answer the host picker with `host`."""
    picker = await d.showing(HostPicker)
    options = picker.query_one(OptionList)
    ids = [options.get_option_at_index(i).id for i in range(options.option_count)]
    options.highlighted = ids.index(host)
    await d.press("enter")


async def run_with_output(d: Driver, key: str) -> ShipDialog:
    """Ship `key` to the slow host; its dialog once the generator's first line is in."""
    await on_job(d, key)
    await d.press("s")
    await ship_to(d, "slow-local")
    dialog: ShipDialog = await d.showing(ShipDialog)
    log = dialog.query_one(Log)
    await d.until(lambda: any(line.startswith("edited ") for line in log.lines), "the generator's first line")
    return dialog


@pytest.mark.parametrize("size", SIZES)
async def test_bulk_ship_during_its_run(
    size: tuple[int, int], fresh_frozen_demo: Demo, svg: SnapshotAssertion
) -> None:
    demo = fresh_frozen_demo
    slower(demo)
    async with run_board(demo.root, size) as d:
        await d.ship_marked(demo.keys[role] for role in ("queued", "queued3"))
        await ship_to(d, "slow-local")
        dialog: BulkShipDialog = await d.showing(BulkShipDialog)
        await d.until(
            lambda: "running on slow-local" in d.text("#bulk-jobs"), "a job running on the slow host"
        )
        running = dialog.board_batch.running
        await d.until(lambda: [d.state_of(k) for k in running] == ["RUNNING"], "the job RUNNING on the board")
        try:
            assert await screenshot(d) == svg
        finally:
            dialog.board_batch.stop()
            await d.until(dialog.board_batch.ended.is_set, "the batch to stop")


@pytest.mark.parametrize("size", SIZES)
async def test_ship_dialog_during_its_run(
    size: tuple[int, int], fresh_frozen_demo: Demo, svg: SnapshotAssertion
) -> None:
    demo = fresh_frozen_demo
    slower(demo)
    async with run_board(demo.root, size) as d:
        dialog = await run_with_output(d, demo.keys["queued3"])
        try:
            assert await screenshot(d) == svg
        finally:
            dialog.run.stop()
            await d.until(dialog.run.ended.is_set, "the run to stop")


@pytest.mark.parametrize("size", SIZES)
async def test_quit_with_a_run_and_a_claim(
    size: tuple[int, int], fresh_frozen_demo: Demo, svg: SnapshotAssertion
) -> None:
    demo = fresh_frozen_demo
    slower(demo)
    claimed = demo.keys["queued"]
    async with run_board(demo.root, size) as d:
        await on_job(d, claimed)
        await d.press("c")
        await d.until(lambda: d.board.dispatcher.holds(claimed), "the claim")
        await run_with_output(d, demo.keys["queued3"])
        await d.press("escape")
        await d.until(lambda: isinstance(d.screen, BoardScreen), "the board, the run going on")
        await d.press("q")
        await d.showing(QuitDialog)
        assert await screenshot(d) == svg
        await d.press("s")
        await d.until(lambda: d.app.return_code is not None, "the board to stop the run and quit")


@pytest.mark.parametrize("size", SIZES)
async def test_the_candidates_with_a_rejected_ones_reason(
    size: tuple[int, int], fresh_frozen_demo: Demo, svg: SnapshotAssertion
) -> None:
    demo = fresh_frozen_demo
    layout = Layout(demo.root)
    broken = '\n[hosts.broken]\ntransport = "local"\ngenerator = "echo out of tokens >&2; exit 5"\n'
    set_config(layout, layout.config.read_text() + broken)
    key = demo.keys["queued3"]
    request = CandidateRequest(key, ["local", "slow-local", "broken"], 3)
    results = await ship_candidates(layout, request, worker_id=WORKER)
    assert [r.status for r in results] == ["ok", "ok", "rejected"]
    async with run_board(demo.root, size) as d:
        await on_job(d, key)
        await d.press("a")
        screen = await d.showing(CandidatesScreen)
        table = screen.query_one(DataTable)
        await d.until(lambda: table.row_count == 3, "a row per candidate")
        await d.press("down", "down")
        reason = screen.query_one("#cand-reason", Static)
        await d.until(lambda: "exited with status 5" in plain(reason), "the rejected one's whole reason")
        assert "status is" not in plain(reason), "the failed status step says again how the run ended"
        # The diff is read off the loop after the reason: until it comes, the pane still
        # shows the first candidate's.
        pane = screen.query_one("#cand-diff", Static)
        await d.until(lambda: plain(pane).startswith("candidate 3 against"), "the rejected one's diff")
        assert table.virtual_size.width <= size[0], "every column fits, why not included"
        assert await screenshot(d) == svg


@pytest.mark.parametrize("size", SIZES)
async def test_a_check_running_with_its_output(
    size: tuple[int, int], fresh_frozen_demo: Demo, svg: SnapshotAssertion
) -> None:
    demo = fresh_frozen_demo
    layout = Layout(demo.root)
    set_config(
        layout, layout.config.read_text() + '\n[checks.slow]\nrun = "echo started the slow one; sleep 600"\n'
    )
    key = demo.keys["verified"]
    async with run_board(demo.root, size) as d:
        await on_job(d, key, "verify")
        pane = d.board.query_one(DetailPane)
        await d.until(lambda: len(d.board.checks.live) == 2, "the slow check to run on both receipts")
        await d.until(lambda: all(c.output for c in d.board.checks.live.values()), "their output")
        tab = pane.query_one("#detail-verify", Static)
        await d.until(lambda: "started the slow one" in plain(tab), "the output in the Verify tab")
        assert await screenshot(d, running=True) == svg


@pytest.mark.parametrize("size", SIZES)
async def test_the_preflight_during_a_required_check(
    size: tuple[int, int], fresh_frozen_demo: Demo, svg: SnapshotAssertion
) -> None:
    """Approve while a required check runs: the preflight says it is running, offers no
    apply until it has passed, and follows it as it goes (the clock here is frozen)."""
    demo = fresh_frozen_demo
    layout = Layout(demo.root)
    config = layout.config.read_text().replace(
        'require_checks = ["tests"]', 'require_checks = ["tests", "slow"]'
    )
    set_config(layout, config + '\n[checks.slow]\nrun = "echo started the slow one; sleep 600"\n')
    key = demo.keys["verified"]
    async with run_board(demo.root, size) as d:
        await on_job(d, key)
        await d.until(lambda: any(k == key for k, _ in d.board.checks.live), "the slow check to run")
        await d.press("a")
        dialog = await d.showing(PreflightDialog)
        body = dialog.query_one("#preflight-body", Static)
        await d.until(lambda: "slow" in plain(body) and "running for" in plain(body), "the running check")
        assert dialog.query_one("#yes", Button).disabled
        assert await screenshot(d, running=True) == svg
