"""One consistent read of `.gen/`: every job with its derived state, for `ls` and the board.

Job documents and receipts never change after they are written, so what was parsed
from a file is kept in an index keyed by the file's identity (inode, size, mtime) and
reused, in memory by a long-lived `Scanner` and on disk (`.gen/cache/`) by the next
process. The index only saves work: every entry is checked against a fresh `stat`,
and verification never reads it.

Documents are checked with `core.docscan`, which accepts exactly what the strict models
accept; the strict models (and pydantic) are loaded only for a document the quick check
does not accept, to name its fault. A snapshot of an unchanged `.gen/` reads no file
but the index.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.canonical import MAX_JSON_BYTES, loads_strict, read_with_stat, sha256_file
from core.docscan import KEY_RE, lease_fresh, quick_job, quick_lease, quick_receipt
from core.durable import atomic_write
from core.errors import BadInput, GenjobError
from core.layout import JOB_FOLDERS, Layout
from core.lifecycle import (
    CLAIM_GRACE,
    LEASE_CLAIMING,
    LEASE_FRESH,
    LEASE_MISSING,
    LEASE_STALE,
    Facts,
    State,
    derive_state,
    inconsistency_rule,
)
from core.paths import lstat_inside

_CACHE_VERSION = 2
_CACHE_NAME = "snapshot.marshal"
_CONFIG = "config.toml"
_LEASE_BYTES = 64 * 1024
_ATTEMPTS_BYTES = 64 * 1024 * 1024

# An index entry: (st_ino, st_size, st_mtime_ns, what was parsed). If the identity is the
# same, so is what was parsed from the file.
Entry = tuple[int, int, int, object]
# A parsed job document: (schema, digest, instruction, allowed_paths, inputs, created_at,
# rejection reason) or an error message.
JobSummary = tuple[str, str, str, tuple[str, ...], tuple[tuple[str, str | None], ...], float, str]
Listing = dict[str, dict[str, "os.DirEntry[str] | str"]]

# A file changed this recently may change again within its mtime's granularity (one clock
# tick, or two seconds on coarse filesystems) without its identity changing: what was
# read from it is used but not kept, as git does with "racily clean" index entries.
_RACY_NS = 2_000_000_000


def _settled(st: os.stat_result) -> bool:
    return time.time_ns() - st.st_mtime_ns >= _RACY_NS


@dataclass(frozen=True, slots=True)
class JobRow:
    """What the list shows of one job."""

    key: str
    state: State
    schema: str
    digest: str
    instruction: str
    allowed_paths: tuple[str, ...]
    created_at: float
    attempts: int
    worker: str
    receipt_status: str | None
    folders: tuple[str, ...]
    problems: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "key": self.key,
            "state": self.state.value,
            "schema": self.schema,
            "digest": self.digest,
            "instruction": self.instruction,
            "allowed_paths": list(self.allowed_paths),
            "created_at": self.created_at,
            "attempts": self.attempts,
            "worker": self.worker or None,
            "receipt_status": self.receipt_status,
            "folders": list(self.folders),
            "problems": list(self.problems),
        }


@dataclass
class Snapshot:
    rows: dict[str, JobRow]
    taken_at: float
    signature_required: bool
    config_error: str | None = None
    counts: Counter[State] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.counts = Counter(r.state for r in self.rows.values())


# -- parsing one file (what is kept in the index) ----------------------------------------------
def _summary_of(job: Any, note: str) -> JobSummary:
    return (
        job.schema_name,
        job.digest,
        job.instruction,
        tuple(job.allowed_paths),
        tuple(sorted(job.inputs.items())),
        float(job.created_at),
        note,
    )


def _strict_job(path: str, folder: str) -> object:
    """The strict reader's verdict on a job file the quick check did not accept."""
    from core.queue import read_job_file

    try:
        job, record = read_job_file(Path(path), folder)
    except BadInput as exc:
        return str(exc)
    return _summary_of(job, _rejection_reason(record))


def _rejection_reason(record: object) -> str:
    rejection = record.get("rejection") if isinstance(record, dict) else None
    return str(rejection.get("reason") or "") if isinstance(rejection, dict) else ""


def _job_parser(folder: str) -> Callable[[bytes, str], object]:
    is_record = folder in ("applied", "rejected")
    # Inputs matter only to a running job's base check; elsewhere they are not kept.
    keep_inputs = folder == "running"

    def parse(data: bytes, path: str) -> object:
        try:
            obj = loads_strict(data, path)
        except BadInput as exc:
            return str(exc)
        doc, note = obj, ""
        if is_record:
            if type(obj) is not dict or "job" not in obj:
                return _strict_job(path, folder)
            doc, note = obj["job"], _rejection_reason(obj)
        summary = quick_job(doc)
        if summary is None or doc["idempotency_key"] != os.path.basename(path)[:-5]:
            return _strict_job(path, folder)
        schema, digest, instruction, paths, inputs, created = summary
        return (schema, digest, instruction, paths, inputs if keep_inputs else (), created, note)

    return parse


