"""The key hints along the bottom: what the keys do here, most useful first.

Unlike a footer that lists every binding and clips the end, the bar shows the hints it
is given in their order and drops the least useful ones that do not fit; the ones it
is told to keep (`? Help`, `q Quit`) always show, at the right. A click runs a hint's
action on the screen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual import events
from textual.widget import Widget


@dataclass(frozen=True)
class Hint:
    key: str  # as shown: "a", "?", "enter"
    label: str
    action: str  # run on the screen when clicked


class KeyBar(Widget):
    COMPONENT_CLASSES: ClassVar[set[str]] = {"keybar--key", "keybar--label"}
    DEFAULT_CSS = """
    KeyBar { height: 1; background: $footer-background; }
    KeyBar > .keybar--key { color: $footer-key-foreground; text-style: bold; }
    KeyBar > .keybar--label { color: $footer-description-foreground; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.hints: list[Hint] = []
        self.kept: list[Hint] = []
        self._spans: list[tuple[int, int, Hint]] = []

    def show(self, hints: list[Hint], kept: list[Hint]) -> None:
        """Show `hints` (most useful first) and, always, `kept`."""
        if (hints, kept) != (self.hints, self.kept):
            self.hints, self.kept = hints, kept
            self.refresh()

    def shown(self) -> list[Hint]:
        """The hints the bar shows at its present width, in order."""
        return [hint for _, _, hint in self._spans]

    def _chip(self, text: Text, hint: Hint, key: Style, label: Style, at: int) -> None:
        start = at + text.cell_len
        text.append(f" {hint.key}", key)
        text.append(f" {hint.label} ", label)
        self._spans.append((start, at + text.cell_len, hint))

    def render(self) -> Text:
        key = self.get_component_rich_style("keybar--key")
        label = self.get_component_rich_style("keybar--label")
        width = self.size.width
        self._spans = []
        right = Text(no_wrap=True)
        right_spans: list[tuple[int, int, Hint]] = []
        for hint in self.kept:
            start = right.cell_len
            right.append(f" {hint.key}", key)
            right.append(f" {hint.label} ", label)
            right_spans.append((start, right.cell_len, hint))
        room = width - right.cell_len
        left = Text(no_wrap=True)
        for hint in self.hints:
            size = len(f" {hint.key} {hint.label} ")
            if left.cell_len + size > room:
                break
            self._chip(left, hint, key, label, 0)
        pad = max(0, room - left.cell_len)
        offset = left.cell_len + pad
        self._spans += [(s + offset, e + offset, h) for s, e, h in right_spans]
        return Text.assemble(left, " " * pad, right, no_wrap=True, overflow="crop")

    async def on_click(self, event: events.Click) -> None:
        for start, end, hint in self._spans:
            if start <= event.x < end:
                await self.screen.run_action(hint.action)
                return
