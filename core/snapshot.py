"""One consistent read of `.gen/`: every job with its derived state, for `ls` and the board.

A row is made in two steps. `_facts` reads what a key's files say: its job documents,
receipt and attempts, checked with `core.docscan` (the strict models, and pydantic, are
loaded only for a document the quick check does not accept, to name its fault).
`_finish` adds what changes without those files changing (the lease, the tree and the
clock) and asks `derive_state`.

The index, kept in memory by a long-lived `Scanner` and in `.gen/cache/` for the next
process, holds the folders as last listed and, per key, what was made from the files
listed: the finished row when it depends on nothing else (queued, applied, rejected,
failed, invalid and inconsistent jobs without a lease), else the facts, so only
`_finish` runs again. Job documents, receipts and applied/rejected records are never
rewritten (each is a complete file linked into place), so such a file is known by its
folder, name and inode as the listing gives them, without a stat: a file replaced under
the same name is read again, a file edited in place is not. Attempts files grow, so
theirs is (inode, size, mtime). Leases are read on every scan; tree files are hashed
again when their (inode, size, mtime, ctime) changed. What was read from a file changed
within the last two seconds is used but not kept. The index only saves work: a missing,
damaged or foreign one is ignored, and verification never reads it.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from core.canonical import MAX_JSON_BYTES, loads_strict, read_with_stat, sha256_file
from core.docscan import KEY_RE, V1, V2, lease_fresh, quick_job, quick_lease, quick_receipt
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
from core.snapshot_index import Index, read_index, write_index

_CACHE_NAME = "snapshot.marshal"
_LEASE_BYTES = 64 * 1024
_ATTEMPTS_BYTES = 64 * 1024 * 1024
_CLAIMED = b'"event":"claimed"'

# A file changed this recently may change again within its mtime's granularity (one clock
# tick, or two seconds on coarse filesystems) without its identity changing: what was
# read from it is used but not kept, as git does with "racily clean" index entries.
_RACY_NS = 2_000_000_000


class JobRow(NamedTuple):
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
        self.counts = Counter(map(_state_of, self.rows.values()))


_state_of = attrgetter("state")
_make_row: Callable[[tuple[object, ...]], JobRow] = partial(tuple.__new__, JobRow)
_STATES = {s.value: s for s in State}


# A parsed job document: (schema, digest, instruction, allowed_paths, inputs, created_at,
# rejection reason), or its fault.
JobSummary = tuple[str, str, str, tuple[str, ...], tuple[tuple[str, str | None], ...], float, str]
# What a key's files say, flat so the index can keep it as columns: (folders, has a
# summary, the summary's seven fields or blanks, the job's fault, receipt status, receipt
# problems, worker named by the receipt or the attempts, attempts).
FileFacts = tuple[Any, ...]
_NO_SUMMARY: JobSummary = ("", "", "", (), (), 0.0, "")
# A row made from its key's files: (row, whether it depends on those files alone, the
# facts, whether they may be kept).
Made = tuple[JobRow, bool, FileFacts, bool]
# A folder as listed: its own (inode, mtime, ctime) if it had settled, `<key><suffix>`
# by key with the file's identity, and for `running/` the keys with a lease.
Listed = tuple[tuple[int, int, int] | None, dict[str, Any], dict[str, Any] | None]

# Values that repeat across many rows (paths, folder tuples, workers, statuses) are kept
# once: less memory, and a smaller index that loads faster.
_SHARED: dict[Any, Any] = {}
_SHARED_MAX = 65536


def _share(value: Any) -> Any:
    got = _SHARED.get(value)
    if got is not None:
        return got
    if len(_SHARED) >= _SHARED_MAX:
        _SHARED.clear()
    _SHARED[value] = value
    return value


# -- parsing one file ------------------------------------------------------------------------
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


def _job_parser(folder: str) -> Callable[[bytes, str, str], object]:
    is_record = folder in ("applied", "rejected")
    # Inputs matter only to a running job's base check; elsewhere they are not kept.
    keep_inputs = folder == "running"

    def parse(data: bytes, path: str, key: str) -> object:
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
        if summary is None or doc["idempotency_key"] != key:
            return _strict_job(path, folder)
        schema, digest, instruction, paths, inputs, created = summary
        inputs = _share(inputs) if keep_inputs else ()
        return (V2 if schema == V2 else V1, digest, instruction, _share(paths), inputs, created, note)

    return parse


_JOB_PARSERS = {folder: _job_parser(folder) for folder in JOB_FOLDERS}


def _parse_receipt(data: bytes, path: str) -> object:
    try:
        obj = loads_strict(data, path)
    except BadInput as exc:
        return str(exc)
    quick = quick_receipt(obj)
    if quick is None:
        from core.models import receipt_from_obj

        try:
            rec = receipt_from_obj(obj, path)
        except BadInput as exc:
            return str(exc)
        quick = (rec.status, rec.worker_id, rec.idempotency_key, rec.job_digest)
    return (_share(quick[0]), _share(quick[1]), quick[2], quick[3])


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


# A claim line as `core.queue` writes it (canonical JSON, a worker name without escapes):
# what `json.loads` would make of it, read off directly. Integers are held to 20 digits,
# well under the length `json.loads` refuses.
_CLAIM_LINE = re.compile(
    rb'\{"at":-?(?:0|[1-9][0-9]{0,19})(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?,'
    rb'"attempt":-?(?:0|[1-9][0-9]{0,19}),"event":"claimed","worker":"([\x20\x21\x23-\x5b\x5d-\x7e]+)"\}'
)


def _parse_attempts(data: bytes) -> tuple[int, str]:
    """(claims, the worker of the last claim that names one); only claim lines are parsed."""
    if _CLAIMED not in data:
        return (0, "")
    claims = [line for line in data.splitlines() if _CLAIMED in line]
    for line in reversed(claims):
        if plain := _CLAIM_LINE.fullmatch(line):
            return (len(claims), _share(plain[1].decode()))
        try:
            obj = json.loads(line)  # evidence, not a contract: a bad line is skipped
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict) and (worker := obj.get("worker")):
            return (len(claims), _share(str(worker)))
    return (len(claims), "")


def _config_policy(path: str) -> tuple[bool, str | None]:
    """(require_signature, the fault of a bad config.toml)."""
    from core.config import load_config

    try:
        return (load_config(Path(path)).policy.require_signature, None)
    except GenjobError as exc:
        return (True, str(exc))


_STATE_MEMO: dict[tuple[object, ...], State] = {}


def _derive(
    folders: tuple[str, ...],
    lease: str | None,
    receipt: str | None,
    base_fresh: bool | None,
    invalid: str | None,
) -> State:
    """`derive_state`, remembered for each combination of facts without a fault message."""
    if invalid is not None:
        return derive_state(Facts(frozenset(folders), lease, receipt, base_fresh, invalid))
    memo = (folders, lease, receipt, base_fresh)
    state = _STATE_MEMO.get(memo)
    if state is None:
        state = _STATE_MEMO[memo] = derive_state(Facts(frozenset(folders), lease, receipt, base_fresh))
    return state


# -- listing ---------------------------------------------------------------------------------
# Listed in this order; a key's row depends on `<key>.json` in the first five, `<key>.lease`
# in running/ and `<key>.jsonl` in attempts/.
_LISTED = ("receipts", "running", "queue", "applied", "rejected", "attempts")
_LSTAT = partial(os.DirEntry.stat, follow_symlinks=False)
_GROWING = attrgetter("st_ino", "st_size", "st_mtime_ns")


def _entries(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except FileNotFoundError:
        return []


def _list_growing(path: str) -> dict[str, Any]:
    """`<key>.jsonl` by key with its (inode, size, mtime); stat'ed relative to the folder,
    which spares the kernel a walk of the whole path for each file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return {}
    out: dict[str, Any] = {}
    try:
        with os.scandir(fd) as it:
            for e in it:
                if (n := e.name).endswith(".jsonl") and n[0] != ".":
                    with contextlib.suppress(FileNotFoundError):
                        out[n[:-6]] = _GROWING(_LSTAT(e))
    finally:
        os.close(fd)
    return out


