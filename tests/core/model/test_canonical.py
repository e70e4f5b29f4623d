"""Canonical JSON, hashing and the strict JSON reader."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import BadInput
from core.model.canonical import (
    canonical,
    loads_strict,
    read_bytes,
    read_json,
    sha256_bytes,
    sha256_file,
)
from core.remote.rules import MAX_INT_DIGITS
from core.remote.rules import MAX_JSON_DEPTH as MAX_DEPTH

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=25,
)


def seed_canonical(obj: object) -> bytes:
    """The seed's definition, spelled out."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


@given(json_values)
def test_canonical_is_the_seed_definition(value: Any) -> None:
    assert canonical(value) == seed_canonical(value)


@given(json_values)
def test_canonical_round_trips(value: Any) -> None:
    data = canonical(value)
    assert canonical(json.loads(data)) == data
    assert canonical(loads_strict(data, "x")) == data


@given(st.dictionaries(st.text(), json_values, max_size=8), st.randoms())
def test_canonical_ignores_key_order(obj: dict[str, Any], rnd: Any) -> None:
    items = list(obj.items())
    rnd.shuffle(items)
    assert canonical(dict(items)) == canonical(obj)


@given(json_values)
def test_canonical_is_ascii_without_whitespace_between_tokens(value: Any) -> None:
    data = canonical(value)
    data.decode("ascii")
    assert b"\n" not in data


@given(json_values)
def test_strict_reader_agrees_with_json_on_valid_documents(value: Any) -> None:
    text = json.dumps(value, indent=1).encode()
    assert loads_strict(text, "x") == json.loads(text)


@given(st.binary(max_size=3000))
@settings(max_examples=50)
def test_sha256_helpers_agree_with_hashlib(data: bytes) -> None:
    assert sha256_bytes(data) == hashlib.sha256(data).hexdigest()


def test_sha256_file_streams_large_files(tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)
    path = tmp_path / "big"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()


def test_sha256_file_refuses_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"x")
    (tmp_path / "link").symlink_to("real")
    with pytest.raises(OSError):
        sha256_file(tmp_path / "link")


@pytest.mark.parametrize(
    ("data", "fault"),
    [
        (b'{"a": 1', "malformed JSON"),
        (b'{"a": 1, "a": 2}', "duplicate key 'a'"),
        (b'{"a": NaN}', "NaN is not JSON"),
        (b'{"a": Infinity}', "Infinity is not JSON"),
        (b'{"a": -Infinity}', "-Infinity is not JSON"),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "nested deeper"),
        (b"[" * 100_000, "nested deeper"),
        (b'{"a": ' + b"9" * 4300 + b"}", "digits"),
        (b'{"a": -' + b"1" * (MAX_INT_DIGITS + 1) + b"}", "digits"),
        (b'{"a": "\xff"}', "not UTF-8"),
        (b"", "malformed JSON"),
    ],
    ids=[
        "truncated",
        "duplicate-keys",
        "nan",
        "infinity",
        "minus-infinity",
        "deep",
        "very-deep",
        "4300-digits",
        "long-negative",
        "not-utf8",
        "empty",
    ],
)
def test_strict_reader_refuses_with_source_and_fault(data: bytes, fault: str) -> None:
    with pytest.raises(BadInput) as err:
        loads_strict(data, "some/file.json")
    assert str(err.value).startswith("some/file.json: ")
    assert fault in str(err.value)


def test_depth_limit_is_exact() -> None:
    ok = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert loads_strict(ok, "x") is not None
    brackets_in_strings = json.dumps({"s": "[" * 500 + "{" * 500}).encode()
    assert loads_strict(brackets_in_strings, "x") == {"s": "[" * 500 + "{" * 500}
    escaped_quote = json.dumps({"s": '\\"' + "[" * 100}).encode()
    assert loads_strict(escaped_quote, "x") == json.loads(escaped_quote)


def test_integer_limit_is_exact() -> None:
    assert loads_strict(b"9" * MAX_INT_DIGITS, "x") == int("9" * MAX_INT_DIGITS)
    assert loads_strict(b"-" + b"9" * MAX_INT_DIGITS, "x") == -int("9" * MAX_INT_DIGITS)


def test_oversized_document_is_refused_before_parsing() -> None:
    with pytest.raises(BadInput, match="over the 10-byte limit"):
        loads_strict(b'"' + b"x" * 20 + b'"', "f.json", max_bytes=10)


def test_read_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    path.write_bytes(b'{"a": [1, 2}')
    with pytest.raises(BadInput, match=f"^{path}: malformed JSON"):
        read_json(path)


def test_read_bytes_refuses_links_missing_files_and_oversize(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"12345")
    (tmp_path / "link").symlink_to("real")
    with pytest.raises(BadInput, match="link: cannot read"):
        read_bytes(tmp_path / "link")
    with pytest.raises(BadInput, match="gone: cannot read"):
        read_bytes(tmp_path / "gone")
    with pytest.raises(BadInput, match="over the 4-byte limit"):
        read_bytes(tmp_path / "real", max_bytes=4)
    assert read_bytes(tmp_path / "real", max_bytes=5) == b"12345"


def test_a_fifo_is_refused_instead_of_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match=r"pipe\.json: cannot read \(not a regular file"):
        read_json(fifo)
    with pytest.raises(OSError):
        sha256_file(fifo)