_JOB_PARSERS = {folder: _job_parser(folder) for folder in JOB_FOLDERS}


def _parse_receipt(data: bytes, path: str) -> object:
    try:
        obj = loads_strict(data, path)
    except BadInput as exc:
        return str(exc)
    quick = quick_receipt(obj)
    if quick is not None:
        return quick
    from core.models import receipt_from_obj

    try:
        rec = receipt_from_obj(obj, path)
    except BadInput as exc:
        return str(exc)
    return (rec.status, rec.worker_id, rec.idempotency_key, rec.job_digest)


def _parse_lease(data: bytes, path: str) -> object:
    try:
        obj = loads_strict(data, path, _LEASE_BYTES)
    except BadInput as exc:
        return str(exc)
    quick = quick_lease(obj)
    if quick is not None:
        return quick
    from core.lease import lease_from_bytes

    try:
        lease = lease_from_bytes(data, path)
    except BadInput as exc:
        return str(exc)
    return (lease.worker, lease.host, lease.pid, lease.heartbeat, lease.ttl)


def _parse_attempts(data: bytes, path: str) -> object:
    claimed, worker = 0, ""
    for line in data.splitlines():
        if b'"event":"claimed"' in line:
            claimed += 1
            with contextlib.suppress(ValueError, RecursionError):
                obj = json.loads(line)  # evidence, not a contract: a bad line is skipped
                if isinstance(obj, dict):
                    worker = str(obj.get("worker") or worker)
    return (claimed, worker)


def _config_policy(path: str) -> tuple[bool, str | None]:
    """(require_signature, the fault of a bad config.toml)."""
    from core.config import load_config

    try:
        return (load_config(Path(path)).policy.require_signature, None)
    except GenjobError as exc:
        return (True, str(exc))


# What `Scanner._parsed` returns for a file that vanished since the folder was listed.
_GONE = object()


