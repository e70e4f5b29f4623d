"""The board's notifications: short, coalesced, and never drawn over a dialog.

Textual draws a notification as a toast in the corner of the screen on top. Left alone,
toasts stack over a dialog's lines for seconds, and a long path wraps mid-word. So:

- each message is fitted to the toast's width: a word too long for the line that it is
  on (a path, mostly) is cut from the left with `…`, keeping its end (the file name);
- a message like one still shown replaces it, counted (`×3`); an untitled warning (a
  refusal) replaces the one before it, so refusals never stack;
- while a dialog is on top, a note the dialog itself raises is written into the dialog
  (a line above its buttons, where the operator is looking); a note the board raises
  waits, with the toasts already shown, until the dialog closes.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from rich.text import Text
from textual.css.query import NoMatches
from textual.notifications import Notification, Notify
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

if TYPE_CHECKING:
    from textual.notifications import SeverityLevel

# A toast is at most this wide, and at most this share of the screen (as in genjob.tcss);
# its text has TOAST_FRAME columns less (the coloured edge, and one column each side).
TOAST_WIDTH = 60
TOAST_SHARE = 0.75
TOAST_FRAME = 3
ELLIPSIS = "…"
NOTE_STYLES: dict[str, str] = {"information": "bold green", "warning": "bold yellow", "error": "bold red"}


def toast_text_width(screen_width: int) -> int:
    """How many columns of text a toast holds on a screen `screen_width` wide."""
    return max(20, min(TOAST_WIDTH, int(screen_width * TOAST_SHARE)) - TOAST_FRAME)


def cut_left(word: str, width: int) -> str:
    """`word` in at most `width` columns, its start given up: `…/calc/parser.py`. A path
    keeps whole components where it can."""
    if len(word) <= width:
        return word
    tail = word[len(word) - (width - 1) :]
    slash = tail.find("/")
    if 0 <= slash < len(tail) - 1 and len(tail) - slash >= width // 2:
        tail = tail[slash:]
    return ELLIPSIS + tail


def fit_line(line: str, width: int) -> str:
    """One line of a message with every word that would not fit on a line of its own cut
    (from the left); when the line is too long for one line, its paths are shortened
    (longest first, to their last two components) until it fits or they cannot give more."""
    words = [cut_left(w, width) for w in line.split(" ")]
    over = len(" ".join(words)) - width
    paths = sorted((i for i, w in enumerate(words) if "/" in w.strip(ELLIPSIS)), key=lambda i: -len(words[i]))
    for i in paths:
        if over <= 0:
            break
        word = words[i]
        name = "/".join(word.rsplit("/", 2)[-2:])
        keep = max(len(word) - over, len(name) + 2)
        if keep < len(word):
            words[i] = cut_left(word, keep)
            over -= len(word) - len(words[i])
    return " ".join(words)


def fit_message(message: str, width: int) -> str:
    return "\n".join(fit_line(line, width) for line in message.split("\n"))


def counted_note(n: Notification, times: int) -> Notification:
    """`n` raised again: its title (or message) ends with how many times it came."""
    if n.title:
        return dataclasses.replace(n, title=f"{n.title} ×{times}", raised_at=time.time())
    return dataclasses.replace(n, message=f"{n.message} ×{times}", raised_at=time.time())


class BoardNote(Notify):
    """A note the board raises: while a dialog is on top it waits for the dialog to close."""


def board_note(message: str, title: str, severity: SeverityLevel, timeout: float) -> BoardNote:
    return BoardNote(Notification(message, title, severity, timeout, markup=False))


def dialog_on_top(screen: Screen[object]) -> bool:
    return isinstance(screen, ModalScreen)


def write_into_dialog(screen: Screen[object], title: str, message: str, severity: SeverityLevel) -> bool:
    """Write a note into the dialog `screen`, on a line above its buttons (made on first
    use); False when the dialog has no frame to hold it."""
    try:
        frame = screen.query(".dialog").first()
    except NoMatches:
        return False
    text = Text(f"{title}: " if title else "", style=NOTE_STYLES[severity])
    text.append(message, style=NOTE_STYLES[severity].replace("bold ", ""))
    try:
        line = frame.query_one("#dialog-note", Static)
    except NoMatches:
        line = Static(id="dialog-note")
        buttons = frame.query(".dialog-buttons")
        frame.mount(line, before=buttons.first()) if buttons else frame.mount(line)
    line.update(text)
    return True
