"""The genjob board as a Textual app; `make_app` builds it for the CLI, tests and screenshots."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

from textual.app import App, SystemCommand
from textual.notifications import Notification, Notify, SeverityLevel
from textual.screen import Screen

from core.store.layout import Layout, find_root
from tui.notes import BoardNote, counted_note, dialog_on_top, fit_message, toast_text_width, write_into_dialog
from tui.prefs import keep_theme, kept_theme
from tui.screens.board import BoardScreen
from tui.text import use_theme
from tui.widgets.counts import DIGITS


class GenjobApp(App[None]):
    CSS_PATH = "genjob.tcss"
    TITLE = "genjob"
    ENABLE_COMMAND_PALETTE = True

    def __init__(self, layout: Layout, readonly: bool = False) -> None:
        super().__init__()
        self.repo = layout
        self.readonly = readonly
        self.sub_title = str(layout.root)
        theme = kept_theme()
        if theme in self.available_themes:
            self.theme = theme
        # Notes held while a dialog is on top, and what each shown note is a repeat of.
        self._held_notes: list[Notification] = []
        self._repeats: dict[str, tuple[tuple[str, SeverityLevel, str], int]] = {}

    def on_mount(self) -> None:
        use_theme(self.get_css_variables())  # styled already: no CSS refresh before the first frame
        self.theme_changed_signal.subscribe(self, lambda _: self._theme_changed())
        self.screen_change_signal.subscribe(self, self._screen_changed)
        self.push_screen(BoardScreen(self.repo, self.readonly))

    def _theme_changed(self) -> None:
        use_theme(self.get_css_variables())
        self.refresh_css()
        self.run_worker(lambda: keep_theme(self.theme), thread=True, group="prefs")

    # -- notifications (`tui.notes`) --------------------------------------------------------
    def on_notify(self, event: Notify) -> None:
        """A dialog's own note goes into the dialog; any other waits while a dialog is on top."""
        event.prevent_default()
        note = event.notification
        if not self.screen_stack:  # the app is closing: nothing left to show it on
            return
        if dialog_on_top(self.screen):
            if not write_into_dialog(self.screen, note.title, note.message, note.severity):
                self._held_notes.append(note)
            return
        self._show_note(note)

    def on_board_note(self, event: BoardNote) -> None:
        """A note of the board's: a toast now, or once the dialog on top has closed."""
        note = event.notification
        if not self.screen_stack:  # the app is closing: nothing left to show it on
            return
        if dialog_on_top(self.screen):
            self._held_notes.append(note)
        else:
            self._show_note(note)

    def _show_note(self, note: Notification) -> None:
        """Show `note`, in place of a toast it repeats (counted) and of an earlier refusal."""
        what = (note.title, note.severity, note.message)
        times = 1
        for live in list(self._notifications):
            was, count = self._repeats.pop(live.identity, ((live.title, live.severity, live.message), 1))
            if was == what or was[:2] == ("", "warning") == what[:2]:
                times = count + 1 if was == what else 1
                self._unnotify(live, refresh=False)
            else:
                self._repeats[live.identity] = (was, count)
        shown = counted_note(note, times) if times > 1 else dataclasses.replace(note)
        if not shown.markup:
            shown.message = fit_message(shown.message, toast_text_width(self.size.width))
        self._repeats = {k: v for k, v in self._repeats.items() if k in self._live_identities()}
        self._repeats[shown.identity] = (what, times)
        self._notifications.add(shown)
        self._refresh_notifications()

    def _live_identities(self) -> set[str]:
        return {n.identity for n in self._notifications}

    def _screen_changed(self, screen: Screen[object]) -> None:
        """A dialog opened: the toasts shown wait for it to close. It closed: they and the
        notes held meanwhile are shown again, for their whole time."""
        if dialog_on_top(screen):
            for live in list(self._notifications):
                (title, severity, message), _ = self._repeats.pop(
                    live.identity, ((live.title, live.severity, live.message), 1)
                )
                self._unnotify(live, refresh=False)
                self._held_notes.append(Notification(message, title, severity, live.timeout))
            self._refresh_notifications()
            return
        held, self._held_notes = self._held_notes, []
        for note in held:
            self._show_note(Notification(note.message, note.title, note.severity, note.timeout))

    async def action_quit(self) -> None:
        """`q` and `ctrl+q`: the board asks first while it runs jobs or holds claims."""
        try:
            board = self.board
        except LookupError:
            self.exit()
            return
        board.ask_quit()

    @property
    def board(self) -> BoardScreen:
        """The board screen (under any dialog open on top of it)."""
        for screen in self.screen_stack:
            if isinstance(screen, BoardScreen):
                return screen
        raise LookupError("the board is not open")

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        """Textual's commands (but Maximize: the board's zoom does that), then the board's
        keys by name: none twice, none that the board would refuse (read-only)."""
        board = screen if isinstance(screen, BoardScreen) else None
        for command in super().get_system_commands(screen):
            if board is None or command.title not in ("Maximize", "Minimize"):
                yield command
        if board is None:
            return
        for binding in board.help_bindings():
            if binding.id in (None, "quit", "clear", "mark") or not binding.action:
                continue
            key = binding.key_display or binding.key

            def run(action: str = binding.action) -> None:
                self.call_later(board.run_action, action)

            yield SystemCommand(f"{binding.description} ({key})", binding.tooltip or binding.description, run)
        if not board.readonly:

            def recover() -> None:
                self.call_later(board.run_action, "recover")

            yield SystemCommand(
                "Recover",
                "Finish interrupted applies and resolve inconsistent pairs (genjob recover)",
                recover,
            )
        for state, digit in DIGITS.items():

            def only(name: str = state.value) -> None:
                self.call_later(board.run_action, f"toggle_state('{name}')")

            yield SystemCommand(
                f"Only {state.value} ({digit})", f"Show or hide only {state.value} jobs", only, discover=False
            )


def make_app(root: Path, readonly: bool = False) -> GenjobApp:
    """The board for the repository at `root` (NotFound when it has no `.gen/`)."""
    return GenjobApp(find_root(explicit=root), readonly)


def run_board(layout: Layout, readonly: bool = False) -> None:
    """`genjob tui`: the board for `layout`, until the operator quits it."""
    GenjobApp(layout, readonly).run()
