"""`genjob help [TOPIC]`: the reference shipped inside the package, without the board.

In a terminal a topic is drawn by Rich's Markdown renderer; piped or redirected it is
printed as the plain Markdown it is, so `genjob help hosts | less` and `> hosts.md` get
the file's own text. Nothing here loads Textual.
"""

from __future__ import annotations

import sys

import click

from tui.cli.output import say
from tui.reference import TOPICS, find_topic, summary, topic_text


@click.command("help")
@click.argument("topic", required=False)
def help_cmd(topic: str | None) -> None:
    """The reference: with no TOPIC, the topics; with one (or a unique start of one), that topic."""
    # A reader that leaves early (`genjob help hosts | head`) ends it quietly: click
    # turns the broken pipe into exit 1.
    if topic is None:
        say(topic_list())
    elif sys.stdout.isatty():
        show_in_terminal(topic_text(find_topic(topic)))
    else:
        say(topic_text(find_topic(topic)), nl=False)


def topic_list() -> str:
    width = max(len(t) for t in TOPICS) + 2
    lines = [f"  {t:{width}}{summary(t)}" for t in TOPICS]
    return "\n".join(
        [
            "genjob's reference: `genjob help TOPIC` prints a topic (a unique start of its name will do).",
            "",
            *lines,
        ]
    )


def show_in_terminal(markdown: str) -> None:
    """The topic drawn for a terminal: headings, tables and code blocks laid out."""
    from rich.console import Console
    from rich.markdown import Markdown

    Console(highlight=False).print(Markdown(markdown, hyperlinks=False))
