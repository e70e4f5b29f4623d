"""Fixtures for the board's Pilot tests: a demo repository with a job in every state."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
import time_machine
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.review import sandbox
from core.store.layout import Layout
from core.store.lease import new_lease, read_lease, write_lease
from tui.demo import Demo, build_demo

# The instant a frozen demo is built at; its board is opened 90 seconds later.
BUILT_AT = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
OPENED_AFTER = 90


@pytest.fixture
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Demo]:
    """A sandbox built by `genjob demo`'s own code, its lease holder stopped afterwards."""
    made = build_demo(tmp_path / "demo")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(made.config_home))
    try:
        yield made
    finally:
        made.stop()


@contextlib.contextmanager
def frozen_demo(where: Path) -> Iterator[Demo]:
    """The demo with everything it shows fixed, for screenshots that must not change from
    run to run: the clock (stopped, in UTC), the worker keys (from a fixed seed), the
    folder's name (`calc`) and how long checks take. Its lease holder is a real process,
    whose times stay off screen."""
    seeds = (hashlib.sha256(b"genjob-snapshot-%d" % i).digest() for i in itertools.count())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TZ", "UTC")
        time.tzset()
        # Checks take what they take; their records say they took no time at all.
        mp.setattr(sandbox, "time", SimpleNamespace(monotonic=lambda: 0.0))
        mp.setattr(
            Ed25519PrivateKey,
            "generate",
            staticmethod(lambda: Ed25519PrivateKey.from_private_bytes(next(seeds))),
        )
        with time_machine.travel(BUILT_AT, tick=False) as clock:
            made = build_demo(where / "calc")
            mp.setenv("XDG_CONFIG_HOME", str(made.config_home))
            hold_on_the_frozen_clock(made)
            clock.shift(OPENED_AFTER)
            try:
                yield made
            finally:
                made.stop()
    time.tzset()


def hold_on_the_frozen_clock(demo: Demo) -> None:
    """Hold the running job's lease from this process, heartbeat at the frozen instant.

    The demo's holder heartbeats on the real clock, months past the frozen one, and a
    heartbeat that far ahead of the clock keeps no job running (`core.model.freshness`)."""
    demo.stop()
    layout = Layout(demo.root)
    key = demo.keys["running"]
    held = read_lease(layout, key)
    assert held is not None, "the demo's holder claimed the running job"
    write_lease(layout, key, new_lease(held.worker, held.token, ttl=3600.0))


@pytest.fixture(scope="module")
def built_still_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    with frozen_demo(tmp_path_factory.mktemp("still")) as made:
        yield made


@pytest.fixture
def still_demo(built_still_demo: Demo, monkeypatch: pytest.MonkeyPatch) -> Demo:
    """One frozen demo for every screenshot that changes nothing on disk, seen with its
    own config folder (its keys, pins and seals), as `genjob demo` shows it."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(built_still_demo.config_home))
    return built_still_demo


@pytest.fixture
def fresh_frozen_demo(tmp_path: Path) -> Iterator[Demo]:
    """A frozen demo of its own, for a screenshot taken after a change (a ship)."""
    with frozen_demo(tmp_path) as made:
        yield made
