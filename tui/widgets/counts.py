"""The state counts across the top of the board; click one (or press its digit) to filter.

After them, the jobs `genjob apply --ready` would apply now (`p`, or a click, shows only
those), once the board has read the apply plane.

A job not read yet counts in the state its file names give it (queue/ is QUEUED): the
widest forms say how many are counted so, the others end in `≈` while any are.
"""

from __future__ import annotations

from collections import Counter

from rich.style import Style
from rich.text import Text
from textual import events
from textual.message import Message
from textual.widget import Widget

from core.model.lifecycle import STATE_ORDER, State
from tui.text import SHORT, STATE_STYLES, TINY, counted

# The digit that toggles each state's filter, in the order the bar shows them.
DIGITS = {state: str((i + 1) % 10) for i, state in enumerate(STATE_ORDER)}
FULL = {state: state.value for state in STATE_ORDER}
# The ready filter's key.
READY_KEY = "p"
# The bar's forms, widest first: labels (None: digits and counts only), whether states
# with no job show, what separates two states (" │ " puts the digit apart, else it is
# joined to its label as "4:RCV"), the total, and numbers shortened (12k).
FORMS: list[tuple[dict[State, str] | None, bool, str, bool, bool]] = [
    (FULL, True, " │ ", True, False),
    (SHORT, False, " │ ", True, False),
    (SHORT, False, "  ", False, False),
    (TINY, False, "  ", False, False),
    (TINY, False, " ", False, False),
    (TINY, False, " ", False, True),
    (None, False, " ", False, True),
]


def _number(n: int) -> str:
    """A count in at most four cells: 999, 1.2k, 12k, 1.2M."""
    if n < 1000:
        return str(n)
    for unit, size in (("M", 1_000_000), ("k", 1000)):
        if n >= size:
            value = n / size
            return f"{value:.1f}{unit}" if value < 10 else f"{int(value)}{unit}"
    return str(n)


class CountsBar(Widget):
    DEFAULT_CSS = """
    CountsBar { height: 1; background: $panel; }
    """

    class Toggled(Message):
        """A state's chip was clicked."""

        def __init__(self, state: State) -> None:
            super().__init__()
            self.state = state

    class ReadyToggled(Message):
        """The ready chip was clicked."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.ready: int | None = None  # the jobs apply --ready would apply; None: not read yet
        self.ready_on = False
        self._ready_span: tuple[int, int] | None = None
        self.counts: Counter[State] = Counter()
        self.selected: frozenset[State] = frozenset()
        self.total = 0
        self.unread = 0  # jobs counted by their names alone
        self._spans: list[tuple[int, int, State]] = []

    def set_counts(self, counts: Counter[State], selected: frozenset[State], unread: int = 0) -> None:
        self.counts, self.selected, self.unread = Counter(counts), selected, unread
        self.total = sum(self.counts.values())
        self.refresh()

    def set_ready(self, ready: int | None, on: bool) -> None:
        """How many jobs apply --ready would apply now, and whether only those show."""
        self.ready, self.ready_on = ready, on
        self.refresh()

    def render(self) -> Text:
        """The widest form that fits: full names and every state, then short names, then
        three letters, then compact numbers. Every form keeps each state's digit and count."""
        width = self.size.width
        labelled = [f for f in range(len(FORMS)) if FORMS[f][0] is not None]
        bare = [f for f in range(len(FORMS)) if FORMS[f][0] is None]
        # The states' labels outrank the ready chip: every labelled form is tried with the
        # chip, then without it, before a form drops the labels.
        tries = [(f, True) for f in labelled] + [(f, False) for f in labelled] + [(f, True) for f in bare]
        for n, (form, chip) in enumerate(tries):
            text, spans, ready = self._form(form, chip)
            if text.cell_len <= width or n == len(tries) - 1:
                self._spans, self._ready_span = spans, ready
                return text
        raise AssertionError("unreachable")

    def _form(
        self, form: int, chip: bool = True
    ) -> tuple[Text, list[tuple[int, int, State]], tuple[int, int] | None]:
        labels, zeros, sep, total, compact = FORMS[form]
        bars = sep == " │ "
        text = Text(" ", no_wrap=True, overflow="ellipsis")
        spans: list[tuple[int, int, State]] = []
        for state in STATE_ORDER:
            n = self.counts.get(state, 0)
            chosen = state in self.selected
            if not zeros and not n and not chosen:
                continue
            style = STATE_STYLES[state] + (Style(reverse=True) if chosen else Style())
            if not n and not chosen:
                style = Style(dim=True)
            if spans:
                text.append(sep, Style(dim=True))
            start = text.cell_len
            text.append(DIGITS[state], Style(dim=True))
            text.append(" " if bars else ":", Style(dim=True))
            if labels is not None:
                text.append(f"{labels[state]} ", style)
            text.append(_number(n) if compact else f"{n:,}", Style(bold=bool(n)))
            spans.append((start, text.cell_len, state))
        ready = self._ready_chip(form, text) if chip else None
        if total:
            unread = f", {self.unread:,} by name only" if self.unread else ""
            text.append(
                f" │ {counted(self.total, 'job')}{', filtered' if self.selected else ''}{unread}",
                Style(dim=True),
            )
        elif self.unread:
            text.append(" ≈", Style(dim=True))
        return text, spans, ready

    def _ready_chip(self, form: int, text: Text) -> tuple[int, int] | None:
        """Append the ready chip to `text` in `form`'s style; where it is, or None (not read yet)."""
        if self.ready is None:
            return None
        labels, _, sep, _, compact = FORMS[form]
        bars = sep == " │ "
        text.append(sep, Style(dim=True))
        start = text.cell_len
        text.append(READY_KEY + (" " if bars else ":"), Style(dim=True))
        lit = bool(self.ready) or self.ready_on
        style = Style(color="green", bold=True, reverse=self.ready_on) if lit else Style(dim=True)
        if labels is not None:
            label = "ready" if labels is FULL else "RDY" if labels is SHORT else "rdy"
            text.append(f"{label} ", style)
        text.append(_number(self.ready) if compact else f"{self.ready:,}", Style(bold=bool(self.ready)))
        return start, text.cell_len

    def on_click(self, event: events.Click) -> None:
        if self._ready_span is not None and self._ready_span[0] <= event.x < self._ready_span[1]:
            self.post_message(self.ReadyToggled())
            return
        for start, end, state in self._spans:
            if start <= event.x < end:
                self.post_message(self.Toggled(state))
                return
