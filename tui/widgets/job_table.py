"""The job list: a Line API `ScrollView` that renders only the rows in view.

The jobs live in a `core.read.board_view.BoardView`; this widget keeps a cursor and a set
of marks keyed by job key, so neither moves to another job when rows arrive, leave or
change state around them. A job known by name alone draws as its key and provisional
state; the list asks for the rows of its window (`WindowShown`) and they fill in as read.

| Key | Action |
| :- | :- |
| up/down | Move the cursor. |
| pageup/pagedown | Move a page. |
| home/end | First or last job. |
| space | Mark or unmark the job under the cursor. |
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import ClassVar

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from core.model.lifecycle import State
from core.model.protected import PROTECTED_MARK, flagged
from core.model.terminal import age, visible
from core.read.board_view import BoardView, summary_line
from core.read.snapshot import JobRow
from tui.text import STATE_STYLES, counted

# After RECEIVED: whether the receipt verifies now (unknown until checked).
VERDICT = {None: "", True: " ✔", False: " ✘"}
# A job whose allowed paths overlap another job in flight (`core.store.overlaps`).
OVERLAP_MARK = "∩"
# Rendered rows kept for reuse; rows shift on screen far more often than they change.
STRIP_CACHE = 512


class JobTable(ScrollView, can_focus=True):
    """The list has no scrollbar and no border (redrawing them on every change costs more
    than the rows do); its header line says where the cursor is instead."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "jobtable--header",
        "jobtable--cursor",
        "jobtable--marked",
        "jobtable--dim",
        "jobtable--empty",
        "jobtable--warning",
        "jobtable--pass",
        "jobtable--fail",
        "jobtable--busy",
    }
    DEFAULT_CSS = """
    JobTable { background: $surface; scrollbar-size-vertical: 0; }
    JobTable > .jobtable--header { text-style: bold; background: $panel; color: $text; }
    JobTable > .jobtable--cursor {
        background: $block-cursor-blurred-background;
        color: $foreground;
        text-style: bold;
    }
    JobTable:focus > .jobtable--cursor {
        background: $block-cursor-background;
        color: $block-cursor-foreground;
        text-style: $block-cursor-text-style;
    }
    JobTable > .jobtable--marked { color: $text-warning; text-style: bold; }
    JobTable > .jobtable--dim { color: $text-muted; }
    JobTable > .jobtable--empty { color: $foreground; }
    JobTable > .jobtable--warning { color: $text-error; text-style: bold; }
    JobTable > .jobtable--pass { color: $text-success; }
    JobTable > .jobtable--fail { color: $text-error; text-style: bold; }
    JobTable > .jobtable--busy { color: $text-warning; text-style: bold; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "edge(0)", "First job", show=False),
        Binding("end", "edge(1)", "Last job", show=False),
        Binding("space", "mark", "Mark", tooltip="Mark or unmark this job for a bulk action", id="mark"),
    ]

    class CursorMoved(Message):
        """The cursor is on another job (or on none)."""

        def __init__(self, key: str | None) -> None:
            super().__init__()
            self.key = key

    class FirstRowsDrawn(Message):
        """The list has drawn jobs for the first time. Posted as the frame is drawn, it
        is read once that frame has gone to the terminal."""

    class MarksChanged(Message):
        def __init__(self, count: int) -> None:
            super().__init__()
            self.count = count

    class WindowShown(Message):
        """The jobs in view (`window`), and those whose rows are not read in full yet
        (`keys`, attempts included)."""

        def __init__(self, keys: list[str], window: list[str]) -> None:
            super().__init__()
            self.keys = keys
            self.window = window

    def __init__(self, view: BoardView, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view = view
        self.cursor_key: str | None = None
        self.placed = False  # whether the cursor was moved or a job selected since the start
        self.marks: set[str] = set()
        self.wide_keys = False
        self._line_styles: dict[str, Style] | None = None
        self._strips: dict[tuple[object, ...], Strip] = {}
        self.position = ""
        self.verdicts: dict[str, bool] = {}
        # Each received job's checks, one mark each (✔ ✘ ● ○ ·); the column shows only
        # when the config defines checks.
        self.checks: dict[str, str] = {}
        self.check_column = False
        # `policy.protected_paths`: a job that may write one is marked (`core.model.protected`).
        self.protected: tuple[str, ...] = ()
        # The apply plane: where `apply --ready` takes each ready job (1 first), and the jobs
        # in flight that overlap another.
        self.queue: dict[str, int] = {}
        self.overlapping: frozenset[str] = frozenset()
        # What an empty list says instead (set by the screen): lines, and whether each warns.
        self.empty: list[tuple[str, bool]] = []
        self._rows_drawn = False
        self._asked: list[str] = []  # the keys last asked for in `WindowShown`
        self._window: list[str] = []  # the keys in view when it was last posted

    # -- geometry ------------------------------------------------------------------------
    @property
    def page(self) -> int:
        return max(1, self.scrollable_content_region.height - 1)

    @property
    def cursor_index(self) -> int | None:
        return None if self.cursor_key is None else self.view.index_of(self.cursor_key)

    def _sync_size(self) -> None:
        """Follow the row count without a layout pass of the whole screen (rows come and go
        many times a second); only a scrollbar appearing or leaving changes the layout."""
        size = Size(self.scrollable_content_region.width, len(self.view) + 1)
        if size == self.virtual_size:
            return
        had_scrollbar = self.show_vertical_scrollbar
        self.set_reactive(JobTable.virtual_size, size)
        self._scroll_update(size)
        self.refresh(layout=self.show_vertical_scrollbar != had_scrollbar)

    def on_resize(self, event: events.Resize) -> None:
        self.wide_keys = event.size.width >= 150
        self._sync_size()
        self._show_cursor()

    # -- data ----------------------------------------------------------------------------
    def apply(self, changed: Mapping[str, JobRow | None] | None = None) -> None:
        """Apply changed rows (or a new filter when None), keeping cursor and scroll.

        Rows that arrive or leave above the view shift it by as many rows, so every row
        shown stays on its line; those between the top and the cursor push the cursor down
        without scrolling the top row away. A job under the cursor that changes state is
        followed at the same line on screen, as is the cursor under a new filter; if the
        job left the view, the cursor takes the job now at its old position.
        """
        old_index = self.cursor_index
        offset = None if old_index is None else old_index - int(self.scroll_y)
        cursor = self.cursor_key
        cursor_state = None if cursor is None else self.view.where.get(cursor)
        anchor = None if changed is None else self._anchor(changed)
        if changed is None:
            self.view.set_filter()
        else:
            for key, row in changed.items():
                if row is None or row != self.view.rows.get(key):
                    self.verdicts.pop(key, None)
                    self.checks.pop(key, None)
            self.view.update(changed)
            self.marks.difference_update(k for k, r in changed.items() if r is None)
        self._sync_size()
        count = len(self.view)
        if not self.placed and not int(self.scroll_y):
            # Until the operator moves the cursor (or scrolls), it stays on the top row: a
            # job no one chose is not followed down the list as the rows are read.
            self._set_cursor(self.view.key_at(0) if count else None)
            self.scroll_to(y=0, animate=False, immediate=True, force=True)
            self.refresh()
            return
        new_index = self.cursor_index
        if new_index is None and count:
            new_index = min(old_index or 0, count - 1)
            self._move_to(new_index)
        elif not count:
            self._set_cursor(None)
        if new_index is not None and offset is not None:
            height = self.scrollable_content_region.height
            under = self.view.key_at(new_index)
            followed = under != cursor or self.view.where.get(under) != cursor_state
            top = new_index - offset
            if anchor is not None and not followed and (at := self.view.index_of(anchor[0])) is not None:
                top = at - anchor[1]
            top = max(0, min(top, count + 1 - height))
            if not int(self.scroll_y) and new_index < height - 1:
                top = 0  # a list at its top stays there: a row read into a state above shows
            self.scroll_to(y=top, animate=False, immediate=True, force=True)
            if 0 <= offset < self.page or followed:
                self._show_cursor()
        self._show_position()
        self.refresh()

    def _anchor(self, changed: Mapping[str, JobRow | None]) -> tuple[str, int] | None:
        """The first row in view that `changed` leaves alone, and its line: the rows around
        it keep their places relative to it, wherever the changed ones go."""
        for line, key in enumerate(self.in_view()):
            if key not in changed:
                return key, line
        return None

    def _set_cursor(self, key: str | None) -> None:
        if key != self.cursor_key:
            self.cursor_key = key
            self.post_message(self.CursorMoved(key))
        self._show_position()

    def _move_to(self, index: int) -> None:
        self.placed = True
        if not len(self.view):
            self._set_cursor(None)
            return
        index = max(0, min(index, len(self.view) - 1))
        self._set_cursor(self.view.key_at(index))
        self._show_cursor()
        self.refresh()

    def _show_cursor(self) -> None:
        index = self.cursor_index
        if index is None:
            return
        top, height = int(self.scroll_y), self.page
        if index < top:
            self.scroll_to(y=index, animate=False, immediate=True, force=True)
        elif index >= top + height:
            self.scroll_to(y=index - height + 1, animate=False, immediate=True, force=True)

    def set_verdicts(self, verdicts: Mapping[str, bool | None]) -> None:
        """Whether each received job's receipt verifies now (None: unknown)."""
        for key, ok in verdicts.items():
            if ok is None:
                self.verdicts.pop(key, None)
            elif key in self.view.rows:
                self.verdicts[key] = ok
        self.refresh()

    def set_checks(self, marks: Mapping[str, str | None]) -> None:
        """Each job's check marks (None: none to show)."""
        for key, shown in marks.items():
            if shown is None:
                self.checks.pop(key, None)
            elif key in self.view.rows:
                self.checks[key] = shown
        self.refresh()

    def show_check_column(self, shown: bool) -> None:
        if shown != self.check_column:
            self.check_column = shown
            self._strips.clear()
            self.refresh()

    def select(self, key: str) -> bool:
        """Put the cursor on `key` if it is in view."""
        index = self.view.index_of(key)
        if index is None:
            return False
        self._move_to(index)
        return True

    # -- actions -------------------------------------------------------------------------
    def action_cursor(self, delta: int) -> None:
        index = self.cursor_index
        self._move_to(0 if index is None else index + delta)

    def action_page(self, direction: int) -> None:
        index = self.cursor_index or 0
        self.scroll_to(y=self.scroll_y + direction * self.page, animate=False, immediate=True, force=True)
        self._move_to(index + direction * self.page)

    def action_edge(self, end: int) -> None:
        self._move_to(len(self.view) - 1 if end else 0)

    def action_mark(self) -> None:
        key = self.cursor_key
        if key is None:
            return
        self.marks.symmetric_difference_update({key})
        self.post_message(self.MarksChanged(len(self.marks)))
        self._show_position()
        self.action_cursor(1)

    def clear_marks(self) -> None:
        if self.marks:
            self.marks.clear()
            self.post_message(self.MarksChanged(0))
            self._show_position()
            self.refresh()

    def on_click(self, event: events.Click) -> None:
        if event.y >= 1:
            self._move_to(int(self.scroll_y) + event.y - 1)

    # -- rendering -----------------------------------------------------------------------
    def _columns(self) -> list[int]:
        """Widths of mark, key, state, (checks,) age, attempts, worker; the instruction takes
        the rest. They follow the list's own width only, so the header and every row agree."""
        width = self.scrollable_content_region.width
        key = 33 if self.wide_keys else 13
        worker = 18 if width >= 110 else 10
        return [2, key, 11, *([4] if self.check_column else []), 5, 4, worker]

    def _cells(self, cells: list[tuple[str, Style]], width: int) -> Strip:
        widths = self._columns()
        segments: list[Segment] = []
        used = 0
        for i, (text, style) in enumerate(cells):
            w = widths[i] if i < len(widths) else max(0, width - used)
            if w <= 0:
                break
            cell = _fit(text, w - 1) + " " if i < len(widths) else _fit(text, w)
            segments.append(Segment(cell, style))
            used += w
        return Strip(segments, cell_len("".join(s.text for s in segments)))

    def _styles(self) -> dict[str, Style]:
        base = self.rich_style
        styles = {"base": base}
        for name in ("header", "cursor", "marked", "dim", "empty", "warning", "pass", "fail", "busy"):
            styles[name] = base + self.get_component_rich_style(f"jobtable--{name}")
        return styles

    def set_protected(self, patterns: tuple[str, ...]) -> None:
        """Mark the jobs that may write a path `patterns` protects."""
        if patterns != self.protected:
            self.protected = patterns
            self._strips.clear()
            self.refresh()

    def set_plane(self, queue: dict[str, int], overlapping: frozenset[str]) -> None:
        """The ready jobs' places in the apply queue, and the jobs that overlap another."""
        if (queue, overlapping) != (self.queue, self.overlapping):
            self.queue, self.overlapping = queue, overlapping
            self._strips.clear()
            self.refresh()

    def _flag(self, row: JobRow) -> str:
        """The marks before a row's instruction: its place in the apply queue, an overlap,
        a protected path."""
        at = self.queue.get(row.key)
        marks = [f"#{at}"] if at else []
        marks += [OVERLAP_MARK] if row.key in self.overlapping else []
        marks += [PROTECTED_MARK] if flagged(row.allowed_paths, self.protected) else []
        return "".join(f"{m} " for m in marks)

    def render_lines(self, crop: Region) -> list[Strip]:
        self._line_styles = self._styles()  # once per frame, not once per line
        # A frame drawn while the app holds updates back (as it does until it has
        # mounted) never reaches the terminal.
        if not self._rows_drawn and len(self.view) and not getattr(self.app, "_batch_count", 0):
            self._rows_drawn = True
            self.post_message(self.FirstRowsDrawn())
        if len(self._strips) > STRIP_CACHE:
            self._strips.clear()
        self._ask_for_window()
        return super().render_lines(crop)

    def in_view(self) -> list[str]:
        top = int(self.scroll_y)
        return [self.view.key_at(i) for i in range(top, min(len(self.view), top + self.page))]

    def unread_in_view(self) -> list[str]:
        """The jobs in view whose rows are not read in full yet (attempts included)."""
        rows = self.view.rows
        return [k for k in self.in_view() if (row := rows.get(k)) is None or row.attempts is None]

    def _ask_for_window(self) -> None:
        """Say which jobs are in view, and ask for those not read in full, when either changed."""
        window, unread = self.in_view(), self.unread_in_view()
        if (unread and unread != self._asked) or window != self._window:
            self.post_message(self.WindowShown(unread, window))
        self._asked, self._window = unread, window

    def notify_style_update(self) -> None:
        self._strips.clear()
        super().notify_style_update()

    def _show_position(self) -> None:
        index = self.cursor_index
        where = (
            f"{index + 1:,} of {len(self.view):,}" if index is not None else counted(len(self.view), "job")
        )
        marks = f"{len(self.marks)} marked · " if self.marks else ""
        self.position = f" {marks}{where} "
        self.refresh(Region(0, 0, self.size.width, 1))

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        styles = self._line_styles or self._styles()
        base = styles["base"]
        if y == 0:
            head = styles["header"]
            names = ["", "KEY", "STATE", *(["CHK"] if self.check_column else []), "AGE", "ATT", "WORKER"]
            names.append("INSTRUCTION")
            where = self.position
            strip = self._cells([(n, head) for n in names], max(0, width - cell_len(where)))
            return Strip.join([strip, Strip([Segment(where, head)])]).crop_extend(0, width, head)
        index = int(self.scroll_y) + y - 1
        if not len(self.view) and 0 <= y - 2 < len(self.empty):
            line, warns = self.empty[y - 2]
            text = "  " + line
            style = styles["warning" if warns else "empty"]
            return Strip([Segment(_fit(text, width), style)]).crop_extend(0, width, base)
        if index >= len(self.view):
            return Strip.blank(width, base)
        key = self.view.key_at(index)
        row = self.view.rows.get(key) or JobRow(key=key, state=self.view.where[key])
        cursor = row.key == self.cursor_key
        created = row.created_at
        when = age(time.time() - created) if created else "-"
        marked = row.key in self.marks
        verdict = self.verdicts.get(row.key) if row.state is State.RECEIVED else None
        checks = self.checks.get(row.key, "") if self.check_column else None
        ident = (row, width, cursor, marked, when, self.has_focus, verdict, checks)
        hit = self._strips.get(ident)
        if hit is not None:
            return hit
        if cursor:
            # One style across the whole row: the theme's cursor, readable on its background.
            style = dim = mark_style = state_style = summary_style = styles["cursor"]
        else:
            style, dim = base, styles["dim"]
            mark_style = style + styles["marked"] if marked else style
            state_style = style + STATE_STYLES[row.state]
            summary_style = state_style if not row.instruction else style
        cells = [
            ("●" if marked else " ", mark_style),
            (row.key[: self._columns()[1] - 1], mark_style),  # a prefix, as git shows commit ids
            (row.state.value + VERDICT[verdict], state_style),
            *(
                [(checks, styles["cursor"] if cursor else _checks_style(checks, styles))]
                if checks is not None
                else []
            ),
            (when, dim),
            ("" if row.attempts is None else str(row.attempts or "-"), dim),
            (visible(row.worker, tab=" ") or "-", dim),
            (self._flag(row) + summary_line(row), summary_style),
        ]
        strip = self._strips[ident] = self._cells(cells, width).extend_cell_length(width, style)
        return strip


def _checks_style(marks: str, styles: dict[str, Style]) -> Style:
    """A job's check marks in one colour: a failure first, then one running or stale."""
    if "✘" in marks:
        return styles["fail"]
    if "●" in marks or "○" in marks:
        return styles["busy"]
    if marks and set(marks) == {"✔"}:
        return styles["pass"]
    return styles["dim"]


def _fit(text: str, width: int) -> str:
    """`text` in exactly `width` cells: padded, or cut with a final `…`."""
    if cell_len(text) <= width:
        return set_cell_size(text, width)
    return set_cell_size(text, max(0, width - 1)) + "…" if width > 0 else ""
