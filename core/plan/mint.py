"""The planner plane: turn an instruction and paths into an immutable job document."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from core.errors import BadInput, SecretFound
from core.model.canonical import canonical, sha256_bytes
from core.model.models import V1, V2, Job, JobV1, job_from_obj
from core.model.paths import checked, regular_file_inside
from core.plan.secrets_scan import find_secrets
from core.store.layout import Layout
from core.store.tree import closing, hash_fd, open_dir, open_folder, open_regular, read_fd

_SCAN_LIMIT = 8 * 1024 * 1024


def _secret_message(source: str, data: bytes) -> str | None:
    hits = find_secrets(data)
    if not hits:
        return None
    kinds = ", ".join(f"{h.kind} (line {h.line})" for h in hits)
    return f"{source}: looks like it holds a secret: {kinds}; refusing (--allow-secrets overrides)"


def hash_inputs(layout: Layout, paths: Sequence[str], allow_secrets: bool) -> dict[str, str]:
    """sha256 of each existing allowed path, checked against the path rules and secrets.

    Files are hashed in parallel (hashlib lets go of the GIL), each opened once through
    directory descriptors and read in large blocks; a file small enough to be scanned
    for secrets is scanned from the very bytes that are hashed.
    """
    root = open_dir(layout.root)
    try:
        # Largest first: the big files are only hashed, which runs beside the GIL-bound
        # secret scans of the small ones instead of after them.
        order = sorted(paths, key=lambda rel: -_size_hint(layout.root / rel))
        workers = max(1, min(len(paths), os.cpu_count() or 1))
        with ThreadPoolExecutor(workers) as pool:
            hashed = pool.map(lambda rel: _hash_input(root, rel, not allow_secrets), order)
            digests = dict(zip(order, hashed, strict=True))
    finally:
        os.close(root)
    return {rel: digests[rel] for rel in paths}


def _size_hint(path: Path) -> int:
    """A file's size for ordering the work only (0 when it cannot be told)."""
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def _hash_input(root: int, rel: str, scan: bool) -> str:
    missing = BadInput(f"{rel}: no such file (use --new for a path the job creates)")
    parts = rel.split("/")
    try:
        parent = open_folder(root, parts[:-1], rel)
    except FileNotFoundError:
        raise missing from None
    with closing(parent):
        opened = open_regular(parent, parts[-1], rel)
    if opened is None:
        raise missing
    fd, st = opened
    with closing(fd):
        if not (scan and st.st_size <= _SCAN_LIMIT):
            return hash_fd(fd)
        data = read_fd(fd, _SCAN_LIMIT, rel)
    msg = _secret_message(rel, data)
    if msg:
        raise SecretFound(msg)
    return sha256_bytes(data)  # the bytes that were scanned, read once


def build_job(
    layout: Layout,
    instruction: str,
    paths: Sequence[str],
    new_paths: Sequence[str] = (),
    schema: str = V2,
    *,
    replay_of: str | None = None,
    allow_secrets: bool = False,
) -> Job:
    """Mint a job over the tree as it is now. Nothing is written."""
    _check_request(instruction, paths, new_paths, allow_secrets)
    if schema not in (V1, V2):
        raise BadInput(f"--schema: unknown schema {schema!r}")
    if schema == V1 and new_paths:
        raise BadInput("--new: genjob.v1 jobs cannot create files (use --schema v2)")
    if schema == V1 and replay_of:
        raise BadInput("replay: genjob.v1 has no replay_of field")
    inputs = hash_inputs(layout, paths, allow_secrets)
    for rel in new_paths:
        if regular_file_inside(layout.root, rel) is not None:
            raise BadInput(f"{rel}: exists already; name it as a path, not --new")
    if schema == V1:
        return _v1_job(instruction, list(paths), inputs)
    return _v2_job(instruction, {**inputs, **{p: None for p in new_paths}}, replay_of)


def _check_request(
    instruction: str, paths: Sequence[str], new_paths: Sequence[str], allow_secrets: bool
) -> None:
    if not instruction.strip():
        raise BadInput("instruction: empty")
    if not allow_secrets:
        msg = _secret_message("instruction", instruction.encode())
        if msg:
            raise SecretFound(msg)
    named = [*paths, *new_paths]
    for rel in named:
        checked(rel, "path")
    dupes = sorted({p for p in named if named.count(p) > 1})
    if dupes:
        raise BadInput(f"path: {dupes[0]!r} named twice")
    if not named:
        raise BadInput("path: a job needs at least one allowed path")


def _v1_job(instruction: str, paths: list[str], inputs: dict[str, str]) -> Job:
    """The seed's document: its digest covers every field, a fresh uuid and the time too."""
    key = sha256_bytes(canonical({"instruction": instruction, "inputs": inputs}))[:32]
    body = {
        "schema": V1,
        "job_id": str(uuid.uuid4()),
        "idempotency_key": key,
        "created_at": int(time.time()),
        "instruction": instruction,
        "allowed_paths": paths,
        "inputs": inputs,
        "attempt": 1,
    }
    return JobV1.model_validate({**body, "digest": sha256_bytes(canonical(body))})


def _v2_job(instruction: str, inputs: dict[str, str | None], replay_of: str | None) -> Job:
    """The default document: its digest covers only what the job means."""
    ordered = sorted(inputs)
    meaning: dict[str, object] = {
        "schema": V2,
        "instruction": instruction,
        "allowed_paths": ordered,
        "inputs": {p: inputs[p] for p in ordered},
    }
    if replay_of:
        meaning["replay_of"] = replay_of
    digest = sha256_bytes(canonical(meaning))
    doc = {**meaning, "idempotency_key": digest[:32], "created_at": int(time.time()), "digest": digest}
    return job_from_obj(doc, "minted job")
