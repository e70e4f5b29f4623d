"""The append-only audit log `.gen/events.jsonl` and the per-job attempt records."""

from __future__ import annotations

import functools
import getpass
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from core.canonical import canonical, read_bytes
from core.durable import append_line
from core.layout import Layout

# A log or attempts file past this size is refused rather than read into memory.
MAX_LOG_BYTES = 256 << 20


@functools.cache
def actor() -> str:
    """Who is acting, as recorded in events: user@host (looked up once per process)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def record_event(layout: Layout, event: str, key: str | None, **fields: Any) -> dict[str, Any]:
    """Append one event line; returns the event as written."""
    entry = {"at": time.time(), "event": event, "key": key, "by": actor(), **fields}
    append_line(layout.events, canonical(entry))
    return entry


def record_attempt(layout: Layout, key: str, event: str, **fields: Any) -> None:
    """Append to `.gen/attempts/<key>.jsonl`: retries are operational, never in the digest."""
    entry = {"at": time.time(), "event": event, **fields}
    append_line(layout.attempts_file(key), canonical(entry))


def _read_log(path: Path) -> bytes:
    """A log's bytes (none when it does not exist yet); BadInput for anything but a
    regular file within MAX_LOG_BYTES."""
    return read_bytes(path, MAX_LOG_BYTES) if os.path.lexists(path) else b""


def read_jsonl(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Parse a JSON-lines file, skipping lines that do not parse (an audit log is evidence)."""
    out = []
    for line in _read_log(path).splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out[-limit:] if limit else out


def attempts(layout: Layout, key: str) -> list[dict[str, Any]]:
    return read_jsonl(layout.attempts_file(key))


def claims(records: list[dict[str, Any]]) -> int:
    """How many times the job was claimed: the current attempt number."""
    return sum(1 for r in records if r.get("event") == "claimed")


def job_events(layout: Layout, key: str) -> list[dict[str, Any]]:
    """The audit log's lines about `key` (a byte search first: the log grows large)."""
    data = _read_log(layout.events)
    needle = key.encode()
    out = []
    for line in data.splitlines():
        if needle in line:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("key") == key:
                out.append(obj)
    return out
