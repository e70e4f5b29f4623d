"""Fixtures for the board's Pilot tests: a demo repository with a job in every state.

The demo is built once per test process, by `genjob demo`'s own code, and each test gets
a copy of it: a folder of its own, the demo's config folder with it, the operator's pins
carried to the copy's path (another path is another repository to the operator), and
the running job held by the test's own process (or, for `live_demo`, by a lease holder
of its own).
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
import time_machine
from corekit import carry_pins
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.review import sandbox
from core.store.check_records import read_record, write_record
from core.store.layout import Layout
from core.store.lease import new_lease, read_lease, write_lease
from tui.demo import CONFIG_DIR, Demo, build_demo

# The instant a frozen demo is built at; its board is opened 90 seconds later.
BUILT_AT = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
OPENED_AFTER = 90
# How long a copy's running job stays held by the test that holds it (seconds).
HELD_FOR = 3600.0


@dataclass
class Seeds:
    """Worker keys from a fixed sequence of seeds; `used` says how many were drawn."""

    used: int = 0

    def key(self) -> Ed25519PrivateKey:
        seed = hashlib.sha256(b"genjob-snapshot-%d" % self.used).digest()
        self.used += 1
        return Ed25519PrivateKey.from_private_bytes(seed)


@dataclass
class Template:
    """A demo built once, to be copied; `seeds` is how many fixed seeds building it drew."""

    demo: Demo
    seeds: int = 0


def copy_demo(template: Demo, where: Path, monkeypatch: pytest.MonkeyPatch) -> Demo:
    """`template` copied to `where` and seen as `genjob demo` shows it: with the copy's own
    config folder (its keys, pins and seals), which pins the copy as it pinned the template.
    Nothing holds the copy's running job yet."""
    shutil.copytree(template.root, where, symlinks=True)
    root = where.resolve()
    made = Demo(root, root / CONFIG_DIR, list(template.summary), dict(template.keys))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(made.config_home))
    carry_pins(template.root, made.root)
    relocate_check_output(Layout(made.root), template.root)
    return made


def relocate_check_output(layout: Layout, built_at: Path) -> None:
    """Rewrite (and seal again) each check record of the copy at `layout` as if its check had
    run there: a failing check's output names the files it ran on by their path, which the
    board shows from the repository's root."""
    for path in sorted(layout.gen.glob("checks/*/*.json")):
        record = read_record(layout, path.parent.name, path.stem)
        assert record is not None, f"{path} is a check record"
        tail = record.tail.replace(str(built_at), str(layout.root))
        write_record(layout, record.model_copy(update={"tail": tail}))


def hold_from_here(demo: Demo) -> None:
    """Hold the running job's lease from this process, with a heartbeat now (the clock's
    now: a frozen one, under `frozen`)."""
    layout = Layout(demo.root)
    key = demo.keys["running"]
    held = read_lease(layout, key)
    assert held is not None, "the demo's holder claimed the running job"
    write_lease(layout, key, new_lease(held.worker, held.token, ttl=HELD_FOR))


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """The demo as `genjob demo` builds it; its lease holder stopped, each copy's running
    job being held by its own test."""
    made = build_demo(tmp_path_factory.mktemp("demo-template") / "demo")
    made.stop()
    return made


@pytest.fixture
def demo(demo_template: Demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Demo:
    """A copy of the demo of its own, its running job held by this test."""
    made = copy_demo(demo_template, tmp_path / "demo", monkeypatch)
    hold_from_here(made)
    return made


@pytest.fixture
def live_demo(demo_template: Demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Demo]:
    """A copy of the demo whose running job is held by a lease holder process of its own, as
    `genjob demo` leaves it (the holder answers a cancel with an aborted receipt)."""
    made = copy_demo(demo_template, tmp_path / "demo", monkeypatch)
    made.holder = build_demo(made.root).holder  # reopened: the running job gets a new holder
    assert made.holder is not None, "the reopened demo started a lease holder"
    try:
        yield made
    finally:
        made.stop()


@contextlib.contextmanager
def frozen(seeds: Seeds) -> Iterator[time_machine.Coordinates]:
    """Everything a demo shows fixed, for screenshots that must not change from run to run:
    the clock (stopped at BUILT_AT, in UTC), the worker keys (drawn from `seeds`) and how long
    checks take."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TZ", "UTC")
    time.tzset()
    # Checks take what they take; their records say they took no time at all.
    mp.setattr(sandbox, "time", SimpleNamespace(monotonic=lambda: 0.0))
    mp.setattr(Ed25519PrivateKey, "generate", staticmethod(seeds.key))
    try:
        with time_machine.travel(BUILT_AT, tick=False) as clock:
            yield clock
    finally:
        mp.undo()
        time.tzset()


@pytest.fixture(scope="session")
def frozen_template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    """The demo built on the frozen clock, keys and check times, in a folder named `calc`
    (the name the board shows); its lease holder stopped."""
    seeds = Seeds()
    with frozen(seeds):
        made = build_demo(tmp_path_factory.mktemp("frozen-template") / "calc")
        made.stop()
    return Template(made, seeds.used)


@contextlib.contextmanager
def frozen_copy(template: Template, where: Path) -> Iterator[Demo]:
    """A copy of the frozen demo in `where/calc`, seen on the frozen clock 90 seconds after it
    was built, its running job held by this process at the frozen instant (the demo's holder
    heartbeats on the real clock, months past the frozen one, and a heartbeat that far ahead
    of the clock keeps no job running: `core.model.freshness`). Keys made from now on come
    from the seeds a fresh build would draw next."""
    with pytest.MonkeyPatch.context() as mp, frozen(Seeds(template.seeds)) as clock:
        made = copy_demo(template.demo, where / "calc", mp)
        hold_from_here(made)
        clock.shift(OPENED_AFTER)
        yield made


@pytest.fixture(scope="module")
def built_still_demo(frozen_template: Template, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    with frozen_copy(frozen_template, tmp_path_factory.mktemp("still")) as made:
        yield made


@pytest.fixture
def still_demo(built_still_demo: Demo, monkeypatch: pytest.MonkeyPatch) -> Demo:
    """One frozen demo for every screenshot that changes nothing on disk, seen with its
    own config folder (its keys, pins and seals), as `genjob demo` shows it."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(built_still_demo.config_home))
    return built_still_demo


@pytest.fixture
def fresh_frozen_demo(frozen_template: Template, tmp_path: Path) -> Iterator[Demo]:
    """A frozen demo of its own, for a screenshot taken after a change (a ship)."""
    with frozen_copy(frozen_template, tmp_path) as made:
        yield made
