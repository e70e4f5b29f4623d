"""The board's help (`?`): the keys first, then every topic of the reference, each opened
in a MarkdownViewer with its table of contents (every topic at 120x35; at 80x24 the
longest, as a topic's contents are its headings whatever the size)."""

from __future__ import annotations

import pytest
from boardkit import Driver, plain, run_board
from textual.widgets import ContentSwitcher, MarkdownViewer, OptionList, Static

from tui.demo import Demo
from tui.reference import TOPICS, topic_text
from tui.screens.help import KEYS, HelpScreen


def title_of(topic: str) -> str:
    return topic_text(topic).split("\n", 1)[0].removeprefix("# ")


def headings_of(topic: str) -> list[str]:
    """The topic's headings as plain text, outside its code blocks."""
    headings: list[str] = []
    in_code = False
    for line in topic_text(topic).splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            headings.append(line.lstrip("#").strip().replace("`", ""))
    return headings


async def open_help(d: Driver) -> HelpScreen:
    await d.press("question_mark")
    screen = await d.showing(HelpScreen)
    assert isinstance(screen, HelpScreen)
    return screen


async def pick(d: Driver, screen: HelpScreen, page: str) -> MarkdownViewer:
    """Highlight `page` in the list, and wait for its topic's contents to be drawn."""
    topics = screen.query_one(OptionList)
    topics.highlighted = topics.get_option_index(page)
    viewer = screen.query_one(MarkdownViewer)

    def shown() -> bool:
        contents = viewer.table_of_contents.table_of_contents or []
        return screen.page == page and bool(contents) and contents[0][1] == title_of(page)

    await d.until(shown, f"the {page} topic and its table of contents")
    return viewer


async def test_the_help_lists_the_keys_first_then_every_topic(demo: Demo) -> None:
    async with run_board(demo.root) as d:
        screen = await open_help(d)
        topics = screen.query_one(OptionList)
        assert [topics.get_option_at_index(i).id for i in range(topics.option_count)] == [KEYS, *TOPICS]
        assert screen.query_one(ContentSwitcher).current == "help-keys-page"
        intro = plain(screen.query_one("#help-intro", Static))
        assert "and so do j, k, g and G" in intro
        assert "RECEIVED ✔ verifies" in intro and "✔ passed, ✘ failed, ● running, ○ stale, · not run" in intro


LONGEST = max(TOPICS, key=lambda topic: len(topic_text(topic)))


@pytest.mark.parametrize(
    ("size", "topics"),
    [pytest.param((80, 24), (LONGEST,), id="80x24"), pytest.param((120, 35), TOPICS, id="120x35")],
)
async def test_topics_open_with_their_table_of_contents(
    size: tuple[int, int], topics: tuple[str, ...], demo: Demo
) -> None:
    async with run_board(demo.root, size) as d:
        screen = await open_help(d)
        for topic in topics:
            viewer = await pick(d, screen, topic)
            assert screen.query_one(ContentSwitcher).current == "help-topic"
            assert viewer.show_table_of_contents and viewer.table_of_contents.display
            headings = [entry[1] for entry in viewer.table_of_contents.table_of_contents or []]
            assert headings == headings_of(topic), f"{topic}: the contents are its headings"
        await pick_keys(d, screen)


async def pick_keys(d: Driver, screen: HelpScreen) -> None:
    screen.query_one(OptionList).highlighted = 0
    switcher = screen.query_one(ContentSwitcher)
    await d.until(lambda: switcher.current == "help-keys-page", "the keys again")


async def test_arrows_pick_a_topic_and_escape_goes_back_to_the_board(demo: Demo) -> None:
    async with run_board(demo.root, (80, 24)) as d:
        screen = await open_help(d)
        await d.press("down")
        await d.until(lambda: screen.page == TOPICS[0], "the first topic")
        await d.press("tab")  # into the topic: its contents, then the text
        await d.press("q")
        await d.until(lambda: not isinstance(d.screen, HelpScreen), "the help to close")
        assert d.screen is d.board


async def test_a_read_only_boards_help_has_every_topic_too(demo: Demo) -> None:
    async with run_board(demo.root, readonly=True) as d:
        screen = await open_help(d)
        await pick(d, screen, "threat-model")
        assert "READ-ONLY" in plain(screen.query_one("#help-intro", Static))
