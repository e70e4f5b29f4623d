"""The planner plane: turn an instruction and paths into an immutable job document."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence

from core.canonical import canonical, read_bytes, sha256_bytes, sha256_file
from core.errors import BadInput, SecretFound
from core.layout import Layout
from core.models import V1, V2, Job, JobV1, job_from_obj
from core.paths import checked, regular_file_inside
from core.secrets_scan import find_secrets

_SCAN_LIMIT = 8 * 1024 * 1024


def _secret_message(source: str, data: bytes) -> str | None:
    hits = find_secrets(data)
    if not hits:
        return None
    kinds = ", ".join(f"{h.kind} (line {h.line})" for h in hits)
    return f"{source}: looks like it holds a secret: {kinds}; refusing (--allow-secrets overrides)"


def hash_inputs(layout: Layout, paths: Sequence[str], allow_secrets: bool) -> dict[str, str]:
    """sha256 of each existing allowed path, checked against the path rules and secrets."""
    inputs: dict[str, str] = {}
    for rel in paths:
        st = regular_file_inside(layout.root, rel)
        if st is None:
            raise BadInput(f"{rel}: no such file (use --new for a path the job creates)")
        full = layout.root / rel
        if not allow_secrets and st.st_size <= _SCAN_LIMIT:
            data = read_bytes(full, _SCAN_LIMIT)
            msg = _secret_message(rel, data)
            if msg:
                raise SecretFound(msg)
            inputs[rel] = sha256_bytes(data)  # the bytes that were scanned, read once
        else:
            inputs[rel] = sha256_file(full)
    return inputs


def build_job(
    layout: Layout,
    instruction: str,
    paths: Sequence[str],
    new_paths: Sequence[str] = (),
    schema: str = V2,
    replay_of: str | None = None,
    allow_secrets: bool = False,
) -> Job:
    """Mint a job over the tree as it is now. Nothing is written."""
    if not instruction.strip():
        raise BadInput("instruction: empty")
    if not allow_secrets:
        msg = _secret_message("instruction", instruction.encode())
        if msg:
            raise SecretFound(msg)
    for rel in [*paths, *new_paths]:
        checked(rel, "path")
    dupes = sorted({p for p in [*paths, *new_paths] if [*paths, *new_paths].count(p) > 1})
    if dupes:
        raise BadInput(f"path: {dupes[0]!r} named twice")
    if not paths and not new_paths:
        raise BadInput("path: a job needs at least one allowed path")
    inputs = hash_inputs(layout, paths, allow_secrets)
    for rel in new_paths:
        if regular_file_inside(layout.root, rel) is not None:
            raise BadInput(f"{rel}: exists already; name it as a path, not --new")
    now = int(time.time())
    if schema == V1:
        if new_paths:
            raise BadInput("--new: genjob.v1 jobs cannot create files (use --schema v2)")
        if replay_of:
            raise BadInput("replay: genjob.v1 has no replay_of field")
        key = sha256_bytes(canonical({"instruction": instruction, "inputs": inputs}))[:32]
        body = {
            "schema": V1,
            "job_id": str(uuid.uuid4()),
            "idempotency_key": key,
            "created_at": now,
            "instruction": instruction,
            "allowed_paths": list(paths),
            "inputs": inputs,
            "attempt": 1,
        }
        digest = sha256_bytes(canonical(body))
        return JobV1.model_validate({**body, "digest": digest})
    if schema != V2:
        raise BadInput(f"--schema: unknown schema {schema!r}")
    all_inputs: dict[str, str | None] = {**inputs, **{p: None for p in new_paths}}
    ordered = sorted(all_inputs)
    meaning: dict[str, object] = {
        "schema": V2,
        "instruction": instruction,
        "allowed_paths": ordered,
        "inputs": {p: all_inputs[p] for p in ordered},
    }
    if replay_of:
        meaning["replay_of"] = replay_of
    digest = sha256_bytes(canonical(meaning))
    doc = {**meaning, "idempotency_key": digest[:32], "created_at": now, "digest": digest}
    return job_from_obj(doc, "minted job")
