"""Ed25519 worker keys, detached receipt signatures, and the pinned trusted keys.

The private key lives in the user's config folder (``$XDG_CONFIG_HOME/genjob``), never
under `.gen/`. A signature file is a small JSON object naming the signing key's
fingerprint; it covers the receipt's canonical bytes.

Keys are pinned in two places: the repository's `.gen/trusted_keys/` and the operator's
own `trusted_keys/` beside the worker key. A pinned key counts only if no user other
than the owner of its place could have written it (`core.store.ownership`), and the
operator's policy can turn the repository's list off (`trust_repository_keys = false`).
A key file in `.gen/trusted_keys/` counts only if the operator pinned its fingerprint for
this repository (`core.store.pins`): one that arrived with the repository is data, not trust.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from core.errors import BadInput, GenjobError
from core.model.canonical import loads_strict, read_bytes
from core.model.sshsig import RECEIPT_NAMESPACE, allowed_signers_keys, allowed_signers_line, sign_ssh
from core.store.config import load_operator_config
from core.store.durable import atomic_write, create_exclusive
from core.store.layout import Layout, config_folder, user_config_dir
from core.store.ownership import operator_owners, repository_owners, untrusted_because
from core.store.pins import pin_key, read_pins

KEY_NAME = "worker_ed25519"
# The operator's own key: it signs what the operator vouches for (attestations, commits),
# apart from the worker key, which signs what a generator sent back.
OPERATOR_KEY_NAME = "operator_ed25519"


def config_dir() -> Path:
    return user_config_dir()


def operator_keys_dir() -> Path:
    """The operator's pinned keys: no repository can add to them."""
    return config_dir() / "trusted_keys"


def private_key_path() -> Path:
    return config_dir() / KEY_NAME


def public_key_path() -> Path:
    return config_dir() / f"{KEY_NAME}.pub"


