"""Fixtures for the board's Pilot tests: a demo repository with a job in every state."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tui.demo import Demo, build_demo


@pytest.fixture
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Demo]:
    """A sandbox built by `genjob demo`'s own code, its lease holder stopped afterwards."""
    made = build_demo(tmp_path / "demo")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(made.config_home))
    try:
        yield made
    finally:
        made.stop()