class Scanner:
    """Builds snapshots, re-reading only files whose identity changed."""

    def __init__(self, layout: Layout, disk_cache: bool = True) -> None:
        self.layout = layout
        self.disk_cache = disk_cache
        self._gen = str(layout.gen)
        self._root = str(layout.root)
        self._files: dict[str, Entry] = {}
        self._tree: dict[str, Entry] = {}
        self._tree_now: dict[str, str | None] = {}
        self._dirty = False
        self.rows: dict[str, JobRow] = {}
        self.signature_required = True
        self.config_error: str | None = None
        if disk_cache:
            self._load_cache()

    # -- the index -------------------------------------------------------------------
    @property
    def _cache_path(self) -> Path:
        return self.layout.cache / _CACHE_NAME

    def _load_cache(self) -> None:
        try:
            with open(self._cache_path, "rb") as fh:
                data = marshal.loads(fh.read())
        except (OSError, EOFError, ValueError, TypeError):
            return
        if isinstance(data, tuple) and len(data) == 3 and data[0] == _CACHE_VERSION:
            files, tree = data[1], data[2]
            if isinstance(files, dict) and isinstance(tree, dict):
                self._files, self._tree = files, tree

    def save_cache(self) -> None:
        if not self._dirty or not self.disk_cache:
            return
        with contextlib.suppress(OSError):
            self.layout.cache.mkdir(exist_ok=True)
            blob = marshal.dumps((_CACHE_VERSION, self._files, self._tree))
            atomic_write(self._cache_path, blob, durable=False)
            self._dirty = False

    def _parsed(
        self,
        rel: str,
        entry: os.DirEntry[str] | str,
        parse: Callable[[bytes, str], object],
        limit: int = MAX_JSON_BYTES,
    ) -> object:
        """What `parse` makes of the file `rel`, from the index while its identity holds.

        `_GONE` when the file vanished since it was listed.
        """
        hit = self._files.get(rel)
        if hit is not None:
            st = self._stat(entry)
            if st is None:
                return _GONE
            if hit[0] == st.st_ino and hit[1] == st.st_size and hit[2] == st.st_mtime_ns:
                return hit[3]
        path = f"{self._gen}/{rel}"
        try:
            data, st = read_with_stat(path, limit)
        except BadInput as exc:
            missing = self._stat(entry)
            if missing is None:
                return _GONE
            st, value = missing, str(exc)
        else:
            value = parse(data, path)
        if _settled(st):
            self._files[rel] = (st.st_ino, st.st_size, st.st_mtime_ns, value)
            self._dirty = True
        return value

    def _tree_hash(self, rel: str) -> str | None:
        """The hash of a tree file; None when it is absent, "" when it is not a safe regular file."""
        if rel in self._tree_now:
            return self._tree_now[rel]
        digest = self._tree_now[rel] = self._hash_tree_file(rel)
        return digest

    def _hash_tree_file(self, rel: str) -> str | None:
        try:
            st = lstat_inside(self.layout.root, rel)
        except (BadInput, OSError):
            return ""
        if st is None:
            return None
        hit = self._tree.get(rel)
        if hit is not None and hit[:3] == (st.st_ino, st.st_size, st.st_mtime_ns):
            return hit[3]  # type: ignore[return-value]
        try:
            digest = sha256_file(Path(self._root, rel))
        except OSError:
            return ""
        if _settled(st):
            self._tree[rel] = (st.st_ino, st.st_size, st.st_mtime_ns, digest)
            self._dirty = True
        return digest

    # -- scanning --------------------------------------------------------------------------
    def _list(self, folder: str) -> dict[str, os.DirEntry[str] | str]:
        out: dict[str, os.DirEntry[str] | str] = {}
        with contextlib.suppress(FileNotFoundError), os.scandir(f"{self._gen}/{folder}") as it:
            for e in it:
                if not e.name.startswith("."):
                    out[e.name] = e
        return out

    def scan(self) -> Snapshot:
        """A full snapshot; the index makes unchanged files cost one stat each."""
        now = time.time()
        for _ in self.scan_batches(now=now):
            pass
        return Snapshot(dict(self.rows), now, self.signature_required, self.config_error)

    def scan_batches(self, size: int = 4096, now: float | None = None) -> Iterator[dict[str, JobRow]]:
        """A full scan delivered `size` rows at a time, the jobs that need an operator first.

        Keys with a receipt or in `running/` come first, then the queue, then finished
        jobs, so a board can show what matters before all of a large `.gen/` is read.
        `self.rows` holds the whole result once the iterator is exhausted.
        """
        self._read_config()
        self._tree_now = {}
        listing: Listing = {f: self._list(f) for f in (*JOB_FOLDERS, "receipts", "attempts")}
        keys: dict[str, None] = {}
        for folder in ("receipts", "running", "queue", "applied", "rejected"):
            keys.update((n[:-5], None) for n in listing[folder] if n.endswith(".json"))
        now = time.time() if now is None else now
        ordered = list(keys)
        rows: dict[str, JobRow] = {}
        for start in range(0, len(ordered), size):
            batch = {key: self._row(key, listing, now) for key in ordered[start : start + size]}
            rows.update(batch)
            yield batch
        self.rows = rows
        self._forget_missing(listing)

    def refresh(self, keys: Iterable[str]) -> dict[str, JobRow | None]:
        """Re-derive just `keys` (after file events); None for a key that is gone."""
        now = time.time()
        self._tree_now = {}
        changed: dict[str, JobRow | None] = {}
        for key in keys:
            listing: Listing = {}
            for folder in (*JOB_FOLDERS, "receipts", "attempts"):
                listing[folder] = {}
                for suffix in (".json", ".jsonl", ".lease", ".cancel", ".sig"):
                    path = f"{self._gen}/{folder}/{key}{suffix}"
                    if os.path.lexists(path):
                        listing[folder][f"{key}{suffix}"] = path
            if not any(f"{key}.json" in listing[f] for f in (*JOB_FOLDERS, "receipts")):
                self.rows.pop(key, None)
                changed[key] = None
                continue
            row = self._row(key, listing, now)
            self.rows[key] = row
            changed[key] = row
        return changed

    def snapshot(self) -> Snapshot:
        """The rows as last scanned or refreshed."""
        return Snapshot(dict(self.rows), time.time(), self.signature_required, self.config_error)

    def _read_config(self) -> None:
        path = str(self.layout.config)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self.signature_required, self.config_error = True, None
            return
        except OSError as exc:
            self.signature_required, self.config_error = True, f"{path}: {exc.strerror}"
            return
        hit = self._files.get(_CONFIG)
        if hit is not None and hit[:3] == (st.st_ino, st.st_size, st.st_mtime_ns):
            value = hit[3]
        else:
            value = _config_policy(path)
            if _settled(st):
                self._files[_CONFIG] = (st.st_ino, st.st_size, st.st_mtime_ns, value)
                self._dirty = True
        self.signature_required, self.config_error = value  # type: ignore[misc]

    def _forget_missing(self, listing: Listing) -> None:
        live = {f"{folder}/{name}" for folder, names in listing.items() for name in names}
        live.add(_CONFIG)
        stale = [rel for rel in self._files if rel not in live]
        for rel in stale:
            del self._files[rel]
        self._dirty = self._dirty or bool(stale)

    @staticmethod
    def _stat(entry: os.DirEntry[str] | str | None) -> os.stat_result | None:
        if entry is None:
            return None
        try:
            if isinstance(entry, str):
                return os.lstat(entry)
            return entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            return None

    def _row(self, key: str, listing: Listing, now: float) -> JobRow:
        name = f"{key}.json"
        folders = tuple(f for f in JOB_FOLDERS if name in listing[f])
        problems: list[str] = []
        summary: JobSummary | None = None
        invalid: str | None = None
        if not KEY_RE.fullmatch(key):
            invalid = f"{name}: file name is not a job key"
        for folder in folders:
            parsed = self._parsed(f"{folder}/{name}", listing[folder][name], _JOB_PARSERS[folder])
            if parsed is _GONE:
                continue
            if isinstance(parsed, str):
                invalid = invalid or parsed
            elif summary is None:
                summary = parsed  # type: ignore[assignment]
        receipt: str | None = None
        worker = ""
        entry = listing["receipts"].get(name)
        parsed = _GONE if entry is None else self._parsed(f"receipts/{name}", entry, _parse_receipt)
        if parsed is not _GONE:
            if isinstance(parsed, str):
                receipt = "invalid"
                problems.append(parsed)
            else:
                receipt, worker = parsed[0], parsed[1]  # type: ignore[index]
                if summary is not None and parsed[3] != summary[1]:  # type: ignore[index]
                    problems.append("receipt names another job digest")
        attempts = 0
        entry = listing["attempts"].get(f"{key}.jsonl")
        if entry is not None:
            parsed = self._parsed(f"attempts/{key}.jsonl", entry, _parse_attempts, _ATTEMPTS_BYTES)
            if isinstance(parsed, tuple):
                attempts, last = parsed
                worker = worker or last
        lease = None
        if folders == ("running",):
            lease, holder = self._lease(key, listing["running"], now)
            worker = holder or worker
        base_fresh = None
        if receipt == "ok" and summary is not None and "running" in folders:
            stale = [p for p, want in summary[4] if self._tree_hash(p) != want]
            base_fresh = not stale
            problems += [f"{p}: changed since the job was minted" for p in stale]
        state = derive_state(Facts(frozenset(folders), lease, receipt, base_fresh, invalid))
        if invalid:
            problems.insert(0, invalid)
        if state is State.INCONSISTENT:
            problems.append(inconsistency_rule(frozenset(folders), receipt is not None))
        if state is State.ORPHANED:
            problems.append(f"lease {lease}: the worker is gone; requeue replays the job")
        if summary is not None:
            schema, digest, instruction, paths, _, created, note = summary
            if note:
                problems.append(f"rejected: {note}")
        else:
            schema, digest, instruction, paths, created = "", "", "", (), 0.0
        return JobRow(
            key,
            state,
            schema,
            digest,
            instruction,
            paths,
            created,
            attempts,
            worker,
            receipt,
            folders,
            tuple(problems),
        )

    def _lease(self, key: str, running: dict[str, os.DirEntry[str] | str], now: float) -> tuple[str, str]:
        entry = running.get(f"{key}.lease")
        parsed = (
            _GONE
            if entry is None
            else self._parsed(f"running/{key}.lease", entry, _parse_lease, _LEASE_BYTES)
        )
        if parsed is _GONE:
            job = self._stat(running.get(f"{key}.json"))
            claiming = job is not None and now - job.st_ctime < CLAIM_GRACE
            return (LEASE_CLAIMING if claiming else LEASE_MISSING), ""
        if isinstance(parsed, str):
            return LEASE_STALE, ""
        worker, host, pid, heartbeat, ttl = parsed  # type: ignore[misc]
        return (LEASE_FRESH if lease_fresh(heartbeat, ttl, host, pid, now) else LEASE_STALE), worker


def keys_from_paths(layout: Layout, paths: Iterable[str | Path]) -> set[str]:
    """The job keys that changed files under `.gen/` belong to."""
    keys = set()
    gen = str(layout.gen) + os.sep
    for p in paths:
        s = str(p)
        if not s.startswith(gen):
            continue
        name = os.path.basename(s)
        stem = name.split(".", 1)[0]
        if KEY_RE.fullmatch(stem):
            keys.add(stem)
    return keys


def take_snapshot(layout: Layout, disk_cache: bool = True) -> Snapshot:
    scanner = Scanner(layout, disk_cache)
    snap = scanner.scan()
    scanner.save_cache()
    return snap