def fingerprint(pub: Ed25519PublicKey) -> str:
    raw = pub.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    blob = base64.b64decode(raw.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def operator_key_path() -> Path:
    return config_dir() / OPERATOR_KEY_NAME


def keygen(force: bool = False, *, operator: bool = False) -> Path:
    """Make the worker key pair (or, with `operator`, the operator's); returns the public
    key file. Refuses to overwrite. Both are OpenSSH keys `ssh-keygen` reads."""
    priv_path = operator_key_path() if operator else private_key_path()
    pub_path = priv_path.with_name(priv_path.name + ".pub")
    what = "an operator key" if operator else "a worker key"
    if priv_path.exists() and not force:
        raise GenjobError(f"{priv_path}: {what} exists already (use --force to replace)")
    config_folder()
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    pub = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    atomic_write(priv_path, pem, mode=0o600)
    atomic_write(pub_path, pub + (b" genjob-operator\n" if operator else b" genjob-worker\n"))
    return pub_path


def load_private_key(path: Path | None = None) -> Ed25519PrivateKey:
    path = path or private_key_path()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        hint = "genjob keygen --operator" if path.name == OPERATOR_KEY_NAME else "genjob keygen"
        raise GenjobError(
            f"{path}: no {'operator' if 'operator' in hint else 'worker'} key (run `{hint}`)"
        ) from None
    try:
        key = serialization.load_ssh_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise BadInput(f"{path}: not an unencrypted OpenSSH private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BadInput(f"{path}: not an Ed25519 key")
    return key


def load_operator_key() -> Ed25519PrivateKey:
    """The operator's key, which signs attestations and commits."""
    return load_private_key(operator_key_path())


def parse_public_key(data: bytes, source: str) -> Ed25519PublicKey:
    if data.lstrip().startswith(b"-----BEGIN"):
        raise BadInput(f"{source}: a private key; pin the public half instead (its .pub file)")
    try:
        key = serialization.load_ssh_public_key(data.strip())
    except (ValueError, TypeError, IndexError, UnsupportedAlgorithm) as exc:
        raise BadInput(f"{source}: not an OpenSSH public key ({exc})") from None
    if not isinstance(key, Ed25519PublicKey):
        raise BadInput(f"{source}: not an Ed25519 public key (genjob workers sign with Ed25519)")
    return key


def store_key(trusted_dir: Path, pub_file: Path) -> tuple[Path, str]:
    """Copy a worker public key into `trusted_dir` (a copy already there is kept); returns
    where it is and its fingerprint."""
    return _store(trusted_dir, read_bytes(pub_file, 16 * 1024), str(pub_file))


def _store(trusted_dir: Path, data: bytes, source: str) -> tuple[Path, str]:
    key = parse_public_key(data, source)
    fp = fingerprint(key)
    name = fp.removeprefix("SHA256:").replace("/", "_").replace("+", "-")[:16] + ".pub"
    dest = trusted_dir / name
    if trusted_dir == operator_keys_dir():
        config_folder(trusted_dir.name)
    else:
        trusted_dir.mkdir(mode=0o700, exist_ok=True)
    if not create_exclusive(dest, data.strip() + b"\n"):
        there = parse_public_key(read_bytes(dest, 16 * 1024), str(dest))
        if fingerprint(there) != fp:
            raise BadInput(f"{dest}: holds another key than {source}; move it away and pin again")
    return dest, fp


def trust_operator(pub_file: Path) -> tuple[Path, str]:
    """Pin a worker public key for every repository, in the operator's own folder."""
    return store_key(operator_keys_dir(), pub_file)


def trust_repository(layout: Layout, pub_file: Path) -> tuple[Path, str]:
    """Pin a worker public key for this repository: its file in `.gen/trusted_keys/`, its
    fingerprint in the operator's pins. A key file that is there already (it may have come
    with the repository) is pinned by naming it."""
    dest, fp = store_key(layout.trusted_keys, pub_file)
    pin_key(layout.root, fp)
    return dest, fp


def trust_allowed_signers(signers_file: Path, layout: Layout | None = None) -> list[tuple[Path, str]]:
    """Pin every key an OpenSSH `allowed_signers` file trusts for receipts: for this
    repository (`layout`), or for every one (None)."""
    text = read_bytes(signers_file, 1 << 20).decode("utf-8", "replace")
    pinned = []
    for number, line in allowed_signers_keys(text, RECEIPT_NAMESPACE, str(signers_file)):
        source = f"{signers_file}: line {number}"
        if layout is None:
            pinned.append(_store(operator_keys_dir(), line, source))
        else:
            dest, fp = _store(layout.trusted_keys, line, source)
            pin_key(layout.root, fp)
            pinned.append((dest, fp))
    if not pinned:
        raise BadInput(f"{signers_file}: no Ed25519 key trusted for {RECEIPT_NAMESPACE} signatures in it")
    return pinned


def allowed_signers(anchors: Anchors) -> str:
    """The keys that count as an OpenSSH `allowed_signers` file, for `ssh-keygen -Y verify
    -n genjob-receipt` (any principal: genjob trusts a key, not a worker's name)."""
    lines = [
        f"# {k.fingerprint} {k.path}\n{allowed_signers_line(k.key, RECEIPT_NAMESPACE)}" for k in anchors.keys
    ]
    return "".join(line + "\n" for line in lines)


@dataclass(frozen=True)
class TrustedKey:
    path: Path
    fingerprint: str
    key: Ed25519PublicKey


@dataclass(frozen=True)
class Anchors:
    """The keys a signature may be checked against, and the pinned keys that do not count
    (fingerprint, or file name when it does not parse, to the reason)."""

    keys: list[TrustedKey]
    refused: dict[str, str]


def _pinned(
    folder: Path, untrusted: Callable[[Path], str | None], refused: dict[str, str]
) -> list[TrustedKey]:
    """The keys pinned in `folder` that parse and pass `untrusted`; the others go to `refused`."""
    out: list[TrustedKey] = []
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".pub"))
    except (FileNotFoundError, NotADirectoryError):
        return out
    for name in names:
        path = folder / name
        try:
            key = parse_public_key(read_bytes(path, 16 * 1024), str(path))
        except BadInput as exc:
            refused[str(path)] = str(exc)
            continue
        fp = fingerprint(key)
        why = untrusted(path)
        if why is not None:
            refused[fp] = f"its pinned key {path} is not trusted: {why}"
            continue
        out.append(TrustedKey(path, fp, key))
    return out


def trust_anchors(repo_keys: Path, root: Path) -> Anchors:
    """Every pinned key that counts: the operator's, and the repository's unless the
    operator's policy turns them off."""
    refused: dict[str, str] = {}
    mine, owners = config_dir(), operator_owners()
    keys = _pinned(operator_keys_dir(), lambda p: untrusted_because(p, mine, owners), refused)
    gen, repo_owners = root / ".gen", repository_owners(root)
    pinned = read_pins(root).keys
    repo = [
        k
        for k in _pinned(repo_keys, lambda p: untrusted_because(p, gen, repo_owners), refused)
        if k.fingerprint in pinned or _not_pinned(k, refused)
    ]
    if load_operator_config().policy.trust_repository_keys:
        keys += repo
    else:
        for k in repo:
            refused[k.fingerprint] = (
                f"it is pinned only in {k.path}, and your operator policy trusts no repository keys "
                f"(trust_repository_keys = false in {config_dir() / 'config.toml'}); "
                "pin it with: genjob trust --operator <its .pub file>"
            )
    return Anchors(keys, refused)