def _list_folder(folder: str, path: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """`<key>.json` by key with its inode (`<key>.jsonl` with its (inode, size, mtime) in
    attempts/), and for running/ the keys with a lease."""
    if folder == "attempts":
        return _list_growing(path), None
    entries = _entries(path)
    if folder == "running":
        jobs: dict[str, Any] = {}
        leases: dict[str, None] = {}
        for e in entries:
            n = e.name
            if n[0] == ".":
                continue
            if n.endswith(".json"):
                jobs[n[:-5]] = e.inode()
            elif n.endswith(".lease"):
                leases[n[:-6]] = None  # rewritten by every heartbeat: only its presence is kept
        return jobs, leases
    return {n[:-5]: e.inode() for e in entries if (n := e.name).endswith(".json") and n[0] != "."}, None


def _file_identity(path: str, growing: bool) -> Any:
    """What `_list_folder` records for one file, or None when there is none (for `refresh`)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return _GROWING(st) if growing else st.st_ino


# A full scan makes the rows of keys the index does not know in up to this many
# processes, with at least this many keys for each, in at most 256 chunks of at least
# this many keys.
_WORKERS_MAX = 4
_WORKER_KEYS_MIN = 2000
_CHUNK_KEYS_MIN = 200


def _threads() -> int:
    threading = sys.modules.get("threading")
    return threading.active_count() if threading is not None else 1


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


# The folders holding a key's job document, from whether applied/, rejected/, running/
# and queue/ hold it (in the order of JOB_FOLDERS), as one shared tuple each.
_FOLDERS = {
    (a, b, c, d): tuple(f for f, here in zip(JOB_FOLDERS, (a, b, c, d), strict=True) if here)
    for a in (False, True)
    for b in (False, True)
    for c in (False, True)
    for d in (False, True)
}

# What `Scanner._read` returns for a file that vanished since the folder was listed.
_GONE = object()


class Scanner:
    """Builds snapshots, re-reading only the keys whose files changed."""

    def __init__(self, layout: Layout, disk_cache: bool = True) -> None:
        self.layout = layout
        self.disk_cache = disk_cache
        self._gen = str(layout.gen)
        self._root = str(layout.root)
        # The folders as the last full scan listed them; what is cached below was read
        # from the files named there.
        self._listed: dict[str, Listed] | None = None
        # Finished rows that depend on their key's files alone.
        self._fixed: dict[str, JobRow] = {}
        # What the files say, for rows that also depend on a lease, the tree or the clock.
        self._volatile: dict[str, FileFacts] = {}
        self._tree: dict[str, tuple[int, int, int, int, str | None]] = {}
        self._tree_now: dict[str, str | None] = {}
        # key -> (the bytes of its lease as last read, what they say): a lease is read on
        # every scan and parsed again only when its bytes changed.
        self._leases: dict[str, tuple[bytes, object]] = {}
        self._config: tuple[int, int, int, int, tuple[bool, str | None]] | None = None
        self._dirty = False
        self.signature_required = True
        self.config_error: str | None = None
        if disk_cache:
            self._load_cache()

    # -- the index -------------------------------------------------------------------
    @property
    def _cache_path(self) -> Path:
        return self.layout.cache / _CACHE_NAME

    def _device(self) -> int:
        try:
            return os.stat(self._gen).st_dev
        except OSError:
            return -1

    def _load_cache(self) -> None:
        index = read_index(
            self._cache_path, self._gen, self._device(), _LISTED, _make_row, _STATES.__getitem__
        )
        if index is not None:
            self._config, self._tree, self._listed, self._fixed, self._volatile, self._leases = index

    def save_cache(self) -> None:
        if not self._dirty or not self.disk_cache or self._listed is None:
            return
        index = Index(self._config, self._tree, self._listed, self._fixed, self._volatile, self._leases)
        rows = ((r[0], r[1].value, *r[2:]) for r in self._fixed.values())
        with contextlib.suppress(OSError, ValueError):
            self.layout.cache.mkdir(exist_ok=True)
            write_index(self._cache_path, self._gen, self._device(), index, rows)
            self._dirty = False

    # -- reading files ---------------------------------------------------------------------
    @staticmethod
    def _read(path: str, racy: int, limit: int = MAX_JSON_BYTES) -> tuple[object, bool]:
        """The bytes of a file, or why it cannot be read, or `_GONE` if it vanished; and
        whether what is made of it may be kept."""
        try:
            data, st = read_with_stat(path, limit)
        except BadInput as exc:
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                return _GONE, False
            return str(exc), st.st_mtime_ns < racy
        return data, st.st_mtime_ns < racy

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
        ident = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        hit = self._tree.get(rel)
        if hit is not None and hit[:4] == ident:
            return hit[4]
        try:
            digest = sha256_file(Path(self._root, rel))
        except OSError:
            return ""
        if st.st_mtime_ns < time.time_ns() - _RACY_NS:
            self._tree[rel] = (*ident, digest)
            self._dirty = True
        return digest

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
        ident = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        hit = self._config
        if hit is not None and hit[:4] == ident:
            value = hit[4]
        else:
            value = _config_policy(path)
            if st.st_mtime_ns < time.time_ns() - _RACY_NS:
                self._config = (*ident, value)
                self._dirty = True
        self.signature_required, self.config_error = value

    # -- scanning --------------------------------------------------------------------------
    def _list(self) -> tuple[dict[str, Listed], set[str] | None]:
        """The folders now, and the keys with a file that differs from the last listing
        (None: no listing to compare with).

        A folder whose own identity (inode, mtime, ctime) is the one recorded, and had
        settled then, holds the same entries: adding, removing or renaming one changes
        it. Such a folder is not listed again, except attempts/, whose files grow.
        """
        old = self._listed
        racy = time.time_ns() - _RACY_NS
        listed: dict[str, Listed] = {}
        changed: set[str] | None = None if old is None else set()
        for folder in _LISTED:
            path = f"{self._gen}/{folder}"
            try:
                st = os.stat(path)
            except FileNotFoundError:
                here = None
            else:
                here = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
            before = None if old is None else old[folder]
            if here is not None and before is not None and before[0] == here and folder != "attempts":
                listed[folder] = before
                continue
            keys, leases = _list_folder(folder, path)
            settled = here if here is not None and max(here[1:]) < racy else None
            if before is not None and before[1] == keys and before[2] == leases:
                listed[folder] = before if before[0] == settled else (settled, before[1], before[2])
                continue
            listed[folder] = (settled, keys, leases)
            if changed is not None and before is not None:
                try:
                    changed.update(k for k, _ in keys.items() ^ before[1].items())
                    if leases is not None and before[2] is not None:
                        changed.update(k for k, _ in leases.items() ^ before[2].items())
                except TypeError:  # an index written by something else
                    changed = None
        return listed, changed

    def scan(self) -> Snapshot:
        """A full snapshot; the index makes an unchanged key cost a few dictionary lookups."""
        now = time.time()
        rows: dict[str, JobRow] = {}
        for batch in self.scan_batches(now=now):
            rows.update(batch)
        return Snapshot(rows, now, self.signature_required, self.config_error)

    def scan_batches(self, size: int = 4096, now: float | None = None) -> Iterator[dict[str, JobRow]]:
        """A full scan delivered `size` rows at a time, the jobs that need an operator first.

        Keys with a receipt or in `running/` come first, then the queue, then finished
        jobs, so a board can show what matters before all of a large `.gen/` is read.
        """
        self._tree_now = {}
        listed, changed = self._list()
        now = time.time() if now is None else now
        racy = time.time_ns() - _RACY_NS
        fixed, volatile = self._fixed, self._volatile
        if changed is None:
            fixed.clear()
            volatile.clear()
        else:
            for key in changed:
                fixed.pop(key, None)
                volatile.pop(key, None)
        maps = {f: listed[f][1] for f in _LISTED}
        leases = listed["running"][2] or {}
        order = maps["receipts"] | maps["running"] | maps["queue"] | maps["applied"] | maps["rejected"]
        keys = list(order)
        unknown = [k for k in keys if k not in fixed and k not in volatile]
        ahead = self._read_ahead(unknown, maps, leases, now, racy, meanwhile=self._read_config)
        for start in range(0, len(keys), size):
            chunk = keys[start : start + size]
            batch = dict(zip(chunk, map(fixed.get, chunk), strict=True))
            for key in [k for k, row in batch.items() if row is None]:
                batch[key] = self._row(key, maps, key in leases, now, racy, True, ahead.pop(key, None))
            yield batch
        for key in fixed.keys() - order.keys():
            del fixed[key]
        for key in volatile.keys() - order.keys():
            del volatile[key]
        for key in self._leases.keys() - leases.keys():
            del self._leases[key]
        old = self._listed
        self._dirty = self._dirty or old is None or any(listed[f] is not old.get(f) for f in _LISTED)
        self._listed = listed

    def _read_ahead(
        self,
        keys: list[str],
        maps: dict[str, dict[str, Any]],
        leases: dict[str, Any],
        now: float,
        racy: int,
        meanwhile: Callable[[], None],
    ) -> dict[str, Made]:
        """The rows of many `keys` made by several processes at once, with `meanwhile`
        run in this one (else just `meanwhile`, and nothing made).

        The keys go out in chunks, each taken by whichever process asks first (a byte
        read from a pipe), so a slow or busy process takes fewer. Only from a process with
        no other thread (a fork copies the calling thread alone), and only for enough keys
        to pay for the processes; a worker that fails leaves its keys to be read as usual.
        """
        workers = min(_cpus(), _WORKERS_MAX, len(keys) // _WORKER_KEYS_MIN)
        ahead: dict[str, Made] = {}
        if workers < 2 or _threads() > 1:
            meanwhile()
            return ahead
        step = max(_CHUNK_KEYS_MIN, -(-len(keys) // 256))
        chunks = [keys[i : i + step] for i in range(0, len(keys), step)]
        tasks, queue = os.pipe()
        os.write(queue, bytes(range(len(chunks))))
        os.close(queue)
        children: list[tuple[int, int]] = []
        try:
            for _ in range(workers - 1):
                r, w = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(r)
                    self._worker(chunks, tasks, maps, leases, now, racy, w)
                os.close(w)
                children.append((pid, r))
            meanwhile()
            while task := os.read(tasks, 1):
                for key in chunks[task[0]]:
                    ahead[key] = self._from_files(key, maps, key in leases, now, racy)
        finally:
            os.close(tasks)
            for pid, r in children:
                with os.fdopen(r, "rb") as fh:
                    data = fh.read()
                _, status = os.waitpid(pid, 0)
                if status == 0:
                    with contextlib.suppress(ValueError, EOFError, TypeError, KeyError, IndexError):
                        self._take(marshal.loads(data), chunks, ahead)
        return ahead

    def _worker(
        self,
        chunks: list[list[str]],
        tasks: int,
        maps: dict[str, dict[str, Any]],
        leases: dict[str, Any],
        now: float,
        racy: int,
        out: int,
    ) -> NoReturn:
        """A forked worker: takes chunks until there are none left, sends what it made
        (rows as plain tuples) with the tree hashes and leases it read, and exits."""
        code = 1
        try:
            done = {}
            while task := os.read(tasks, 1):
                made = []
                for key in chunks[task[0]]:
                    row, fixed, facts, settled = self._from_files(key, maps, key in leases, now, racy)
                    made.append((row.state.value, row[2:], fixed, facts, settled))
                done[task[0]] = made
            data = marshal.dumps((done, self._tree, self._leases))
            with os.fdopen(out, "wb") as fh:
                fh.write(data)
            code = 0
        finally:
            os._exit(code)

    def _take(self, data: Any, chunks: list[list[str]], ahead: dict[str, Made]) -> None:
        """Adopt what a worker sent."""
        done, tree, leases = data
        for task, made in done.items():
            for key, (state, rest, fixed, facts, settled) in zip(chunks[task], made, strict=True):
                ahead[key] = (_make_row((key, _STATES[state], *rest)), fixed, facts, settled)
        for rel, entry in tree.items():
            if rel not in self._tree:
                self._tree[rel] = entry
                self._dirty = True
        for key, entry in leases.items():
            if self._leases.get(key) != entry:
                self._leases[key] = entry
                self._dirty = True

    def _from_files(
        self, key: str, maps: dict[str, dict[str, Any]], has_lease: bool, now: float, racy: int
    ) -> Made:
        facts, settled = self._facts(key, maps, racy)
        row, fixed = self._finish(key, facts, has_lease, now)
        return row, fixed, facts, settled

    def found(self, key: str) -> bool:
        """Whether the last full scan delivered a row for `key`."""
        listed = self._listed
        return listed is not None and any(key in listed[f][1] for f in _LISTED[:5])

    def refresh(self, keys: Iterable[str]) -> dict[str, JobRow | None]:
        """Re-derive just `keys` (after file events); None for a key that is gone."""
        now = time.time()
        racy = time.time_ns() - _RACY_NS
        self._tree_now = {}
        changed: dict[str, JobRow | None] = {}
        gen = self._gen
        for key in keys:
            now_ids = [_file_identity(f"{gen}/{folder}/{key}.json", False) for folder in _LISTED[:5]]
            has_lease = os.path.lexists(f"{gen}/running/{key}.lease")
            attempts_id = _file_identity(f"{gen}/attempts/{key}.jsonl", True)
            if not any(now_ids):
                changed[key] = None
                continue
            # What is cached for the key holds only while its files are the ones listed.
            listed = self._listed
            same = (
                listed is not None
                and all(listed[f][1].get(key) == i for f, i in zip(_LISTED, now_ids, strict=False))
                and (key in (listed["running"][2] or {})) == has_lease
                and listed["attempts"][1].get(key) == attempts_id
            )
            if not same:
                self._fixed.pop(key, None)
                self._volatile.pop(key, None)
            row = self._fixed.get(key)
            if row is None:
                maps = {f: {key: i} if i is not None else {} for f, i in zip(_LISTED, now_ids, strict=False)}
                maps["attempts"] = {key: attempts_id} if attempts_id is not None else {}
                row = self._row(key, maps, has_lease, now, racy, same)
            changed[key] = row
        return changed

    # -- one key -----------------------------------------------------------------------------
    def _row(
        self,
        key: str,
        maps: dict[str, dict[str, Any]],
        has_lease: bool,
        now: float,
        racy: int,
        keep: bool,
        ahead: Made | None = None,
    ) -> JobRow:
        """The row of `key`, from its cached facts if there are any, else from its files
        (as `maps`, folder -> key -> identity, lists them) or as made ahead; what was read
        is cached when `keep` and every file read had settled."""
        facts = self._volatile.get(key)
        if facts is not None:
            return self._finish(key, facts, has_lease, now)[0]
        row, fixed, facts, settled = (
            ahead if ahead is not None else self._from_files(key, maps, has_lease, now, racy)
        )
        if keep and settled:
            self._dirty = True
            if fixed:
                self._fixed[key] = row
            else:
                self._volatile[key] = facts
        return row

    def _facts(self, key: str, maps: dict[str, dict[str, Any]], racy: int) -> tuple[FileFacts, bool]:
        """What the key's files (as `maps`, folder -> key -> identity, lists them) say, and
        whether all of them had settled."""
        gen, name = self._gen, f"{key}.json"
        folders = _FOLDERS[
            key in maps["applied"], key in maps["rejected"], key in maps["running"], key in maps["queue"]
        ]
        settled = True
        summary: JobSummary | None = None
        invalid = None if KEY_RE.fullmatch(key) else f"{name}: file name is not a job key"
        for folder in folders:
            path = f"{gen}/{folder}/{name}"
            parsed, ok = self._read(path, racy)
            settled = settled and ok
            if parsed is _GONE:
                continue
            if type(parsed) is bytes:
                parsed = _JOB_PARSERS[folder](parsed, path, key)
            if isinstance(parsed, str):
                invalid = invalid or parsed
            elif summary is None:
                summary = parsed  # type: ignore[assignment]
        receipt: str | None = None
        problems: tuple[str, ...] = ()
        worker = ""
        if key in maps["receipts"]:
            path = f"{gen}/receipts/{name}"
            parsed, ok = self._read(path, racy)
            settled = settled and ok
            if type(parsed) is bytes:
                parsed = _parse_receipt(parsed, path)
            if isinstance(parsed, str):
                receipt = "invalid"
                problems = (parsed,)
            elif parsed is not _GONE:
                receipt, worker = parsed[0], parsed[1]  # type: ignore[index]
                if summary is not None and parsed[3] != summary[1]:  # type: ignore[index]
                    problems = ("receipt names another job digest",)
        attempts = 0
        if key in maps["attempts"]:
            parsed, ok = self._read(f"{gen}/attempts/{key}.jsonl", racy, _ATTEMPTS_BYTES)
            settled = settled and ok
            if type(parsed) is bytes:
                parsed = _parse_attempts(parsed)
            if isinstance(parsed, tuple):
                attempts, last = parsed
                worker = worker or last
        return (
            folders,
            summary is not None,
            *(summary or _NO_SUMMARY),
            invalid,
            receipt,
            problems,
            worker,
            attempts,
        ), settled

    def _finish(self, key: str, facts: FileFacts, has_lease: bool, now: float) -> tuple[JobRow, bool]:
        """The row, and whether it depends on the key's files alone."""
        (
            folders,
            has_summary,
            schema,
            digest,
            instruction,
            paths,
            inputs,
            created,
            note,
            invalid,
            receipt,
            receipt_problems,
            worker,
            attempts,
        ) = facts
        problems = list(receipt_problems)
        fixed = True
        base_fresh = None
        if receipt == "ok" and has_summary and "running" in folders:
            stale = [p for p, want in inputs if self._tree_hash(p) != want]
            base_fresh = not stale
            problems += [f"{p}: changed since the job was minted" for p in stale]
            fixed = False
        lease = None
        if folders == ("running",):
            lease, holder = self._lease(key, has_lease, now, receipt, base_fresh, invalid)
            worker = holder or worker
            fixed = fixed and not has_lease
        state = _derive(folders, lease, receipt, base_fresh, invalid)
        if invalid:
            problems.insert(0, invalid)
        if state is State.INCONSISTENT:
            problems.append(inconsistency_rule(frozenset(folders), receipt is not None))
        elif state is State.ORPHANED:
            problems.append(f"lease {lease}: the worker is gone; requeue replays the job")
            fixed = False
        elif state is State.RUNNING:
            fixed = False
        if note:
            problems.append(f"rejected: {note}")
        row = _make_row(
            (
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
                _share(tuple(problems)) if problems else (),
            )
        )
        return row, fixed

    def _lease(
        self,
        key: str,
        has_lease: bool,
        now: float,
        receipt: str | None,
        base_fresh: bool | None,
        invalid: str | None,
    ) -> tuple[str, str]:
        """(lease state, holder) of a job in running/ alone.

        Without a lease file the state is "claiming" or "missing" by the job file's age;
        when the job's state is the same either way (and not orphaned, whose message names
        it), the job file is not looked at.
        """
        parsed = _GONE
        if has_lease:
            path = f"{self._gen}/running/{key}.lease"
            try:
                data, _ = read_with_stat(path, _LEASE_BYTES)
            except BadInput as exc:
                parsed = str(exc) if os.path.lexists(path) else _GONE
            else:
                known = self._leases.get(key)
                if known is not None and known[0] == data:
                    parsed = known[1]
                else:
                    parsed = _parse_lease(data, path)
                    self._leases[key] = (data, parsed)
                    self._dirty = True
        if parsed is _GONE:
            running = ("running",)
            either = _derive(running, LEASE_MISSING, receipt, base_fresh, invalid)
            if either is not State.ORPHANED and either is _derive(
                running, LEASE_CLAIMING, receipt, base_fresh, invalid
            ):
                return LEASE_MISSING, ""
            try:
                claimed = os.lstat(f"{self._gen}/running/{key}.json").st_ctime
            except FileNotFoundError:
                return LEASE_MISSING, ""
            return (LEASE_CLAIMING if now - claimed < CLAIM_GRACE else LEASE_MISSING), ""
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
