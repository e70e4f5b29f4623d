"""Worker keys, detached signatures and pinned trusted keys."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import generate_private_key

from core.errors import BadInput, GenjobError
from core.store.signing import (
    Anchors,
    check_signature,
    config_dir,
    fingerprint,
    keygen,
    load_private_key,
    parse_public_key,
    private_key_path,
    sign,
    store_key,
    trusted_keys,
)


def ssh_public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)


def test_keygen_lives_under_xdg_config_home_never_in_the_repo(private_config: Path, tmp_path: Path) -> None:
    pub = keygen()
    assert config_dir() == private_config / "genjob"
    assert pub == private_config / "genjob" / "worker_ed25519.pub"
    priv = private_key_path()
    assert stat.S_IMODE(os.stat(priv).st_mode) == 0o600
    assert ".gen" not in priv.parts
    assert isinstance(load_private_key(), Ed25519PrivateKey)
    assert pub.read_text().startswith("ssh-ed25519 ") and pub.read_text().endswith(" genjob-worker\n")


def test_keygen_refuses_to_overwrite_unless_forced(private_config: Path) -> None:
    keygen()
    first = private_key_path().read_bytes()
    with pytest.raises(GenjobError, match="a worker key exists already"):
        keygen()
    assert private_key_path().read_bytes() == first
    keygen(force=True)
    assert private_key_path().read_bytes() != first


def test_load_private_key_faults(private_config: Path, tmp_path: Path) -> None:
    with pytest.raises(GenjobError, match="no worker key"):
        load_private_key()
    bad = tmp_path / "bad"
    bad.write_bytes(b"not a key")
    with pytest.raises(BadInput, match="not an unencrypted OpenSSH private key"):
        load_private_key(bad)


def test_sign_and_check(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    pub = tmp_path / "w.pub"
    pub.write_bytes(ssh_public(key))
    trusted_dir = tmp_path / "trusted"
    trusted_dir.mkdir()
    dest, fp = store_key(trusted_dir, pub)
    assert dest.parent == trusted_dir and fp == fingerprint(key.public_key())
    sig = sign(key, b"message")
    doc = json.loads(sig)
    assert set(doc) == {"alg", "key", "sig"} and doc["alg"] == "ed25519" and doc["key"] == fp
    assert check_signature(sig, "s.sig", b"message", Anchors(trusted_keys(trusted_dir), {})) == fp


def test_a_forged_or_untrusted_signature_is_refused(tmp_path: Path) -> None:
    trusted_key, rogue = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    (tmp_path / "t.pub").write_bytes(ssh_public(trusted_key))
    trusted_dir = tmp_path / "trusted"
    trusted_dir.mkdir()
    store_key(trusted_dir, tmp_path / "t.pub")
    pinned = Anchors(trusted_keys(trusted_dir), {})
    with pytest.raises(BadInput, match=r"which is not a trusted key; .*genjob trust"):
        check_signature(sign(rogue, b"m"), "r.sig", b"m", pinned)
    with pytest.raises(BadInput, match="signature does not match the receipt"):
        check_signature(sign(trusted_key, b"m"), "r.sig", b"other", pinned)
    forged = json.loads(sign(rogue, b"m"))
    forged["key"] = fingerprint(trusted_key.public_key())
    with pytest.raises(BadInput, match="signature does not match the receipt"):
        check_signature(json.dumps(forged).encode(), "r.sig", b"m", pinned)


@pytest.mark.parametrize(
    ("doc", "fault"),
    [
        (b"not json", "malformed JSON"),
        (b"[]", "not a genjob ed25519 signature file"),
        (json.dumps({"alg": "rsa", "key": "k", "sig": "AA=="}).encode(), "not a genjob ed25519"),
        (json.dumps({"alg": "ed25519", "key": "k", "sig": "AA==", "x": 1}).encode(), "not a genjob ed25519"),
        (json.dumps({"alg": "ed25519", "key": "k", "sig": "@@@"}).encode(), "signature is not base64"),
    ],
)
def test_malformed_signature_files(doc: bytes, fault: str) -> None:
    with pytest.raises(BadInput) as err:
        check_signature(doc, "x.sig", b"m", Anchors([], {}))
    assert str(err.value).startswith("x.sig: ") and fault in str(err.value)


def test_trust_refuses_non_ed25519_and_garbage(tmp_path: Path) -> None:
    rsa = generate_private_key(public_exponent=65537, key_size=2048).public_key()
    (tmp_path / "rsa.pub").write_bytes(
        rsa.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )
    (tmp_path / "junk.pub").write_bytes(b"ssh-ed25519 " + base64.b64encode(b"short"))
    trusted_dir = tmp_path / "trusted"
    trusted_dir.mkdir()
    with pytest.raises(BadInput, match="not an Ed25519 public key"):
        store_key(trusted_dir, tmp_path / "rsa.pub")
    with pytest.raises(BadInput, match=r"junk\.pub: not an OpenSSH public key"):
        store_key(trusted_dir, tmp_path / "junk.pub")
    assert os.listdir(trusted_dir) == []


def test_trusting_a_key_twice_keeps_one_file(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    (tmp_path / "k.pub").write_bytes(ssh_public(key) + b" comment\n")
    trusted_dir = tmp_path / "trusted"
    trusted_dir.mkdir()
    a, _ = store_key(trusted_dir, tmp_path / "k.pub")
    b, _ = store_key(trusted_dir, tmp_path / "k.pub")
    assert a == b and os.listdir(trusted_dir) == [a.name]


def test_a_broken_pinned_key_is_reported_not_skipped(tmp_path: Path) -> None:
    (tmp_path / "broken.pub").write_bytes(b"garbage")
    with pytest.raises(BadInput, match=r"broken\.pub: not an OpenSSH public key"):
        trusted_keys(tmp_path)
    with pytest.raises(BadInput):
        parse_public_key(b"", "empty.pub")
