"""Attestations and signed commits, checked the way an auditor without genjob would.

The DSSE envelope is verified here from the DSSE specification alone (its PAE encoding and
an Ed25519 signature); the commit by `git verify-commit`, which runs OpenSSH's ssh-keygen.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from checkkit import configure, received
from corekit import cli, git
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_ssh_public_key

from core.review import sandbox
from core.review.checks import run_checks
from core.store.layout import Layout
from core.store.signing import keygen

needs_tools = pytest.mark.skipif(
    sandbox.bwrap_problem() is not None
    or subprocess.run(["which", "ssh-keygen"], capture_output=True).returncode != 0,
    reason="needs bwrap for the check and OpenSSH's ssh-keygen",
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def dsse_verify(line: bytes, key: Ed25519PublicKey) -> dict[str, Any]:
    """The statement of one DSSE envelope line, if `key` signed it (PAE, DSSE v1.0)."""
    envelope = json.loads(line)
    payload = base64.b64decode(envelope["payload"])
    kind = envelope["payloadType"].encode()
    pae = (
        b"DSSEv1 "
        + str(len(kind)).encode()
        + b" "
        + kind
        + b" "
        + str(len(payload)).encode()
        + b" "
        + payload
    )
    [signature] = envelope["signatures"]
    key.verify(base64.b64decode(signature["sig"]), pae)
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    return dict(json.loads(payload))


def operator_key() -> Ed25519PublicKey:
    pub = load_ssh_public_key(keygen(operator=True).read_bytes())
    assert isinstance(pub, Ed25519PublicKey)
    return pub


@pytest.fixture
async def applied(repo: Layout, signer: Ed25519PrivateKey) -> tuple[Layout, str]:
    """A job applied after its check passed, in a git repository."""
    configure(repo, {"tests": 'run = "true"'}, require=["tests"])
    job = received(repo, signer, {"src/app.py": b"def main():\n    return 2\n"})
    [run] = await run_checks(repo, job.key)
    assert run.passed
    return repo, job.key


def auditor_checks(layout: Layout, key: str, statement: dict[str, Any]) -> list[str]:
    """What an auditor holds each claim to: the files it names, by their sha256."""
    faults = []
    for subject in statement["subject"]:
        if sha((layout.root / subject["name"]).read_bytes()) != subject["digest"]["sha256"]:
            faults.append(f"subject {subject['name']}")
    predicate = statement["predicate"]
    if sha(layout.receipt(key).read_bytes()) != predicate["receipt"]["sha256"]:
        faults.append("receipt")
    for check in predicate["checks"]:
        if sha(layout.check_record(key, check["name"]).read_bytes()) != check["recordSha256"]:
            faults.append(f"check {check['name']}")
    return faults


@needs_tools
async def test_an_attestation_is_checked_without_genjob(applied: tuple[Layout, str]) -> None:
    layout, key = applied
    pub = operator_key()
    assert cli("apply", key, root=layout.root).exit_code == 0
    res = cli("attest", key[:10], root=layout.root)
    assert res.exit_code == 0, res.stderr
    path = layout.root / res.stdout.strip()
    assert path == layout.attestation(key) and res.stderr.strip() == f"sha256:{sha(path.read_bytes())}"
    [line] = path.read_bytes().splitlines()
    statement = dsse_verify(line, pub)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "urn:genjob:predicate:apply:v1"
    assert [s["name"] for s in statement["subject"]] == ["src/app.py"]
    predicate = statement["predicate"]
    assert predicate["job"]["key"] == key and predicate["receipt"]["status"] == "ok"
    assert [(c["name"], c["result"], c["sandboxed"]) for c in predicate["checks"]] == [
        ("tests", "passed", True)
    ]
    assert predicate["apply"]["changed"] == ["src/app.py"]
    assert auditor_checks(layout, key, statement) == []


@needs_tools
async def test_a_changed_byte_anywhere_fails_the_auditor(applied: tuple[Layout, str]) -> None:
    layout, key = applied
    pub = operator_key()
    cli("apply", key, root=layout.root)
    cli("attest", key, root=layout.root)
    [line] = layout.attestation(key).read_bytes().splitlines()
    statement = dsse_verify(line, pub)
    for path, fault in (
        (layout.root / "src/app.py", "subject src/app.py"),
        (layout.receipt(key), "receipt"),
        (layout.check_record(key, "tests"), "check tests"),
    ):
        kept = path.read_bytes()
        path.write_bytes(kept[:-1] + bytes([kept[-1] ^ 1]))
        assert auditor_checks(layout, key, statement) == [fault]
        path.write_bytes(kept)
    envelope = json.loads(line)
    payload = bytearray(base64.b64decode(envelope["payload"]))
    payload[10] ^= 1
    envelope["payload"] = base64.b64encode(bytes(payload)).decode()
    with pytest.raises(InvalidSignature):
        dsse_verify(json.dumps(envelope).encode(), pub)


def test_an_unapplied_job_has_no_attestation(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = received(repo, signer, {"src/app.py": b"x\n"})
    operator_key()
    res = cli("attest", job.key, root=repo.root)
    assert res.exit_code == 2 and "is not applied" in res.stderr


@needs_tools
async def test_a_signed_commit_is_verified_by_git_and_leads_to_its_attestation(
    applied: tuple[Layout, str], tmp_path: Path
) -> None:
    layout, key = applied
    pub_line = keygen(operator=True).read_text().split()
    signers = tmp_path / "allowed_signers"
    signers.write_text(f'tests@genjob.invalid namespaces="git" {pub_line[0]} {pub_line[1]}\n')
    res = cli("apply", key, "--commit", "--sign", root=layout.root)
    assert res.exit_code == 0, res.stderr
    verified = subprocess.run(
        [
            "git",
            "-C",
            str(layout.root),
            "-c",
            f"gpg.ssh.allowedSignersFile={signers}",
            "verify-commit",
            "HEAD",
        ],
        capture_output=True,
        text=True,
    )
    assert verified.returncode == 0, verified.stderr
    assert 'Good "git" signature' in verified.stderr
    message = git(layout.root, "log", "-1", "--format=%B")
    trailers = dict(
        line.split(": ", 1)
        for line in subprocess.run(
            ["git", "interpret-trailers", "--parse"],
            input=message,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    )
    assert trailers["Genjob-Key"] == key
    assert trailers["Genjob-Receipt"] == f"sha256:{sha(layout.receipt(key).read_bytes())}"
    assert trailers["Genjob-Attestation"] == f"sha256:{sha(layout.attestation(key).read_bytes())}"


def test_a_signed_commit_without_an_operator_key_applies_nothing(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    job = received(repo, signer, {"src/app.py": b"x\n"})
    before = (repo.root / "src/app.py").read_bytes()
    res = cli("apply", job.key, "--commit", "--sign", root=repo.root)
    assert res.exit_code != 0 and "genjob keygen --operator" in res.stderr
    assert (repo.root / "src/app.py").read_bytes() == before
    assert cli("apply", job.key, "--sign", root=repo.root).exit_code == 2


def test_policy_sign_commits_signs_every_commit(repo: Layout, signer: Ed25519PrivateKey) -> None:
    from corekit import set_config

    set_config(repo, repo.config.read_text().replace("# sign_commits = false", "sign_commits = true"))
    job = received(repo, signer, {"src/app.py": b"x\n"})
    res = cli("apply", job.key, "--commit", root=repo.root)
    assert res.exit_code != 0 and "genjob keygen --operator" in res.stderr
    operator_key()
    res = cli("apply", job.key, "--commit", root=repo.root)
    assert res.exit_code == 0, res.stderr
    assert "Genjob-Attestation: sha256:" in git(repo.root, "log", "-1", "--format=%B")
    assert "gpgsig -----BEGIN SSH SIGNATURE-----" in git(repo.root, "cat-file", "commit", "HEAD")
