"""A new job: the instruction in an editor and the files it may touch, picked from the tree.

On a 24-line terminal everything fits without scrolling: the instruction box shrinks,
the inputs lose their borders, and the file list takes the rest (several rows). Tab goes
instruction, file list, file filter, new files, then the buttons; a letter typed on the
list goes to the filter. A refusal is written just above the buttons, and the field at
fault is marked and takes the focus.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Input, Label, SelectionList, Static, TextArea

from core.errors import GenjobError
from core.model.terminal import visible
from core.plan.submit import repo_files, submit_job
from core.store.layout import Layout
from core.store.queue import Enqueued
from tui.dialogs import SHORT_TERMINAL, fit_to_terminal
from tui.text import literal

MAX_SHOWN = 500


class FileList(SelectionList[str]):
    """The files to pick; a printable key other than space goes to the filter box."""

    def on_key(self, event: events.Key) -> None:
        if event.is_printable and event.character not in (None, " "):
            box = self.screen.query_one("#file-filter", Input)
            box.insert_text_at_cursor(event.character)
            box.focus()
            event.stop()


def field_at_fault(message: str, new_paths: list[str]) -> str:
    """The id of the field a refusal is about: the instruction, a new file, or the files picked."""
    if message.startswith("instruction"):
        return "instruction"
    if any(message.startswith(f"{p}:") or f"'{p}'" in message for p in new_paths):
        return "new-paths"
    return "files"


class NewJobDialog(ModalScreen[Enqueued | None]):
    """Returns what was queued, or None. Faults (a secret, a bad path) stay in the dialog."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "submit", "Queue the job", id="newjob.submit"),
        Binding("escape", "cancel", "Cancel", id="newjob.cancel"),
    ]

    def __init__(self, layout: Layout) -> None:
        super().__init__()
        self.repo = layout
        self.files: list[str] = []
        self.chosen: set[str] = set()

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide tall", id="newjob"):
            yield Static("New job", classes="dialog-title")
            yield Label("Instruction (the generator gets it as a file, never as shell text)")
            yield TextArea(id="instruction", soft_wrap=True, show_line_numbers=False)
            yield Label("Files the job may change (space picks; type to filter)")
            yield FileList(id="files")
            yield Input(placeholder="filter files", id="file-filter", select_on_focus=False)
            yield Input(placeholder="new files the job creates, comma separated (optional)", id="new-paths")
            yield Static("", id="newjob-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Queue (ctrl+s)", id="submit", variant="primary")
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        fit_to_terminal(self)
        short = self.app.size.height < SHORT_TERMINAL
        self.set_class(short, "short")
        for box in self.query("Input, TextArea"):
            if isinstance(box, (Input, TextArea)):
                box.compact = short
        self.query_one("#instruction", TextArea).focus()
        self._load_files()

    @dataclass
    class FilesListed(Message):
        files: list[str]

    @dataclass
    class Refused(Message):
        """Queueing failed: the reason stays in the dialog, by the field at fault."""

        text: str
        field: str | None = None

    @dataclass
    class Queued(Message):
        res: Enqueued

    @work(thread=True, exclusive=True, group="newjob-files")
    def _load_files(self) -> None:
        try:
            files = repo_files(self.repo.root)
        except (GenjobError, OSError) as exc:
            self.post_message(self.Refused(str(exc)))
            return
        self.post_message(self.FilesListed(files))

    def on_new_job_dialog_files_listed(self, message: FilesListed) -> None:
        self.files = message.files
        self._show_files("")

    def _show_files(self, needle: str) -> None:
        pick = self.query_one("#files", SelectionList)
        needle = needle.strip().casefold()
        shown = [f for f in self.files if needle in f.casefold()][:MAX_SHOWN]
        pick.clear_options()
        # A file name is the repository's to choose: shown as the characters it is, never markup.
        pick.add_options([(literal(f, keep_newlines=False), f, f in self.chosen) for f in shown])
        if shown:
            pick.highlighted = 0

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "file-filter":
            self._show_files(event.value)

    def on_selection_list_selection_toggled(self, event: SelectionList.SelectionToggled[str]) -> None:
        value = event.selection.value
        self.chosen.symmetric_difference_update({value})

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "submit":
            self.action_submit()
        else:
            self.action_cancel()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_submit(self) -> None:
        instruction = self.query_one("#instruction", TextArea).text
        new = [p.strip() for p in self.query_one("#new-paths", Input).value.split(",") if p.strip()]
        self._error(Text("checking for secrets and queueing…", style="dim"))
        self._submit(instruction, sorted(self.chosen), new)

    def _error(self, text: Text, field: str | None = None) -> None:
        self.query_one("#newjob-error", Static).update(text)
        for widget in self.query(".-fault"):
            widget.remove_class("-fault")
        if field is not None:
            faulty: Widget = self.query_one(f"#{field}")
            faulty.add_class("-fault")
            faulty.focus()

    @work(thread=True, exclusive=True, group="newjob-submit")
    def _submit(self, instruction: str, paths: list[str], new: list[str]) -> None:
        try:
            res = submit_job(self.repo, instruction, paths, new)
        except (GenjobError, OSError) as exc:
            self.post_message(self.Refused(str(exc), field_at_fault(str(exc), new)))
            return
        self.post_message(self.Queued(res))

    def on_new_job_dialog_refused(self, message: Refused) -> None:
        self._error(Text(visible(message.text), style="bold red"), message.field)

    def on_new_job_dialog_queued(self, message: Queued) -> None:
        self.dismiss(message.res)
