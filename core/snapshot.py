"""One consistent read of `.gen/`: every job with its derived state, for `ls` and the board.

Job documents and receipts never change after they are written, so what was parsed
from a file is kept in an index keyed by the file's identity (inode, size, mtime) and
reused, in memory by a long-lived `Scanner` and on disk (`.gen/cache/`) by the next
process. The index only saves work: every entry is checked against a fresh `stat`,
and verification never reads it.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from core.canonical import read_bytes, sha256_file
from core.config import load_config
from core.durable import atomic_write
from core.errors import BadInput, GenjobError
from core.layout import Layout
from core.lease import CLAIM_GRACE, lease_from_bytes
from core.lifecycle import (
    LEASE_CLAIMING,
    LEASE_FRESH,
    LEASE_MISSING,
    LEASE_STALE,
    Facts,
    State,
    derive_state,
    inconsistency_rule,
)
from core.models import KEY_RE, receipt_from_bytes
from core.paths import lstat_inside
from core.queue import JOB_FOLDERS, read_job_file

_CACHE_VERSION = 1
_CACHE_NAME = "snapshot.marshal"

# (ino, size, mtime_ns) of a file: if it is the same, so is what we parsed from it.
Ident = tuple[int, int, int]
# A parsed job document: (schema, digest, instruction, allowed_paths, inputs, created_at,
# record) or an error message.
JobSummary = tuple[str, str, str, tuple[str, ...], tuple[tuple[str, str | None], ...], float, str]


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


def _ident(st: os.stat_result) -> Ident:
    return (st.st_ino, st.st_size, st.st_mtime_ns)


# A file changed this recently may change again within its mtime's granularity (one clock
# tick, or two seconds on coarse filesystems) without its identity changing: what was
# read from it is used but not kept, as git does with "racily clean" index entries.
_RACY_NS = 2_000_000_000


def _settled(st: os.stat_result) -> bool:
    return time.time_ns() - st.st_mtime_ns >= _RACY_NS


class Scanner:
    """Builds snapshots, re-reading only files whose identity changed."""

    def __init__(self, layout: Layout, disk_cache: bool = True) -> None:
        self.layout = layout
        self.disk_cache = disk_cache
        self._files: dict[str, tuple[Ident, object]] = {}
        self._tree: dict[str, tuple[Ident, str]] = {}
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
                data = marshal.load(fh)
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

    def _parsed(self, rel: str, st: os.stat_result, parse: object) -> object:
        ident = _ident(st)
        hit = self._files.get(rel)
        if hit is not None and hit[0] == ident:
            return hit[1]
        value = parse(self.layout.gen / rel)  # type: ignore[operator]
        if _settled(st):
            self._files[rel] = (ident, value)
            self._dirty = True
        return value

    # -- parsing one file ----------------------------------------------------------------
    @staticmethod
    def _parse_job(folder: str) -> object:
        def parse(path: Path) -> object:
            try:
                job, record = read_job_file(path, folder)
            except BadInput as exc:
                return str(exc)
            note = ""
            if record:
                note = str((record.get("rejection") or {}).get("reason") or "")
            return (
                job.schema_name,
                job.digest,
                job.instruction,
                tuple(job.allowed_paths),
                tuple(sorted(job.inputs.items())),
                float(getattr(job, "created_at", 0)),
                note,
            )

        return parse

    @staticmethod
    def _parse_receipt(path: Path) -> object:
        try:
            rec = receipt_from_bytes(read_bytes(path), str(path))
        except BadInput as exc:
            return str(exc)
        return (rec.status, rec.worker_id, rec.idempotency_key, rec.job_digest)

    @staticmethod
    def _parse_attempts(path: Path) -> object:
        claimed, worker = 0, ""
        with contextlib.suppress(OSError):
            for line in path.read_bytes().splitlines():
                if b'"event":"claimed"' in line:
                    claimed += 1
                    with contextlib.suppress(ValueError):
                        worker = str(json.loads(line).get("worker") or worker)
        return (claimed, worker)

    def _tree_hash(self, rel: str) -> str | None:
        """The hash of a tree file; None when it is absent, "" when it is not a safe regular file."""
        path = self.layout.root / rel
        try:
            st = lstat_inside(self.layout.root, rel)
        except (BadInput, OSError):
            return ""
        if st is None:
            return None
        ident = _ident(st)
        hit = self._tree.get(rel)
        if hit is not None and hit[0] == ident:
            return hit[1]
        try:
            digest = sha256_file(path)
        except OSError:
            return ""
        if _settled(st):
            self._tree[rel] = (ident, digest)
            self._dirty = True
        return digest

    # -- scanning --------------------------------------------------------------------------
    def _list(self, folder: str) -> dict[str, os.DirEntry[str]]:
        out: dict[str, os.DirEntry[str]] = {}
        with contextlib.suppress(FileNotFoundError), os.scandir(self.layout.gen / folder) as it:
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
        listing = {f: self._list(f) for f in (*JOB_FOLDERS, "receipts", "attempts")}
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
        changed: dict[str, JobRow | None] = {}
        for key in keys:
            listing: dict[str, dict[str, os.DirEntry[str] | Path]] = {}
            for folder in (*JOB_FOLDERS, "receipts", "attempts"):
                listing[folder] = {}
                for suffix in (".json", ".jsonl", ".lease", ".cancel", ".sig"):
                    p = self.layout.gen / folder / f"{key}{suffix}"
                    if os.path.lexists(p):
                        listing[folder][p.name] = p
            if not any(f"{key}.json" in listing[f] for f in (*JOB_FOLDERS, "receipts")):
                self.rows.pop(key, None)
                changed[key] = None
                continue
            row = self._row(key, listing, now)  # type: ignore[arg-type]
            self.rows[key] = row
            changed[key] = row
        return changed

    def snapshot(self) -> Snapshot:
        """The rows as last scanned or refreshed."""
        return Snapshot(dict(self.rows), time.time(), self.signature_required, self.config_error)

    def _read_config(self) -> None:
        try:
            cfg = load_config(self.layout.config)
            self.signature_required, self.config_error = cfg.policy.require_signature, None
        except GenjobError as exc:
            self.signature_required, self.config_error = True, str(exc)

    def _forget_missing(self, listing: dict[str, dict[str, os.DirEntry[str]]]) -> None:
        live = {f"{folder}/{name}" for folder, names in listing.items() for name in names}
        stale = [rel for rel in self._files if rel not in live]
        for rel in stale:
            del self._files[rel]
        self._dirty = self._dirty or bool(stale)

    def _stat(self, entry: os.DirEntry[str] | Path) -> os.stat_result | None:
        try:
            if isinstance(entry, Path):
                return os.lstat(entry)
            return entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            return None

    def _row(self, key: str, listing: dict[str, dict[str, os.DirEntry[str]]], now: float) -> JobRow:
        name = f"{key}.json"
        folders = tuple(f for f in JOB_FOLDERS if name in listing[f])
        problems: list[str] = []
        summary: object = None
        invalid: str | None = None
        if not KEY_RE.fullmatch(key):
            invalid = f"{name}: file name is not a job key"
        for folder in folders:
            st = self._stat(listing[folder][name])
            if st is None:
                continue
            parsed = self._parsed(f"{folder}/{name}", st, self._parse_job(folder))
            if isinstance(parsed, str):
                invalid = invalid or parsed
            elif summary is None:
                summary = parsed
        receipt: str | None = None
        worker = ""
        if name in listing["receipts"]:
            st = self._stat(listing["receipts"][name])
            parsed = self._parsed(f"receipts/{name}", st, self._parse_receipt) if st else "gone"
            if isinstance(parsed, str):
                receipt = "invalid"
                problems.append(parsed)
            else:
                receipt, worker = parsed[0], parsed[1]  # type: ignore[index]
                if summary is not None and parsed[3] != summary[1]:  # type: ignore[index]
                    problems.append("receipt names another job digest")
        attempts = 0
        att = listing["attempts"].get(f"{key}.jsonl")
        if att is not None:
            st = self._stat(att)
            if st is not None:
                attempts, last = self._parsed(f"attempts/{key}.jsonl", st, self._parse_attempts)  # type: ignore[misc]
                worker = worker or last
        lease = None
        if folders == ("running",):
            lease, holder = self._lease(key, listing["running"], now)
            worker = holder or worker
        base_fresh = None
        if receipt == "ok" and summary is not None and "running" in folders:
            stale = [p for p, want in summary[4] if self._tree_hash(p) != want]  # type: ignore[index]
            base_fresh = not stale
            problems += [f"{p}: changed since the job was minted" for p in stale]
        state = derive_state(Facts(frozenset(folders), lease, receipt, base_fresh, invalid))
        if invalid:
            problems.insert(0, invalid)
        if state is State.INCONSISTENT:
            problems.append(inconsistency_rule(frozenset(folders), receipt is not None))
        if state is State.ORPHANED:
            problems.append(f"lease {lease}: the worker is gone; requeue replays the job")
        if isinstance(summary, tuple):
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

    def _lease(self, key: str, running: dict[str, os.DirEntry[str]], now: float) -> tuple[str, str]:
        entry = running.get(f"{key}.lease")
        if entry is None:
            job = running.get(f"{key}.json")
            st = self._stat(job) if job is not None else None
            claiming = st is not None and now - st.st_ctime < CLAIM_GRACE
            return (LEASE_CLAIMING if claiming else LEASE_MISSING), ""
        path = self.layout.running / f"{key}.lease"
        try:
            lease = lease_from_bytes(read_bytes(path, 64 * 1024), str(path))
        except BadInput:
            return LEASE_STALE, ""
        return (LEASE_FRESH if lease.fresh(now) else LEASE_STALE), lease.worker


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
