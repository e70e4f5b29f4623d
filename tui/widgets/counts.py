"""The state counts across the top of the board; click one (or press its digit) to filter."""

from __future__ import annotations

from collections import Counter

from rich.style import Style
from rich.text import Text
from textual import events
from textual.message import Message
from textual.widget import Widget

from core.lifecycle import STATE_ORDER, State
from tui.text import SHORT, STATE_STYLES, TINY

# The digit that toggles each state's filter, in the order the bar shows them.
DIGITS = {state: str((i + 1) % 10) for i, state in enumerate(STATE_ORDER)}


class CountsBar(Widget):
    DEFAULT_CSS = """
    CountsBar { height: 1; background: $panel; }
    """

    class Toggled(Message):
        """A state's chip was clicked."""

        def __init__(self, state: State) -> None:
            super().__init__()
            self.state = state

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.counts: Counter[State] = Counter()
        self.selected: frozenset[State] = frozenset()
        self.total = 0
        self._spans: list[tuple[int, int, State]] = []

    def set_counts(self, counts: Counter[State], selected: frozenset[State]) -> None:
        self.counts, self.selected = Counter(counts), selected
        self.total = sum(self.counts.values())
        self.refresh()

    def render(self) -> Text:
        width = self.size.width
        short, tiny = width < 150, width < 110
        text = Text(no_wrap=True, overflow="ellipsis")
        self._spans = []
        for state in STATE_ORDER:
            n = self.counts.get(state, 0)
            chosen = state in self.selected
            if short and not n and not chosen:
                continue
            label = TINY[state] if tiny else SHORT[state] if short else state.value
            style = STATE_STYLES[state] + (Style(reverse=True) if chosen else Style())
            if not n and not chosen:
                style = Style(dim=True)
            start = text.cell_len
            if not tiny:
                text.append(f" {DIGITS[state]}", Style(dim=True))
            text.append(f" {label} ", style)
            text.append(f"{n:,}", Style(bold=bool(n)))
            self._spans.append((start, text.cell_len, state))
            text.append(" " if tiny else " │", Style(dim=True))
        if not tiny:
            text.append(f" {self.total:,} jobs{', filtered' if self.selected else ''}", Style(dim=True))
        return text

    def on_click(self, event: events.Click) -> None:
        for start, end, state in self._spans:
            if start <= event.x < end:
                self.post_message(self.Toggled(state))
                return
