"""The new-job dialog when git cannot list the repository's files: it says so, in git's
words, and offers none (never every file, the ignored `.env` among them)."""

from __future__ import annotations

from boardkit import run_board
from checkkit import refuse_git
from textual.widgets import SelectionList, Static

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
