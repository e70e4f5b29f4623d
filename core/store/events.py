"""The append-only audit log `.gen/events.jsonl` and the per-job attempt records.

What a generator host sends back (a reason, a list of violations) ends up here, so every
recorded value is bounded first (`bounded`): a hostile host cannot grow the log until
reading it stops working. Reading is bounded too: a log past `MAX_READ_BYTES` is read
from its tail, never refused, so `show` and the board keep working on a big log.
"""

from __future__ import annotations

import functools
import getpass
import json
import os
import socket
import stat
import time
from pathlib import Path
from typing import Any

from core.errors import BadInput
from core.model.canonical import canonical, read_bytes
from core.store.durable import append_line
from core.store.layout import Layout
from core.store.tree import FILE_FLAGS, make_folder

# What one recorded string, list or object may hold; longer ones are cut with a note.
MAX_FIELD_CHARS = 2000
MAX_FIELD_ITEMS = 50
# How much of the audit log is read: its last bytes.
MAX_READ_BYTES = 16 << 20
# An attempts file is read whole (its claims count is the fencing token); past this it is refused.
MAX_ATTEMPTS_BYTES = 64 << 20


@functools.cache
def actor() -> str:
    """Who is acting, as recorded in events: user@host (looked up once per process)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def bounded(value: Any, depth: int = 0) -> Any:
    """`value` with every string cut to `MAX_FIELD_CHARS` and every list or object to
    `MAX_FIELD_ITEMS` entries, each cut marked; nesting past a few levels is summarised."""
    if isinstance(value, str):
        if len(value) <= MAX_FIELD_CHARS:
            return value
        return value[:MAX_FIELD_CHARS] + f"… ({len(value) - MAX_FIELD_CHARS} more characters)"
    if depth > 4 and isinstance(value, (list, tuple, dict)):
        return f"({type(value).__name__} nested too deeply to record)"
    if isinstance(value, (list, tuple)):
        items = [bounded(v, depth + 1) for v in value[:MAX_FIELD_ITEMS]]
        if len(value) > MAX_FIELD_ITEMS:
            items.append(f"… ({len(value) - MAX_FIELD_ITEMS} more)")
        return items
    if isinstance(value, dict):
        kept = list(value.items())[:MAX_FIELD_ITEMS]
        out = {str(bounded(k, depth + 1)): bounded(v, depth + 1) for k, v in kept}
        if len(value) > MAX_FIELD_ITEMS:
            out["…"] = f"{len(value) - MAX_FIELD_ITEMS} more"
        return out
    return value


def record_event(layout: Layout, event: str, key: str | None, **fields: Any) -> dict[str, Any]:
    """Append one event line, every field bounded; returns the event as written."""
    entry = {"at": time.time(), "event": event, "key": key, "by": actor(), **bounded(fields)}
    append_line(layout.events, canonical(entry))
    return entry


def record_attempt(layout: Layout, key: str, event: str, **fields: Any) -> None:
    """Append to `.gen/attempts/<key>.jsonl`: retries are operational, never in the digest."""
    entry = {"at": time.time(), "event": event, **bounded(fields)}
    path = layout.attempts_file(key)
    try:
        append_line(path, canonical(entry))
    except FileNotFoundError:  # attempts/ itself is gone (a clone keeps no empty folder)
        make_folder(path.parent, layout.gen)
        append_line(path, canonical(entry))


def read_tail(path: Path, limit: int = MAX_READ_BYTES) -> bytes:
    """The whole lines among the last `limit` bytes of a regular file (none when it does
    not exist). Not blocking on a FIFO, not following a link: BadInput for those."""
    try:
        fd = os.open(path, FILE_FLAGS)
    except FileNotFoundError:
        return b""
    except OSError as exc:
        raise BadInput(f"{path}: cannot read ({exc.strerror}); a log must be a regular file") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{path}: not a regular file; a log must be one")
        # One byte more than the limit, from just before it: a newline there means the
        # first line in reach is whole.
        cut = st.st_size > limit
        start = st.st_size - limit - 1 if cut else 0
        os.lseek(fd, start, os.SEEK_SET)
        chunks = []
        left = st.st_size - start
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if cut:
        _, _, data = data.partition(b"\n")  # up to the first line in reach, which may be cut
    return data


def _parse_lines(data: bytes, needle: bytes | None = None) -> list[dict[str, Any]]:
    out = []
    for line in data.splitlines():
        if needle is not None and needle not in line:
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def attempts(layout: Layout, key: str) -> list[dict[str, Any]]:
    """Every record of `.gen/attempts/<key>.jsonl`, read whole (lines that do not parse are
    skipped); BadInput for a file that is not regular or is over `MAX_ATTEMPTS_BYTES`."""
    path = layout.attempts_file(key)
    return _parse_lines(read_bytes(path, MAX_ATTEMPTS_BYTES) if os.path.lexists(path) else b"")


def claims(records: list[dict[str, Any]]) -> int:
    """How many times the job was claimed: the current attempt number."""
    return sum(1 for r in records if r.get("event") == "claimed")


def last_claim(layout: Layout, key: str) -> tuple[int, str]:
    """(claims, the worker the last claim naming one names): what a listing shows of a job's
    attempts, counted as `claims` counts them; (0, "") when its attempts file cannot be read."""
    try:
        claimed = [r for r in attempts(layout, key) if r.get("event") == "claimed"]
    except BadInput:
        return 0, ""
    named = [str(r["worker"]) for r in claimed if r.get("worker")]
    return len(claimed), named[-1] if named else ""


def job_events(layout: Layout, key: str) -> list[dict[str, Any]]:
    """The audit log's lines about `key` (a byte search first: the log grows large)."""
    return [e for e in _parse_lines(read_tail(layout.events), key.encode()) if e.get("key") == key]