def _not_pinned(key: TrustedKey, refused: dict[str, str]) -> bool:
    """Refuse a key whose file is in `.gen/trusted_keys/` but whose pin is not the operator's."""
    refused[key.fingerprint] = (
        f"its key file {key.path} was not pinned by you for this repository (it may have come with "
        f"it); if you run that worker, pin it with: genjob trust {key.path}"
    )
    return False


def trusted_keys(trusted_dir: Path) -> list[TrustedKey]:
    """Every key pinned in one folder; a file that does not parse is reported, not skipped."""
    refused: dict[str, str] = {}
    keys = _pinned(trusted_dir, lambda p: None, refused)
    if refused:
        raise BadInput(next(iter(refused.values())))
    return keys


def own_worker_key() -> TrustedKey | None:
    """This machine's worker key (`genjob keygen`): its `.pub` file, when the private key
    beside it loads and the file holds its public half; else None."""
    try:
        private = load_private_key()
    except GenjobError:
        return None
    path = public_key_path()
    try:
        key = parse_public_key(read_bytes(path, 16 * 1024), str(path))
    except (BadInput, OSError):
        return None
    fp = fingerprint(key)
    return TrustedKey(path, fp, key) if fp == fingerprint(private.public_key()) else None


def own_signer_unpinned(sig_path: Path, anchors: Anchors) -> TrustedKey | None:
    """This machine's worker key, when it signed the signature file at `sig_path` and
    nothing pins it (nor refuses it for a reason of its own); else None. Only then may a
    board offer to trust it (`trust_own_worker_key`)."""
    try:
        doc = loads_strict(read_bytes(sig_path, 16 * 1024), str(sig_path), 16 * 1024)
    except (BadInput, OSError):
        return None
    signer = doc.get("key") if isinstance(doc, dict) else None
    own = own_worker_key()
    if own is None or signer != own.fingerprint or signer in anchors.refused:
        return None
    return None if any(k.fingerprint == signer for k in anchors.keys) else own


def trust_own_worker_key(layout: Layout) -> tuple[Path, str]:
    """Pin this machine's own worker key for the repository, as `genjob trust` would with its
    `.pub` file; GenjobError when this machine has none."""
    own = own_worker_key()
    if own is None:
        raise GenjobError(
            f"{public_key_path()}: this machine has no worker key whose public half is there (genjob keygen)"
        )
    return trust_repository(layout, own.path)


def sign_receipt(key: Ed25519PrivateKey, body: bytes) -> tuple[bytes, bytes]:
    """A receipt's two signatures over its bytes: genjob's detached `.sig`, and an OpenSSH
    SSHSIG under the `genjob-receipt` namespace that `ssh-keygen -Y verify` checks."""
    return sign(key, body), sign_ssh(key, body, RECEIPT_NAMESPACE)


def sign(key: Ed25519PrivateKey, message: bytes) -> bytes:
    """The detached signature file's bytes for `message`."""
    sig = key.sign(message)
    doc = {
        "alg": "ed25519",
        "key": fingerprint(key.public_key()),
        "sig": base64.b64encode(sig).decode(),
    }
    return json.dumps(doc, sort_keys=True).encode() + b"\n"


def check_signature(sig_bytes: bytes, source: str, message: bytes, anchors: Anchors) -> str:
    """Return the fingerprint of the trusted key that signed `message`, or raise BadInput."""
    doc = loads_strict(sig_bytes, source, 16 * 1024)
    if not isinstance(doc, dict) or doc.get("alg") != "ed25519" or set(doc) != {"alg", "key", "sig"}:
        raise BadInput(f"{source}: not a genjob ed25519 signature file")
    try:
        sig = base64.b64decode(doc["sig"], validate=True)
    except (ValueError, TypeError):
        raise BadInput(f"{source}: signature is not base64") from None
    signer = doc["key"]
    match = [t for t in anchors.keys if t.fingerprint == signer]
    if not match:
        if isinstance(signer, str) and signer in anchors.refused:
            raise BadInput(f"{source}: signed by {signer}, but {anchors.refused[signer]}")
        unreadable = [f"{path} ({why})" for path, why in anchors.refused.items() if path.endswith(".pub")]
        own = own_worker_key()
        if own is not None and own.fingerprint == signer:
            head = (
                f"{source}: signed by {signer}, this machine's own worker key, which is not a trusted key "
                f"here; pin its public key with: genjob trust {own.path}"
            )
        else:
            head = (
                f"{source}: signed by {signer}, which is not a trusted key; if you run that worker, "
                "pin its public key with: genjob trust <its .pub file>"
            )
        raise BadInput(
            head + (f"; pinned keys that could not be read: {'; '.join(unreadable)}" if unreadable else "")
        )
    try:
        match[0].key.verify(sig, message)
    except InvalidSignature:
        raise BadInput(f"{source}: signature does not match the receipt (key {doc['key']})") from None
    return str(doc["key"])
