"""tui.services.feed: which jobs the watched paths under `.gen/` name."""

from __future__ import annotations

from pathlib import Path

from core.store.layout import Layout
from tui.services import feed
from tui.services.feed import keys_from_paths


def test_keys_from_paths(repo: Layout) -> None:
    key = "e" * 32
    paths = [
        repo.queue / f"{key}.json",
        repo.running / f"{key}.lease",
        repo.root / "src" / f"{'f' * 32}.json",
        repo.gen / "events.jsonl",
        str(repo.attempts / f"{'a' * 32}.jsonl"),
        repo.candidate("c" * 32, 2) / "receipt.json",
        repo.candidates / ("d" * 32),
    ]
    assert keys_from_paths(repo, paths) == {key, "a" * 32, "c" * 32, "d" * 32}


def test_the_dashboard_topic_gives_the_queue_size_read_whole() -> None:
    topic = (Path(feed.__file__).parents[1] / "reference" / "dashboard.md").read_text()
    assert f"to {feed.READ_WHOLE:,} jobs is read whole" in " ".join(topic.split())
