"""Notifications at 80x24: one line where they can be, coalesced, and never drawn over a
dialog (a dialog's own note is written into it; the board's wait for it to close)."""

from __future__ import annotations

from boardkit import Driver, plain, run_board
from textual.widgets import Static
from textual.widgets._toast import Toast

from tui.app import make_app
from tui.demo import Demo
from tui.dialogs.confirm import ConfirmDialog
from tui.messages import Say
from tui.notes import board_note, cut_left, fit_line, fit_message, toast_text_width
from tui.screens.board import BoardScreen

SMALL = (80, 24)


def toasts(d: Driver) -> list[str]:
    """The text of each toast on the screen on top, as drawn: its lines, stripped."""
    drawn = []
    for toast in d.screen.query(Toast):
        lines = (toast.render_line(y).text.strip(" ▌") for y in range(toast.size.height))
        drawn.append("\n".join(line for line in lines if line))
    return drawn


async def toasts_drawn(d: Driver) -> list[str]:
    """The toasts once some are drawn and the app has handled what was waiting."""
    await d.until(lambda: bool(d.screen.query(Toast)), "a toast on the screen")
    await d.pilot.pause()
    await d.pilot.wait_for_scheduled_animations()
    return toasts(d)


async def test_refusals_on_a_read_only_board_are_one_toast_counted(demo: Demo) -> None:
    async with run_board(demo.root, SMALL, readonly=True, notifications=True) as d:
        await d.press("a", "s", "x", "c", "c", "c")
        await d.until(lambda: len(d.inbox.notes) == 6, "six refusals said")
        [shown] = await toasts_drawn(d)
        assert shown == "read-only board: claim refused ×3"


async def test_the_same_note_again_is_counted_not_stacked(demo: Demo) -> None:
    async with run_board(demo.root, SMALL, notifications=True) as d:
        for _ in range(3):
            d.board.post_message(Say("check passed", "information", "fe01c2668bbf"))
        await d.until(lambda: len(d.inbox.notes) == 3, "three notes said")
        assert await toasts_drawn(d) == ["fe01c2668bbf ×3\ncheck passed"]


async def test_a_board_note_waits_while_a_dialog_is_open(demo: Demo) -> None:
    async with run_board(demo.root, SMALL, key=demo.keys["orphan"], notifications=True) as d:
        await d.press("r")
        dialog = await d.showing(ConfirmDialog)
        d.board.post_message(Say("check passed", "information", "fe01c2668bbf"))
        await d.until(lambda: d.inbox.said("check passed"), "the note said")
        await d.pilot.pause()
        assert toasts(d) == [] and not dialog.query("#dialog-note")
        await d.press("n")
        await d.until(lambda: isinstance(d.screen, BoardScreen), "the board again")
        assert await toasts_drawn(d) == ["fe01c2668bbf\ncheck passed"]


async def test_toasts_shown_leave_the_way_of_a_dialog_and_come_back(demo: Demo) -> None:
    async with run_board(demo.root, SMALL, key=demo.keys["orphan"], notifications=True) as d:
        await d.press("a")
        await toasts_drawn(d)
        await d.press("r")
        await d.showing(ConfirmDialog)
        await d.pilot.pause()
        assert toasts(d) == []
        await d.press("n")
        await d.until(lambda: isinstance(d.screen, BoardScreen), "the board again")
        [shown] = await toasts_drawn(d)
        assert shown.startswith(f"{demo.keys['orphan'][:12]}: is ORPHANED")


async def test_a_dialogs_own_note_is_written_into_the_dialog(demo: Demo) -> None:
    async with run_board(demo.root, SMALL, key=demo.keys["orphan"], notifications=True) as d:
        await d.press("r")
        dialog = await d.showing(ConfirmDialog)
        dialog.notify("the requeue failed: .gen/running is read-only", severity="error", markup=False)
        await d.until(lambda: d.inbox.said("the requeue failed"), "the note said")
        await d.pilot.pause()
        note = plain(dialog.query_one("#dialog-note", Static))
        assert "the requeue failed: .gen/running is read-only" in note
        assert toasts(d) == []


def test_a_long_path_is_cut_from_the_left_keeping_its_name() -> None:
    width = toast_text_width(80)
    path = "src/" + "deeply/nested/" * 6 + "module_with_a_long_name.py"
    line = fit_line(f"refused: {path} changed", width)
    assert len(line) <= width
    cut = line.split()[1]
    assert cut.startswith("…/") and cut.endswith("/module_with_a_long_name.py")
    # A line that cannot fit still names the file and the folder it is in.
    long = fit_line(f"refused: {path} changed since the job was minted, so it must be replayed", width)
    assert long.split()[1] == "…/nested/module_with_a_long_name.py"


def test_a_word_too_long_for_any_line_is_cut_too() -> None:
    width = toast_text_width(80)
    digest = "ab" * 40
    assert cut_left(digest, width) == "…" + digest[-(width - 1) :]
    assert all(len(word) <= width for word in fit_message(f"digest\n{digest} differs", width).split())


def test_a_short_message_is_left_as_it_is() -> None:
    text = "claimed 1889189cbb74 (attempt 2); s ships it"
    assert fit_message(text, toast_text_width(80)) == text


async def test_a_note_that_arrives_as_the_board_closes_is_dropped_not_raised(demo: Demo) -> None:
    """A check or a run can end while the app is taking its screens down: its note has
    nothing to be shown on, and must not turn the exit into a traceback."""
    app = make_app(demo.root)
    assert not app.screen_stack
    app.on_board_note(board_note("check tests passed", "checks", "information", 5))
    app.on_notify(board_note("a dialog's own note", "", "warning", 5))
    assert not app._notifications
