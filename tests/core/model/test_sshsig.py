"""SSHSIG: receipts signed so that OpenSSH's own `ssh-keygen -Y verify` checks them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from corekit import cli, mint, receive
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import BadInput
from core.model.sshsig import RECEIPT_NAMESPACE, allowed_signers_keys, sign_ssh, verify_ssh
from core.store.layout import Layout
from core.store.signing import fingerprint, private_key_path

pytestmark = pytest.mark.skipif(
    subprocess.run(["which", "ssh-keygen"], capture_output=True).returncode != 0,
    reason="OpenSSH's ssh-keygen is not installed",
)


def ssh_verify(
    signers: Path, identity: str, sig: Path, message: bytes, namespace: str = RECEIPT_NAMESPACE
) -> bool:
    proc = subprocess.run(
        ["ssh-keygen", "-Y", "verify", "-f", str(signers), "-I", identity, "-n", namespace, "-s", str(sig)],
        input=message,
        capture_output=True,
    )
    return proc.returncode == 0


def signers_file(repo: Layout, tmp_path: Path) -> Path:
    res = cli("trust", "--allowed-signers", root=repo.root)
    assert res.exit_code == 0, res.stderr
    path = tmp_path / "allowed_signers"
    path.write_text(res.stdout)
    return path


def test_a_receipt_is_verified_by_ssh_keygen(repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path) -> None:
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"new\n"}, signer, worker="w1")
    receipt, sig = repo.receipt(job.key), repo.ssh_signature(job.key)
    signers = signers_file(repo, tmp_path)
    assert ssh_verify(signers, "w1", sig, receipt.read_bytes())
    # Another namespace, a changed byte, another key: each is refused.
    assert not ssh_verify(signers, "w1", sig, receipt.read_bytes(), namespace="git")
    changed = bytearray(receipt.read_bytes())
    changed[-2] ^= 1
    assert not ssh_verify(signers, "w1", sig, bytes(changed))
    other = tmp_path / "other"
    other.write_text(signers.read_text().replace(signers.read_text().split()[-1], "AAAA"))
    assert not ssh_verify(other, "w1", sig, receipt.read_bytes())


def test_the_v1_receipt_keeps_its_six_fields_beside_its_ssh_signature(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    import json

    job = mint(repo, schema="genjob.v1")
    receive(repo, job.key, {"src/app.py": b"new\n"}, signer)
    assert set(json.loads(repo.receipt(job.key).read_bytes())) == {
        "schema",
        "job_digest",
        "idempotency_key",
        "status",
        "outputs",
        "worker_id",
    }
    assert repo.ssh_signature(job.key).read_bytes().startswith(b"-----BEGIN SSH SIGNATURE-----")


def test_an_unsigned_receipt_has_no_ssh_signature(repo: Layout) -> None:
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"new\n"})
    assert not repo.ssh_signature(job.key).exists()


def test_ssh_keygen_reads_the_worker_key_and_its_signatures_are_read_here(
    signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    pub = subprocess.run(["ssh-keygen", "-y", "-f", str(private_key_path())], capture_output=True, text=True)
    assert pub.returncode == 0 and pub.stdout.startswith("ssh-ed25519 ")
    message = tmp_path / "message"
    message.write_bytes(b"signed by OpenSSH\n")
    subprocess.run(
        [
            "ssh-keygen",
            "-Y",
            "sign",
            "-q",
            "-f",
            str(private_key_path()),
            "-n",
            RECEIPT_NAMESPACE,
            str(message),
        ],
        check=True,
        capture_output=True,
    )
    key = verify_ssh((tmp_path / "message.sig").read_bytes(), message.read_bytes(), RECEIPT_NAMESPACE)
    assert fingerprint(key) == fingerprint(signer.public_key())


@pytest.mark.parametrize(
    ("armored", "fault"),
    [
        (b"nothing", "not an armored SSH signature"),
        (b"-----BEGIN SSH SIGNATURE-----\n@@@\n-----END SSH SIGNATURE-----\n", "not base64"),
        (b"-----BEGIN SSH SIGNATURE-----\nU1NIU0lH\n-----END SSH SIGNATURE-----\n", "version 1"),
    ],
)
def test_a_broken_ssh_signature_is_refused_with_its_fault(armored: bytes, fault: str) -> None:
    with pytest.raises(BadInput, match=fault):
        verify_ssh(armored, b"m", RECEIPT_NAMESPACE)


def test_an_ssh_signature_of_another_namespace_or_message_is_refused() -> None:
    key = Ed25519PrivateKey.generate()
    armored = sign_ssh(key, b"m", "git")
    with pytest.raises(BadInput, match="namespace genjob-receipt"):
        verify_ssh(armored, b"m", RECEIPT_NAMESPACE)
    with pytest.raises(BadInput, match="does not match these bytes"):
        verify_ssh(sign_ssh(key, b"m", RECEIPT_NAMESPACE), b"n", RECEIPT_NAMESPACE)


def test_trust_takes_an_allowed_signers_file(repo: Layout, tmp_path: Path) -> None:
    keys = [Ed25519PrivateKey.generate() for _ in range(3)]
    from core.model.sshsig import allowed_signers_line

    signers = tmp_path / "allowed_signers"
    signers.write_text(
        "# the team's workers\n"
        + allowed_signers_line(keys[0].public_key(), RECEIPT_NAMESPACE, "w1@ci")
        + "\n"
        + allowed_signers_line(keys[1].public_key(), "git", "dev@example.com")
        + "\n"
        + "* "
        + allowed_signers_line(keys[2].public_key(), RECEIPT_NAMESPACE).split(" ", 2)[2]
        + "\n"
    )
    res = cli("trust", str(signers), root=repo.root)
    assert res.exit_code == 0, res.stderr
    pinned = {line.split()[1] for line in res.stdout.splitlines()}
    assert pinned == {fingerprint(keys[0].public_key()), fingerprint(keys[2].public_key())}
    bad = tmp_path / "rsa_signers"
    bad.write_text("w1 ssh-rsa AAAAB3NzaC1yc2E=\n")
    refused = cli("trust", str(bad), root=repo.root)
    assert refused.exit_code == 2 and "line 1: a ssh-rsa key" in refused.stderr


def test_allowed_signers_lines_without_a_key_are_refused() -> None:
    with pytest.raises(BadInput, match="line 2: no key"):
        allowed_signers_keys("# ok\nw1 namespaces=x\n", RECEIPT_NAMESPACE, "f")


def test_a_candidates_receipt_is_signed_so_and_choosing_it_keeps_that(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    from corekit import sha

    from core.model.models import Receipt
    from core.review.candidates import choose
    from core.store.candidate_store import SSH_SIGNATURE, Holder, commit_candidate, staging
    from core.store.queue import Claimer
    from core.store.receipts import make_receipt

    job = mint(repo, "best of one", ["src/app.py"])
    held = Claimer(repo, "w1").claim(job.key)
    folder = staging(repo, job.key, 1, 1)
    (folder / "out/src").mkdir(parents=True)
    (folder / "out/src/app.py").write_bytes(b"x\n")
    receipt: Receipt = make_receipt(held.job, "ok", {"src/app.py": sha(b"x\n")}, "w1")
    commit_candidate(repo, held.job, 1, [1], receipt, {}, Holder("w1", 1, signer))
    candidate = repo.candidate(job.key, 1)
    signers = signers_file(repo, tmp_path)
    assert ssh_verify(signers, "w1", candidate / SSH_SIGNATURE, (candidate / "receipt.json").read_bytes())
    choose(repo, job.key, 1)
    assert ssh_verify(signers, "w1", repo.ssh_signature(job.key), repo.receipt(job.key).read_bytes())
