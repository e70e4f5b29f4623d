"""The new-job dialog when git cannot list the repository's files: it says so, in git's
words, and offers none (never every file, the ignored `.env` among them)."""

from __future__ import annotations

from boardkit import run_board
from checkkit import refuse_git
from textual.widgets import Input, SelectionList, Static

from tui.demo import Demo
from tui.dialogs.new_job import NewJobDialog


async def test_the_dialog_says_why_no_file_is_listed_when_git_fails(demo: Demo) -> None:
    (demo.root / ".env").write_text("API_TOKEN=hunter2\n")
    async with run_board(demo.root) as d:
        await d.loaded()
        refuse_git(demo.root, "broken")
        await d.press("n")
        dialog = await d.showing(NewJobDialog)
        error = dialog.query_one("#newjob-error", Static)
        files = dialog.query_one("#files", SelectionList)
        await d.until(lambda: bool(str(error.render())) or files.option_count > 0, "files or a message")
        assert files.option_count == 0, [files.get_option_at_index(0).value]
        assert "git ls-files failed" in str(error.render())
        assert "not a git repository" in str(error.render())


async def test_at_80x24_the_list_has_rows_tab_reaches_it_and_a_refusal_shows(demo: Demo) -> None:
    async with run_board(demo.root, (80, 24)) as d:
        await d.press("n")
        dialog = await d.showing(NewJobDialog)
        files = dialog.query_one("#files", SelectionList)
        await d.until(lambda: files.option_count > 0, "the file list")
        await d.pilot.pause()
        assert files.scrollable_content_region.height >= 5
        assert dialog.focused is not None and dialog.focused.id == "instruction"
        order = []
        for _ in range(5):
            await d.press("tab")
            assert dialog.focused is not None
            order.append(dialog.focused.id)
        assert order == ["files", "file-filter", "new-paths", "submit", "cancel"]
        await d.press("ctrl+s")
        error = dialog.query_one("#newjob-error", Static)
        await d.until(lambda: "instruction: empty" in str(error.render()), "the refusal")
        await d.pilot.pause()
        screen = dialog.region
        assert error.region.height >= 1 and screen.contains_region(error.region)
        assert dialog.focused is not None and dialog.focused.id == "instruction"


async def test_a_letter_typed_on_the_list_filters_it(demo: Demo) -> None:
    async with run_board(demo.root, (80, 24)) as d:
        await d.press("n")
        dialog = await d.showing(NewJobDialog)
        files = dialog.query_one("#files", SelectionList)
        await d.until(lambda: files.option_count > 1, "the file list")
        files.focus()
        await d.press("o", "p", "s")
        box = dialog.query_one("#file-filter", Input)
        await d.pilot.pause()
        assert box.value == "ops" and box.has_focus
