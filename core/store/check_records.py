"""Check records on disk: `.gen/checks/<key>/[candidate-<n>/|merged-<digest>/]<name>.json`, each sealed by
the genjob that wrote it (`core.store.seal`), and the `.run` file that says a run is
under way.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from pydantic import ValidationError

from core.errors import BadInput
from core.model.canonical import canonical, loads_strict, read_bytes
from core.model.check_record import CheckRecord
from core.store import procfs
from core.store.durable import atomic_write_at, folder
from core.store.layout import Layout
from core.store.ownership import repository_owners, require_trusted
from core.store.seal import seal, sealed_here
from core.store.tree import closing, open_folder, open_regular

_SEAL = "check record"


MAX_RECORD_BYTES = 4 << 20


def read_record(
    layout: Layout, key: str, name: str, candidate: int | None = None, *, merged: str | None = None
) -> CheckRecord | None:
    """The record of check `name` on `key`'s receipt (or its candidate `candidate`'s, or
    the merged bytes named `merged`); None when there is none.

    A record is a claim that policy acts on, so like an apply journal it counts only if
    no one but the repository's owner could have written it, and only if genjob wrote it
    on this machine (its seal, `core.store.seal`: a record can arrive with a repository); a
    record that does not parse, is reached through a link or fails either test raises
    BadInput.
    """
    path = layout.check_record(key, name, candidate, merged=merged)
    try:
        with folder(layout.gen) as gen:
            fd = open_folder(gen, layout.check_parts(key, candidate, merged=merged), str(path.parent))
    except FileNotFoundError:
        return None
    with closing(fd):
        opened = open_regular(fd, path.name, str(path))
        if opened is None:
            return None
        file_fd, _ = opened
        with closing(file_fd):
            data = os.read(file_fd, MAX_RECORD_BYTES + 1)
    if len(data) > MAX_RECORD_BYTES:
        raise BadInput(f"{path}: over the {MAX_RECORD_BYTES}-byte limit of a check record")
    require_trusted(path, layout.gen, repository_owners(layout.root), "a check record")
    obj = loads_strict(data, str(path))
    tag = obj.pop("seal", None) if isinstance(obj, dict) else None
    if not sealed_here(_SEAL, _sealed_part(layout, path, obj), tag):
        raise BadInput(
            f"{path}: not written by genjob on this machine (its seal does not verify: it may have "
            "come with the repository), so it counts for nothing"
        )
    try:
        record = CheckRecord.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise BadInput(f"{path}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    if record.key != key or record.name != name:
        raise BadInput(f"{path}: a record of {record.name} on {record.key}, not of this check")
    return record


def _sealed_part(layout: Layout, path: Path, obj: object) -> bytes:
    """What a record's seal covers: where it lives below `.gen/`, and its document."""
    return str(path.relative_to(layout.gen)).encode() + b"\0" + canonical(obj)


def write_record(
    layout: Layout, record: CheckRecord, candidate: int | None = None, *, merged: str | None = None
) -> Path:
    """Write a record (of the job's receipt, of its candidate `candidate`, or of the merged
    bytes named `merged`), sealed, atomically and durably, through real folders only."""
    where = layout.check_dir(record.key, candidate, merged=merged)
    with folder(layout.gen) as gen:
        fd = open_folder(gen, layout.check_parts(record.key, candidate, merged=merged), str(where), [])
    with closing(fd):
        path = layout.check_record(record.key, record.name, candidate, merged=merged)
        doc = record.document()
        doc["seal"] = seal(_SEAL, _sealed_part(layout, path, doc))
        atomic_write_at(fd, path.name, canonical(doc), path)
    return path


def running_since(layout: Layout, key: str, name: str, candidate: int | None = None) -> float | None:
    """When the run of check `name` on `key` (or its candidate) under way started; None
    when none is."""
    path = layout.check_dir(key, candidate) / f"{name}.run"
    try:
        info = loads_strict(read_bytes(path, 64 << 10), str(path))
    except BadInput:
        return None
    if not isinstance(info, dict):
        return None
    pid, started, host = info.get("pid"), info.get("started_at"), info.get("host")
    if not isinstance(pid, int) or not isinstance(started, (int, float)):
        return None
    if host != socket.gethostname():
        limit = info.get("timeout")
        fresh = isinstance(limit, (int, float)) and time.time() - started < limit + 60
        return float(started) if fresh else None
    if _process_start(pid) != info.get("pid_start"):
        return None  # that process is gone (or its pid now names another)
    return float(started)


def _process_start(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot; None when there is none."""
    fields = procfs.stat_fields(pid)
    return int(fields[procfs.START_TIME]) if fields and len(fields) > procfs.START_TIME else None
