"""The audit log and attempt records (`core.store.events`): bounded on the way in, bounded on the
way out, and a log past its read cap read from its tail rather than refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import BadInput, TooLarge
from core.store import events
from core.store.events import (
    MAX_FIELD_CHARS,
    MAX_FIELD_ITEMS,
    MAX_READ_BYTES,
    actor,
    attempts,
    bounded,
    claims,
    job_events,
    read_tail,
    record_attempt,
    record_event,
)
from core.store.layout import Layout
from core.store.repo import init_repo

KEY = "a" * 32
OTHER = "b" * 32


@pytest.fixture
def gen(tmp_path: Path) -> Layout:
    """An initialised `.gen/` (no git repository needed for the log)."""
    layout, _ = init_repo(tmp_path)
    return layout


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


# --- recording ---------------------------------------------------------------------------


def test_record_event_appends_one_canonical_line_and_returns_it(gen: Layout) -> None:
    entry = record_event(gen, "minted", KEY, paths=["src/app.py"], note="first")
    record_event(gen, "note", None)
    written = lines(gen.events)
    assert written[0] == entry
    assert entry["event"] == "minted" and entry["key"] == KEY
    assert entry["paths"] == ["src/app.py"] and entry["note"] == "first"
    assert entry["by"] == actor() and "@" in actor()
    assert isinstance(entry["at"], float)
    assert written[1]["key"] is None
    # Canonical JSON: sorted keys, no spaces, one line each.
    raw = gen.events.read_bytes().splitlines()[0]
    assert raw == json.dumps(written[0], sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def test_record_event_bounds_what_a_host_sent(gen: Layout) -> None:
    entry = record_event(gen, "rejected", KEY, reason="r" * 100_000, violations=["v"] * 1000)
    assert entry["reason"] == "r" * MAX_FIELD_CHARS + f"… ({100_000 - MAX_FIELD_CHARS} more characters)"
    assert len(entry["violations"]) == MAX_FIELD_ITEMS + 1
    assert gen.events.stat().st_size < 4 * MAX_FIELD_CHARS


def test_record_attempt_writes_the_jobs_own_file_without_the_actor(gen: Layout) -> None:
    record_attempt(gen, KEY, "claimed", worker="w1")
    record_attempt(gen, KEY, "finished", status="ok", reason="x" * (MAX_FIELD_CHARS + 1))
    records = attempts(gen, KEY)
    assert [r["event"] for r in records] == ["claimed", "finished"]
    assert records[0]["worker"] == "w1" and "by" not in records[0] and "key" not in records[0]
    assert str(records[1]["reason"]).endswith("(1 more characters)")
    assert not gen.events.exists() or KEY.encode() not in gen.events.read_bytes()


# --- bounded -----------------------------------------------------------------------------


def test_bounded_keeps_small_values_as_they_are() -> None:
    value = {"n": 3, "f": 1.5, "ok": True, "none": None, "s": "x" * MAX_FIELD_CHARS, "l": [1, 2]}
    assert bounded(value) == value


def test_bounded_cuts_objects_and_tuples_with_a_note() -> None:
    big = {f"k{i:03}": i for i in range(MAX_FIELD_ITEMS + 7)}
    out = bounded(big)
    assert len(out) == MAX_FIELD_ITEMS + 1 and out["…"] == "7 more"
    assert out["k000"] == 0 and f"k{MAX_FIELD_ITEMS:03}" not in out
    assert bounded(tuple(range(3))) == [0, 1, 2]


def test_bounded_cuts_long_keys_too() -> None:
    (key,) = bounded({"k" * (MAX_FIELD_CHARS + 5): 1})
    assert key.endswith("(5 more characters)")


def test_bounded_summarises_deep_nesting() -> None:
    deep: object = "leaf"
    for _ in range(10):
        deep = [deep]
    out = bounded(deep)
    for _ in range(5):
        assert isinstance(out, list) and len(out) == 1
        out = out[0]
    assert out == "(list nested too deeply to record)"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3000),
    lambda inner: st.lists(inner, max_size=60) | st.dictionaries(st.text(max_size=5), inner, max_size=60),
    max_leaves=200,
)


def _within_bounds(value: object, depth: int = 0) -> bool:
    if isinstance(value, str):
        return len(value) <= MAX_FIELD_CHARS + 40
    if isinstance(value, list):
        return len(value) <= MAX_FIELD_ITEMS + 1 and all(_within_bounds(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return len(value) <= MAX_FIELD_ITEMS + 1 and all(
            _within_bounds(k, depth + 1) and _within_bounds(v, depth + 1) for k, v in value.items()
        )
    return True


@settings(max_examples=100, deadline=None)
@given(value=json_values)
def test_bounded_output_is_always_within_bounds(value: object) -> None:
    out = bounded(value)
    assert _within_bounds(out)
    json.dumps(out)  # still JSON


# --- reading -----------------------------------------------------------------------------


def test_read_tail_of_a_missing_log_is_empty(tmp_path: Path) -> None:
    assert read_tail(tmp_path / "events.jsonl") == b""


def test_read_tail_within_the_cap_is_the_whole_file(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_bytes(b"one\ntwo\n")
    assert read_tail(log, limit=100) == b"one\ntwo\n"


def test_read_tail_past_the_cap_keeps_only_whole_lines(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_bytes(b"first line\nsecond\nthird\n")
    # The last 10 bytes are "ond\nthird\n": the cut line is dropped, never half-read.
    assert read_tail(log, limit=10) == b"third\n"
    assert read_tail(log, limit=len(b"\nsecond\nthird\n")) == b"second\nthird\n"


def test_read_tail_keeps_a_whole_line_that_starts_exactly_at_the_cap(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_bytes(b"first line\nsecond\nthird\n")
    # "second" begins exactly `limit` bytes from the end: it was not cut, so it is kept.
    assert read_tail(log, limit=len(b"second\nthird\n")) == b"second\nthird\n"


def test_job_events_reads_the_tail_of_a_log_past_the_cap(gen: Layout) -> None:
    record_event(gen, "minted", KEY)  # before the last MAX_READ_BYTES: out of reach
    line = json.dumps({"at": 1.0, "event": "noise", "key": OTHER, "pad": "p" * 4000}).encode() + b"\n"
    with open(gen.events, "ab") as fh:
        fh.write(line * (MAX_READ_BYTES // len(line) + 2))
    record_event(gen, "applied", KEY)
    assert gen.events.stat().st_size > MAX_READ_BYTES
    assert [e["event"] for e in job_events(gen, KEY)] == ["applied"]


def test_job_events_matches_the_key_field_not_any_mention(gen: Layout) -> None:
    record_event(gen, "minted", KEY)
    record_event(gen, "replayed", OTHER, as_key=KEY)
    record_event(gen, "applied", KEY)
    with open(gen.events, "ab") as fh:
        fh.write(b"not json " + KEY.encode() + b'\n["' + KEY.encode() + b'"]\n')
    assert [e["event"] for e in job_events(gen, KEY)] == ["minted", "applied"]
    assert [e["event"] for e in job_events(gen, OTHER)] == ["replayed"]


def test_read_tail_refuses_a_fifo_and_a_link(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(BadInput, match="not a regular file"):
        read_tail(tmp_path / "fifo")
    (tmp_path / "real").write_bytes(b"x\n")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(BadInput, match="a log must be a regular file"):
        read_tail(tmp_path / "link")


# --- attempts and claims -----------------------------------------------------------------


def test_attempts_of_a_job_never_claimed_is_empty(gen: Layout) -> None:
    assert attempts(gen, KEY) == []
    assert claims([]) == 0


def test_claims_counts_only_claimed_records(gen: Layout) -> None:
    for event in ["claimed", "requeued", "claimed", "finished", "claimed"]:
        record_attempt(gen, KEY, event)
    records = attempts(gen, KEY)
    assert len(records) == 5
    assert claims(records) == 3
    assert claims(attempts(gen, OTHER)) == 0


def test_attempts_skips_lines_that_are_not_records(gen: Layout) -> None:
    record_attempt(gen, KEY, "claimed")
    with open(gen.attempts_file(KEY), "ab") as fh:
        fh.write(b'{"event":"claimed"\n[1,2]\n"claimed"\n\n')
    record_attempt(gen, KEY, "claimed")
    assert claims(attempts(gen, KEY)) == 2


def test_attempts_refuses_a_file_over_its_cap(gen: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(20):
        record_attempt(gen, KEY, "claimed")
    monkeypatch.setattr(events, "MAX_ATTEMPTS_BYTES", 256)
    with pytest.raises(TooLarge, match="over the 256-byte limit"):
        attempts(gen, KEY)


def test_attempts_refuses_a_link_in_place_of_the_file(gen: Layout, tmp_path: Path) -> None:
    forged = tmp_path / "forged.jsonl"
    forged.write_bytes(b'{"event":"claimed"}\n' * 5)
    gen.attempts_file(KEY).symlink_to(forged)
    with pytest.raises(BadInput):
        attempts(gen, KEY)


LINES = st.lists(st.text(alphabet="ab ", max_size=12).map(str.encode), max_size=8)


@given(lines=LINES, limit=st.integers(1, 80))
def test_read_tail_is_the_whole_lines_within_the_limit(
    tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], limit: int
) -> None:
    log = tmp_path_factory.mktemp("tail") / "log"
    log.write_bytes(b"".join(line + b"\n" for line in lines))
    want = b""
    for line in reversed(lines):  # whole lines from the end, while they fit in the limit
        if len(want) + len(line) + 1 > limit:
            break
        want = line + b"\n" + want
    assert read_tail(log, limit=limit) == want
