"""Seals: only what genjob wrote on this machine, for this operator, passes for its own."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from checkkit import configure, received
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from core.errors import BadInput, Untrusted
from core.review import sandbox
from core.review.checks import run_checks
from core.store.check_records import read_record
from core.store.layout import Layout, user_config_dir
from core.store.seal import seal, sealed_here


def test_a_seal_is_bound_to_its_purpose_and_bytes() -> None:
    tag = seal("check record", b"doc")
    assert sealed_here("check record", b"doc", tag)
    assert not sealed_here("index", b"doc", tag)
    assert not sealed_here("check record", b"doc!", tag)
    assert not sealed_here("check record", b"doc", None)
    assert not sealed_here("check record", b"doc", tag.upper())


@given(st.binary(max_size=64), st.binary(max_size=64))
def test_two_documents_share_no_seal(a: bytes, b: bytes) -> None:
    assert sealed_here("p", a, seal("p", b)) == (a == b)


def test_the_key_is_made_once_and_readable_by_the_operator_alone() -> None:
    first = seal("p", b"x")
    path = user_config_dir() / "seal.key"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and path.stat().st_size == 32
    assert seal("p", b"x") == first


def test_another_operator_has_another_seal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = seal("p", b"x")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "someone-else"))
    assert seal("p", b"x") != mine


@pytest.mark.parametrize(("data", "mode"), [(b"short", 0o600), (b"k" * 32, 0o644)])
def test_a_key_of_the_wrong_size_or_mode_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes, mode: int
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    key = tmp_path / "cfg" / "genjob" / "seal.key"
    key.parent.mkdir(parents=True, mode=0o700)
    key.write_bytes(data)
    key.chmod(mode)
    with pytest.raises((BadInput, Untrusted), match=str(key)):
        seal("p", b"x")


@pytest.mark.skipif(sandbox.bwrap_problem() is not None, reason="bwrap cannot run here")
async def test_an_edited_or_unsealed_record_counts_for_nothing(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    layout = repo
    configure(layout, {"tests": 'run = "true"'})
    key = received(layout, signer, {"src/app.py": b"x = 1\n"}).key
    [run] = await run_checks(layout, key)
    assert run.passed and read_record(layout, key, "tests") is not None
    path = layout.check_record(key, "tests")
    doc = json.loads(path.read_bytes())
    doc["tail"] = "edited"
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match="not written by genjob on this machine"):
        read_record(layout, key, "tests")
    doc = json.loads(path.read_bytes())
    doc.pop("seal")
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match="its seal does not verify"):
        read_record(layout, key, "tests")
