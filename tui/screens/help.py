"""`?`: every key of the board with what it does, then the reference's topics.

A list on the left picks a page: the keys first, then each topic shipped in
`tui/reference/`, shown in a `MarkdownViewer` with its table of contents. The screen only
reads those files; `genjob help TOPIC` prints the same ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import ContentSwitcher, MarkdownViewer, OptionList, Static
from textual.widgets.option_list import Option

from tui.reference import TOPICS, topic_text
from tui.widgets.key_bar import Hint, KeyBar

INTRO = (
    "A job moves queued → running → received → applied or rejected; orphaned, failed, stale, "
    "invalid and inconsistent are derived from what is on disk. Every key is one core operation; "
    "mark several jobs with space first to act on all of them. The arrow and page keys move, "
    "and so do j, k, g and G."
)
KEYS = "keys"


def marks_legend() -> str:
    """What the list's marks mean, from the marks the list draws."""
    from core.model.standing import CheckState
    from tui.render import CHECK_MARKS

    names = {
        CheckState.PASSED: "passed",
        CheckState.FAILED: "failed",
        CheckState.RUNNING: "running",
        CheckState.STALE: "stale",
        CheckState.NOT_RUN: "not run",
    }
    checks = ", ".join(f"{CHECK_MARKS[s][0]} {names[s]}" for s in names)
    return (
        "In the list, a received job's state ends in its receipt's verification (RECEIVED ✔ verifies, "
        f"RECEIVED ✘ does not); CHK has one mark per check, in the config's order: {checks}. "
        "⚑: the job may write a protected path. #1, #2…: the place genjob apply --ready would take "
        "the job in now (p shows only those, in that order). ∩: the job's allowed paths overlap another "
        "job in flight (its Job tab names each, with the paths)."
    )


# Below this many columns the topic list and the table of contents take less room.
NARROW = 100


def screen_keys(bindings: Sequence[BindingType]) -> list[Binding]:
    """A screen's keys as its help lists them: each with what it does, `?` itself left out."""
    return [b for b in bindings if isinstance(b, Binding) and b.description and b.action != "help"]


class HelpScreen(Screen[None]):
    DEFAULT_CSS = """
    HelpScreen {
        layout: vertical;
    }
    HelpScreen #help-title {
        height: 1;
        padding: 0 1;
        background: $boost;
        text-style: bold;
    }
    HelpScreen #help-main {
        height: 1fr;
    }
    HelpScreen #help-topics {
        width: 18;
        height: 1fr;
        border: none;
        border-right: tall $primary 40%;
    }
    HelpScreen #help-pages {
        width: 1fr;
        height: 1fr;
    }
    HelpScreen #help-keys-page {
        padding: 0 1;
    }
    HelpScreen MarkdownTableOfContents {
        max-width: 32;
    }
    HelpScreen.narrow #help-topics {
        width: 15;
    }
    HelpScreen.narrow MarkdownTableOfContents {
        max-width: 20;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "close", "Close", id="help.close")
    ]

    def __init__(self, bindings: list[Binding], readonly: bool) -> None:
        super().__init__()
        self.bindings = bindings
        self.readonly = readonly
        self.page = KEYS

    def compose(self) -> ComposeResult:
        yield Static(Text("genjob help: the board's keys, then the reference"), id="help-title")
        with Horizontal(id="help-main"):
            yield OptionList(Option(KEYS, id=KEYS), *(Option(t, id=t) for t in TOPICS), id="help-topics")
            with ContentSwitcher(initial="help-keys-page", id="help-pages"):
                with VerticalScroll(id="help-keys-page"):
                    note = "\n\nREAD-ONLY: the keys that change anything are off, and not listed."
                    intro = f"{INTRO}\n\n{marks_legend()}{note if self.readonly else ''}\n"
                    yield Static(Text(intro), id="help-intro")
                    yield Static(self.keys_table(), id="help-keys")
                yield MarkdownViewer(show_table_of_contents=True, id="help-topic")
        yield KeyBar(id="help-keybar")

    def keys_table(self) -> Table:
        table = Table(box=None, show_header=False, padding=(0, 2, 0, 0), expand=True)
        widest = max((len(b.key_display or b.key) for b in self.bindings), default=1)
        table.add_column(style="bold cyan", no_wrap=True, min_width=widest)
        table.add_column(ratio=1)
        for b in self.bindings:
            table.add_row(b.key_display or b.key, Text(b.tooltip or b.description))
        return table

    def on_mount(self) -> None:
        self.query_one(KeyBar).show(
            [Hint("↑↓", "Topic", "focus_topics"), Hint("tab", "Page, contents", "app.focus_next")],
            [Hint("esc", "Back to the board", "close")],
        )
        self.query_one(OptionList).focus()

    def on_resize(self) -> None:
        self.set_class(self.size.width < NARROW, "narrow")

    async def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id is not None:
            await self.show_page(event.option.id)

    async def show_page(self, page: str) -> None:
        """The keys, or one topic's Markdown read from the shipped file."""
        self.page = page
        switcher = self.query_one(ContentSwitcher)
        if page == KEYS:
            switcher.current = "help-keys-page"
            return
        viewer = self.query_one(MarkdownViewer)
        await viewer.document.update(topic_text(page))
        viewer.scroll_home(animate=False)
        switcher.current = "help-topic"

    def action_focus_topics(self) -> None:
        self.query_one(OptionList).focus()

    def action_close(self) -> None:
        self.dismiss(None)
