"""Trust anchors and policy count only when no other user could have written them.

A pinned key, `config.toml` or the folders holding them that a group, others or another
owner could write are not trusted, with a message that says how to fix the mode; the
operator's own policy and keys, beside the worker key, set a floor no repository lowers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from corekit import cli, mint, receive, set_config, tree_files
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from core.errors import GenjobError, Untrusted, VerificationFailed
from core.model.models import Job
from core.review.apply_job import apply_job
from core.review.verify import verify
from core.store.config import load_config, user_config_dir
from core.store.layout import Layout
from core.store.ownership import repository_owners, untrusted_because
from core.store.signing import (
    keygen,
    load_private_key,
    operator_keys_dir,
    own_signer_unpinned,
    public_key_path,
    trust_anchors,
    trust_own_worker_key,
    trust_repository,
)

OTHER_UID = 54321


@pytest.fixture
def received(repo: Layout, signer: Ed25519PrivateKey) -> Job:
    job = mint(repo, "Return two.", ["src/app.py"])
    receive(repo, job.key, {"src/app.py": b"def main():\n    return 2\n"}, signer)
    return job


def signature_check(repo: Layout, job: Job) -> str:
    v = verify(repo, job, load_config(repo.config))
    return next(c for c in v.checks if c.name == "signature").detail


def pinned_file(repo: Layout) -> Path:
    [path] = list(repo.trusted_keys.glob("*.pub"))
    return path


@pytest.mark.parametrize(
    ("where", "fault"),
    [
        ("key-group-writable", "is writable by its group (mode 0664); fix with: chmod go-w"),
        ("key-other-writable", "is writable by others (mode 0646); fix with: chmod go-w"),
        ("folder-group-writable", "trusted_keys is writable by its group (mode 0775)"),
        ("key-other-owner", f"is owned by uid {OTHER_UID}, not root; fix with: chown root"),
    ],
)
def test_a_pinned_key_others_could_have_written_is_not_trusted(
    repo: Layout, received: Job, where: str, fault: str
) -> None:
    key = pinned_file(repo)
    {
        "key-group-writable": lambda: os.chmod(key, 0o664),
        "key-other-writable": lambda: os.chmod(key, 0o646),
        "folder-group-writable": lambda: os.chmod(repo.trusted_keys, 0o775),
        "key-other-owner": lambda: os.chown(key, OTHER_UID, OTHER_UID),
    }[where]()
    detail = signature_check(repo, received)
    assert "is not trusted" in detail and fault in detail
    tree = tree_files(repo.root)
    with pytest.raises(VerificationFailed, match="signature: "):
        apply_job(repo, received.key)
    assert tree_files(repo.root) == tree


def test_a_gen_folder_others_can_write_trusts_nothing_in_it(repo: Layout, received: Job) -> None:
    os.chmod(repo.gen, 0o757)
    tree = tree_files(repo.root)
    res = cli("apply", received.key, root=repo.root)
    assert res.exit_code == 2
    assert ".gen is writable by others (mode 0757); fix with: chmod go-w" in res.stderr
    assert tree_files(repo.root) == tree


def test_a_symlinked_pinned_key_is_not_read(repo: Layout, received: Job, tmp_path: Path) -> None:
    key = pinned_file(repo)
    real = tmp_path / "elsewhere.pub"
    real.write_bytes(key.read_bytes())
    key.unlink()
    key.symlink_to(real)
    detail = signature_check(repo, received)
    assert "which is not a trusted key" in detail and "could not be read" in detail


def test_a_config_others_could_have_written_is_refused(repo: Layout, received: Job) -> None:
    os.chmod(repo.config, 0o666)
    with pytest.raises(Untrusted, match=r"config\.toml: a config\.toml that another user could have written"):
        load_config(repo.config)
    res = cli("apply", received.key, root=repo.root)
    assert res.exit_code == 2
    assert "chmod go-w" in res.stderr and "Traceback" not in res.stderr
    listing = cli("ls", root=repo.root)
    assert listing.exit_code == 0 and "chmod go-w" in listing.stderr


def test_the_operator_policy_sets_a_floor_the_repository_cannot_lower(repo: Layout, received: Job) -> None:
    set_config(repo, repo.config.read_text().replace("require_signature = true", "require_signature = false"))
    repo.signature(received.key).unlink()
    assert verify(repo, received, load_config(repo.config)).ok
    user_config_dir().mkdir(parents=True, exist_ok=True)
    (user_config_dir() / "config.toml").write_text("[policy]\nrequire_signature = true\n")
    v = verify(repo, received, load_config(repo.config))
    assert not v.ok and v.signature_required
    assert "unsigned receipt; policy requires a trusted signature" in signature_check(repo, received)


def test_the_operator_can_trust_only_their_own_keys(repo: Layout, received: Job) -> None:
    (user_config_dir() / "config.toml").write_text("[policy]\ntrust_repository_keys = false\n")
    detail = signature_check(repo, received)
    assert "your operator policy trusts no repository keys" in detail
    assert "genjob trust --operator" in detail
    res = cli("trust", "--operator", str(public_key_path()), root=repo.root)
    assert res.exit_code == 0, res.stderr
    assert list(operator_keys_dir().glob("*.pub"))
    assert verify(repo, received, load_config(repo.config)).ok


def test_an_operator_config_others_could_have_written_is_refused(repo: Layout) -> None:
    folder = user_config_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text("[policy]\nrequire_signature = false\n")
    os.chmod(folder / "config.toml", 0o620)
    with pytest.raises(Untrusted, match="an operator config that another user could have written"):
        load_config(repo.config)


def test_files_genjob_makes_are_trusted_whatever_the_umask(tmp_path: Path) -> None:
    from corekit import make_repo

    old = os.umask(0o002)
    try:
        layout = make_repo(tmp_path / "shared-umask")
        pub = keygen()
        trust_repository(layout, pub)
    finally:
        os.umask(old)
    owners = repository_owners(layout.root)
    for path in [layout.config, *layout.trusted_keys.glob("*.pub")]:
        assert untrusted_because(path, layout.gen, owners) is None, path
    assert load_private_key() is not None


def own_signed(repo: Layout) -> Job:
    """A receipt signed by this machine's own worker key (`genjob keygen`), pinned nowhere."""
    keygen()
    job = mint(repo, "Return three.", ["src/app.py"])
    receive(repo, job.key, {"src/app.py": b"def main():\n    return 3\n"}, load_private_key())
    return job


