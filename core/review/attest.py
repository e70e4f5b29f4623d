"""In-toto attestations of applied jobs: evidence anyone can check without genjob.

`genjob attest KEY` writes, for an applied job, an in-toto Statement v1 in a DSSE
envelope, signed with the operator's key (`genjob keygen --operator`), to
`.gen/attestations/<key>.intoto.jsonl` (JSON Lines, one envelope a line, as in-toto
bundles are). It says "this operator applied these bytes after these checks": its
subjects are the applied paths with their sha256, and its predicate (of type
`PREDICATE_TYPE`) holds the job (its instruction's digest, inputs and allowed paths), the
receipt and its signer, each check record (command, result, the hashes it ran over), the
host that generated the outputs, and the apply record (who, when, what was written over
what). Every value is taken from files genjob keeps, each named with its sha256, so an
auditor can hold each claim to its file.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import BadInput, WrongState
from core.model.canonical import canonical, read_bytes, sha256_bytes
from core.store.candidate_store import CHOSEN
from core.store.check_records import read_record
from core.store.durable import atomic_write
from core.store.events import attempts, record_event
from core.store.layout import Layout
from core.store.queue import locate
from core.store.signing import fingerprint
from core.store.tree import make_folder

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
# genjob's own predicate: a URN, since genjob has no web address of its own to name it by.
PREDICATE_TYPE = "urn:genjob:predicate:apply:v1"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what a DSSE signature covers."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def statement(layout: Layout, key: str) -> dict[str, Any]:
    """The in-toto statement of `key`'s apply, from the files genjob keeps of it."""
    loc = locate(layout, key)
    if loc.folder != "applied" or not isinstance(loc.record, dict):
        raise WrongState(f"{key}: is not applied; an attestation speaks of an applied job")
    applied = loc.record.get("apply")
    if not isinstance(applied, dict):
        raise BadInput(f"{loc.path}: no apply record in it")
    job = loc.job
    receipt_bytes = read_bytes(layout.receipt(key))
    receipt = json.loads(receipt_bytes)
    targets = [t for t in applied.get("targets", []) if isinstance(t, dict)]
    changed = set(applied.get("changed", []))
    subjects = [
        {"name": t["path"], "digest": {"sha256": t["after"]}} for t in targets if t.get("path") in changed
    ]
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "job": {
                "key": key,
                "schema": job.schema_name,
                "digest": job.digest,
                "instructionSha256": sha256_bytes(job.instruction.encode()),
                "allowedPaths": list(job.allowed_paths),
                "inputs": dict(job.inputs),
                "fileSha256": sha256_bytes(read_bytes(loc.path)),
            },
            "receipt": {
                "sha256": sha256_bytes(receipt_bytes),
                "status": receipt.get("status"),
                "workerId": receipt.get("worker_id"),
                "outputs": receipt.get("outputs"),
                "signer": applied.get("signer"),
                "signatureRequired": applied.get("signature_required"),
            },
            "checks": _checks(layout, key),
            "host": _host(layout, key),
            "apply": {
                "at": applied.get("at"),
                "by": applied.get("by"),
                "targets": targets,
                "changed": sorted(changed),
            },
        },
    }


def _checks(layout: Layout, key: str) -> list[dict[str, Any]]:
    """Each check record kept for the job's receipt that genjob wrote here, with its digest."""
    folder = layout.check_dir(key)
    try:
        names = sorted(n[:-5] for n in os.listdir(folder) if n.endswith(".json"))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        try:
            record = read_record(layout, key, name)
        except BadInput:
            continue
        if record is None:
            continue
        found.append(
            {
                "name": record.name,
                "command": record.ran,
                "result": record.result.value,
                "exitCode": record.exit_code,
                "sandboxed": record.sandboxed,
                "outputs": record.outputs,
                "base": record.base,
                "recordSha256": sha256_bytes(read_bytes(layout.check_record(key, name))),
            }
        )
    return found


def _host(layout: Layout, key: str) -> dict[str, Any]:
    """Where the applied receipt came from: the host of the attempt that made it, and the
    candidate chosen, if one was."""
    records = attempts(layout, key)
    shipped = [r for r in records if r.get("event") == "shipping"]
    chosen = [r for r in records if r.get("event") == CHOSEN]
    host: dict[str, Any] = {"name": shipped[-1].get("host") if shipped else None}
    if chosen:
        number = chosen[-1].get("candidate")
        host["candidate"] = number
        host["name"] = next((r.get("host") for r in shipped if r.get("candidate") == number), host["name"])
    return host


def envelope(body: dict[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    """`body` in a DSSE envelope signed with `key` (its keyid: the key's SSH fingerprint)."""
    payload = canonical(body)
    sig = key.sign(pae(PAYLOAD_TYPE, payload))
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [{"keyid": fingerprint(key.public_key()), "sig": base64.b64encode(sig).decode()}],
    }


def attest(layout: Layout, key: str, operator_key: Ed25519PrivateKey) -> Path:
    """Write `key`'s attestation bundle (one signed envelope) and return where it is."""
    line = canonical(envelope(statement(layout, key), operator_key)) + b"\n"
    path = layout.attestation(key)
    make_folder(path.parent, layout.gen)
    atomic_write(path, line)
    record_event(layout, "attested", key, sha256=sha256_bytes(line))
    return path
