"""genjob's reference: one Markdown file per topic, shipped inside the package.

`genjob help` and the board's help (`?`) only read these files. Each opens with a `# `
title, a blank line, and one line on what it covers: that line is the topic's summary.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import BadInput, NotFound
from core.model.terminal import visible

HERE = Path(__file__).resolve().parent

#: The topics in the order a newcomer reads them.
TOPICS = (
    "commands",
    "dashboard",
    "hosts",
    "checks",
    "trust",
    "threat-model",
    "audit",
    "agents",
    "formats",
    "architecture",
    "benchmarks",
)


def topic_file(topic: str) -> Path:
    return HERE / f"{topic}.md"


def topic_text(topic: str) -> str:
    """The topic's Markdown, as shipped."""
    return topic_file(topic).read_text(encoding="utf-8")


def summary(topic: str) -> str:
    """The topic's one line on what it covers: the paragraph after its title."""
    paragraphs = topic_text(topic).split("\n\n", 2)
    return paragraphs[1].strip() if len(paragraphs) > 1 else ""


def find_topic(given: str) -> str:
    """The topic named `given`, or the one topic it is the start of."""
    wanted = given.strip().lower()
    if wanted in TOPICS:
        return wanted
    starting = [t for t in TOPICS if wanted and t.startswith(wanted)]
    if len(starting) == 1:
        return starting[0]
    known = ", ".join(TOPICS)
    if starting:
        raise BadInput(f"help: {visible(given)!r} could be {' or '.join(starting)}; the topics: {known}")
    raise NotFound(f"help: no topic {visible(given)!r}; the topics: {known}")