def test_this_machines_own_unpinned_key_is_named_by_its_real_file(repo: Layout) -> None:
    job = own_signed(repo)
    detail = signature_check(repo, job)
    assert "this machine's own worker key" in detail
    assert f"pin its public key with: genjob trust {public_key_path()}" in detail
    assert "<its .pub file>" not in detail
    anchors = trust_anchors(repo.trusted_keys, repo.root)
    own = own_signer_unpinned(repo.signature(job.key), anchors)
    assert own is not None and own.path == public_key_path()
    dest, fp = trust_own_worker_key(repo)
    assert fp == own.fingerprint and dest.parent == repo.trusted_keys
    assert verify(repo, job, load_config(repo.config)).ok, "the receipt verifies once it is pinned"
    assert own_signer_unpinned(repo.signature(job.key), trust_anchors(repo.trusted_keys, repo.root)) is None


def test_a_key_that_is_not_this_machines_own_is_never_offered(repo: Layout, tmp_path: Path) -> None:
    """Another worker's key, and a `.pub` beside this machine's private key that holds
    another key, are not this machine's own: the message stays generic, nothing is offered."""
    stranger = Ed25519PrivateKey.generate()
    job = mint(repo, "Return four.", ["src/app.py"])
    receive(repo, job.key, {"src/app.py": b"def main():\n    return 4\n"}, stranger)
    keygen()
    detail = signature_check(repo, job)
    assert "<its .pub file>" in detail and "this machine's own" not in detail
    anchors = trust_anchors(repo.trusted_keys, repo.root)
    assert own_signer_unpinned(repo.signature(job.key), anchors) is None

    mine = mint(repo, "Return five.", ["src/util.py"])
    receive(repo, mine.key, {"src/util.py": b"five\n"}, load_private_key())
    other_pub = stranger.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH)
    public_key_path().write_bytes(other_pub + b" not-this-machine\n")
    assert own_signer_unpinned(repo.signature(mine.key), trust_anchors(repo.trusted_keys, repo.root)) is None
    assert "this machine's own" not in signature_check(repo, mine)
    with pytest.raises(GenjobError, match="this machine has no worker key whose public half is there"):
        trust_own_worker_key(repo)
    assert not list(repo.trusted_keys.glob("*.pub")), "nothing was pinned"
