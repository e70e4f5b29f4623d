"""OpenSSH signatures (SSHSIG): what `ssh-keygen -Y sign` makes and `ssh-keygen -Y verify` checks.

A receipt's detached `.sig` is genjob's own format; an SSHSIG beside it lets anyone with
OpenSSH check the same bytes without genjob. The format is OpenSSH's `PROTOCOL.sshsig`:
a signature over the message's SHA-512 and a namespace that keeps a receipt's signature
from passing for a signature of anything else, armored between `BEGIN/END SSH SIGNATURE`.
Only Ed25519 is made or read here: genjob's worker and operator keys are Ed25519.
"""

from __future__ import annotations

import base64
import hashlib
import shlex
import struct

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from core.errors import BadInput

RECEIPT_NAMESPACE = "genjob-receipt"
_MAGIC = b"SSHSIG"
_VERSION = 1
_HASH = b"sha512"
_KEY_TYPE = b"ssh-ed25519"
_BEGIN, _END = "-----BEGIN SSH SIGNATURE-----", "-----END SSH SIGNATURE-----"
_LINE = 70


def _string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _strings(blob: bytes, count: int) -> tuple[list[bytes], bytes]:
    """The first `count` SSH strings of `blob`, and what follows them."""
    out = []
    for _ in range(count):
        if len(blob) < 4:
            raise BadInput("an SSH signature cut short")
        (size,) = struct.unpack(">I", blob[:4])
        if len(blob) < 4 + size:
            raise BadInput("an SSH signature cut short")
        out.append(blob[4 : 4 + size])
        blob = blob[4 + size :]
    return out, blob


def public_blob(key: Ed25519PublicKey) -> bytes:
    """The key as SSH encodes it in a signature: its type and its 32 bytes."""
    return _string(_KEY_TYPE) + _string(key.public_bytes(Encoding.Raw, PublicFormat.Raw))


def _signed_data(namespace: str, message: bytes) -> bytes:
    digest = hashlib.sha512(message).digest()
    return _MAGIC + _string(namespace.encode()) + _string(b"") + _string(_HASH) + _string(digest)


def sign_ssh(key: Ed25519PrivateKey, message: bytes, namespace: str) -> bytes:
    """The armored SSHSIG of `message` under `namespace`, as `ssh-keygen -Y sign` writes it."""
    signature = key.sign(_signed_data(namespace, message))
    blob = (
        _MAGIC
        + struct.pack(">I", _VERSION)
        + _string(public_blob(key.public_key()))
        + _string(namespace.encode())
        + _string(b"")
        + _string(_HASH)
        + _string(_string(_KEY_TYPE) + _string(signature))
    )
    text = base64.b64encode(blob).decode()
    lines = [text[i : i + _LINE] for i in range(0, len(text), _LINE)]
    return "\n".join([_BEGIN, *lines, _END]).encode() + b"\n"


def verify_ssh(armored: bytes, message: bytes, namespace: str) -> Ed25519PublicKey:
    """The key that made `armored`, an SSHSIG of `message` under `namespace`; BadInput if not."""
    text = armored.decode("ascii", "replace").strip().splitlines()
    if len(text) < 3 or text[0] != _BEGIN or text[-1] != _END:
        raise BadInput("not an armored SSH signature")
    try:
        blob = base64.b64decode("".join(text[1:-1]), validate=True)
    except ValueError:
        raise BadInput("an SSH signature that is not base64") from None
    if blob[:6] != _MAGIC or blob[6:10] != struct.pack(">I", _VERSION):
        raise BadInput("not an SSHSIG of version 1")
    (pub, space, _reserved, hashed, sig), rest = _strings(blob[10:], 5)
    if rest or space.decode(errors="replace") != namespace or hashed != _HASH:
        raise BadInput(f"not an SSH signature of namespace {namespace} over sha512")
    (key_type, raw), _ = _strings(pub, 2)
    (sig_type, sig_bytes), _ = _strings(sig, 2)
    if key_type != _KEY_TYPE or sig_type != _KEY_TYPE or len(raw) != 32:
        raise BadInput("an SSH signature not made by an Ed25519 key")
    key = Ed25519PublicKey.from_public_bytes(raw)
    try:
        key.verify(sig_bytes, _signed_data(namespace, message))
    except InvalidSignature:
        raise BadInput("the SSH signature does not match these bytes") from None
    return key


def allowed_signers_line(key: Ed25519PublicKey, namespace: str, principals: str = "*") -> str:
    """One line of an OpenSSH `allowed_signers` file trusting `key` for `namespace`."""
    openssh = key.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()
    return f'{principals} namespaces="{namespace}" {openssh}'


_KEY_PREFIXES = ("ssh-", "ecdsa-", "sk-")


def is_allowed_signers(text: str) -> bool:
    """Whether `text` reads as an `allowed_signers` file: its first line that is not a
    comment starts with principals and names a key type after them. A key file, a private
    key or anything else is not (and gets the key reader's message)."""
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            try:
                fields = shlex.split(line)
            except ValueError:
                return False
            return not fields[0].startswith(_KEY_PREFIXES) and any(
                f.startswith(_KEY_PREFIXES) for f in fields[1:]
            )
    return False


def allowed_signers_keys(text: str, namespace: str, source: str) -> list[tuple[int, bytes]]:
    """The Ed25519 keys of an `allowed_signers` file that may sign for `namespace`, each
    with its line number, as OpenSSH key lines; a line of another key type is refused."""
    keys = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            fields = shlex.split(line)
        except ValueError:
            raise BadInput(f"{source}: line {number}: not an allowed_signers line") from None
        at = next((i for i, f in enumerate(fields) if f.startswith(_KEY_PREFIXES)), None)
        if at is None or at + 1 >= len(fields):
            raise BadInput(f"{source}: line {number}: no key in it")
        if fields[at] != _KEY_TYPE.decode():
            raise BadInput(f"{source}: line {number}: a {fields[at]} key; genjob pins Ed25519 keys only")
        options = ",".join(fields[1:at])
        spaces = next((o.split("=", 1)[1] for o in options.split(",") if o.startswith("namespaces=")), None)
        if spaces is None or namespace in spaces.split(","):
            keys.append((number, f"{fields[at]} {fields[at + 1]}".encode()))
    return keys
