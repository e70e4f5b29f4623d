"""One consistent read of `.gen/`: every job with its derived state, for `ls` and the board.

A row is made in two steps. `core.read.snapshot_files.read_facts` reads what a key's files
say (its job documents, receipt and attempts) into `FileFacts`. `Scanner._finish` adds
what changes without those files changing (the lease, judged by `core.model.freshness`; the
tree; the clock) and asks `derive_state`.

The index, kept in memory by a long-lived `Scanner` and in `.gen/cache/` for the next
process (`core.read.snapshot_index`), holds the folders as last listed
(`core.read.snapshot_folders`) and, per key, what was made from the files listed: the
finished row when it depends on nothing else (queued, applied, rejected, failed, invalid
and inconsistent jobs without a lease), else the facts, so only `_finish` runs again.
Leases are read on every scan and parsed again only when their bytes changed; tree files
are hashed again when their (inode, size, mtime, ctime) changed. What was read from a
file changed within the last two seconds is used but not kept. The index only saves
work: a missing, damaged or foreign one is ignored, and verification never reads it.

A scan with many keys the index does not know reads them in several processes at once
(`core.read.snapshot_pool`). The index is loaded by a scanner's first scan (or refresh), which
meanwhile has another process read the leases and list a large attempts/
(`core.read.snapshot_pool.list_apart`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter
from pathlib import Path
from typing import NamedTuple, cast

from core.errors import BadInput, GenjobError
from core.model import freshness
from core.model.canonical import sha256_file
from core.model.contract import KEY_RE, ReceiptStatus
from core.model.freshness import LeaseState, Verdict
from core.model.lifecycle import Facts, State, derive_state, inconsistency_rule
from core.model.paths import lstat_inside
from core.model.protected import DEFAULT_PROTECTED
from core.read.snapshot_files import parse_lease, racy_after, read_facts, read_lease, read_leases, share
from core.read.snapshot_folders import JSON_FOLDERS, LISTED, file_identity, list_folders, list_growing
from core.read.snapshot_index import read_index, write_index
from core.read.snapshot_pool import list_apart, read_many
from core.read.snapshot_records import (
    NO_LEASE_FACTS,
    ConfigStamp,
    FileFacts,
    FileId,
    FileStamp,
    Index,
    JobRow,
    LeaseRead,
    Listing,
    TreeStamp,
)
from core.store.layout import Layout, user_config_dir
from core.store.pins import pins_file
from core.store.tree import make_folder

__all__ = ["JobRow", "Scanner", "Snapshot", "keys_from_paths", "take_snapshot"]

CACHE_NAME = "snapshot.marshal"
# A first scan with an index lists attempts/ in another process while this one loads the
# index (`core.read.snapshot_pool.list_apart`) when the folder is this large: some 3,000
# entries on ext4. `scan_warm`: 0.69 s with this, 0.96 s without (the whole process).
APART_FOLDER_BYTES = 128 * 1024

_state_of = attrgetter("state")


@dataclass
class Snapshot:
    rows: dict[str, JobRow]
    taken_at: float
    signature_required: bool
    config_error: str | None = None
    counts: Counter[State] = field(default_factory=Counter)
    unsandboxed_checks: tuple[str, ...] = ()
    config_held: str | None = None
    protected_paths: tuple[str, ...] = DEFAULT_PROTECTED

    def __post_init__(self) -> None:
        self.counts = Counter(map(_state_of, self.rows.values()))


_STATE_MEMO: dict[tuple[object, ...], State] = {}


def _derive(
    folders: tuple[str, ...],
    lease: LeaseState | None,
    receipt: str | None,
    base_fresh: bool | None,
    invalid: str | None,
    candidates: str | None = None,
) -> State:
    """`derive_state`, remembered for each combination of facts without a fault message."""
    if invalid is not None:
        return derive_state(Facts(frozenset(folders), lease, receipt, base_fresh, invalid, candidates))
    memo = (folders, lease, receipt, base_fresh, candidates)
    state = _STATE_MEMO.get(memo)
    if state is None:
        facts = Facts(frozenset(folders), lease, receipt, base_fresh, None, candidates)
        state = _STATE_MEMO[memo] = derive_state(facts)
    return state


def _candidates(facts: FileFacts) -> str | None:
    """What the lifecycle needs of a job's candidates: none, one ok, or only failed ones."""
    if not facts.candidates:
        return None
    return "ok" if facts.candidates_ok else "failed"


def _config_policy(path: str) -> tuple[bool, str | None, tuple[str, ...], str | None, tuple[str, ...]]:
    """(require_signature, the fault of a bad config.toml, the checks run unsandboxed, what
    the config would run and may not yet, the protected paths)."""
    from core.store.config import load_config  # pydantic: loaded only when a config.toml changed

    try:
        config = load_config(Path(path))
    except GenjobError as exc:
        return (True, str(exc), (), None, DEFAULT_PROTECTED)
    unsandboxed = tuple(name for name, check in config.checks.items() if check.sandbox == "none")
    held = config.held.hint if config.held is not None else None
    return (config.policy.require_signature, None, unsandboxed, held, tuple(config.policy.protected_paths))


_NO_STAMP = (0, 0, 0, 0)


def _operator_stamp(root: Path) -> tuple[int, ...]:
    """The stamps of the operator's config.toml and of `root`'s pins, zeros for one that
    is missing (or cannot be read: `load_config` then says why)."""
    stamps: list[int] = []
    for path in (user_config_dir() / "config.toml", pins_file(root)):
        try:
            stamps += FileStamp.of(os.stat(path))
        except OSError:
            stamps += _NO_STAMP
    return tuple(stamps)


Files = Mapping[str, Mapping[str, FileId]]


class Scanner:
    """Builds snapshots, re-reading only the keys whose files changed."""

    def __init__(self, layout: Layout, disk_cache: bool = True) -> None:
        self.layout = layout
        self.disk_cache = disk_cache
        self._gen = str(layout.gen)
        self._root = str(layout.root)
        # The folders as the last full scan listed them; what is cached below was read
        # from the files named there.
        self._listed: dict[str, Listing] | None = None
        # Finished rows that depend on their key's files alone.
        self._fixed: dict[str, JobRow] = {}
        # What the files say, for rows that also depend on a lease, the tree or the clock.
        self._volatile: dict[str, FileFacts] = {}
        self._tree: dict[str, TreeStamp] = {}
        # Tree hashes taken during the current scan.
        self._tree_now: dict[str, str | None] = {}
        self._leases: dict[str, LeaseRead] = {}
        self._config: ConfigStamp | None = None
        self._dirty = False
        self.signature_required = True
        self.config_error: str | None = None
        self.unsandboxed_checks: tuple[str, ...] = ()
        self.config_held: str | None = None
        self.protected_paths: tuple[str, ...] = DEFAULT_PROTECTED
        # The index is loaded by the first call that needs it: a first scan lists
        # attempts/ in another process meanwhile.
        self._unloaded = disk_cache

    # -- the index -------------------------------------------------------------------
    @property
    def _cache_path(self) -> Path:
        return self.layout.cache / CACHE_NAME

    def _device(self) -> int:
        try:
            return os.stat(self._gen).st_dev
        except OSError:
            return -1

    def _load_cache(self) -> None:
        if not self._unloaded:
            return
        self._unloaded = False
        index = read_index(self._cache_path, self._gen, self._device(), LISTED)
        if index is not None:
            self._config, self._tree = index.config, index.tree
            self._listed, self._fixed, self._volatile, self._leases = (
                index.listed,
                index.fixed,
                index.volatile,
                index.leases,
            )

    def save_cache(self) -> None:
        if self._unloaded or not self._dirty or not self.disk_cache or self._listed is None:
            return
        index = Index(
            config=self._config,
            tree=self._tree,
            listed=self._listed,
            fixed=self._fixed,
            volatile=self._volatile,
            leases=self._leases,
        )
        with contextlib.suppress(OSError, ValueError, GenjobError):  # a cache not saved costs a rescan
            make_folder(self.layout.cache, self.layout.gen)
            write_index(self._cache_path, self._gen, self._device(), index)
            self._dirty = False

    # -- the tree and the config -----------------------------------------------------------
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
        stamp = FileStamp.of(st)
        hit = self._tree.get(rel)
        if hit is not None and hit.file == stamp:
            return hit.digest
        try:
            digest = sha256_file(Path(self._root, rel))
        except OSError:
            return ""
        if st.st_mtime_ns < racy_after():
            self._tree[rel] = TreeStamp(stamp, digest)
            self._dirty = True
        return digest

    def _read_config(self) -> None:
        path = str(self.layout.config)
        self.unsandboxed_checks, self.config_held, self.protected_paths = (), None, DEFAULT_PROTECTED
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self.signature_required, self.config_error = True, None
            return
        except OSError as exc:
            self.signature_required, self.config_error = True, f"{path}: {exc.strerror}"
            return
        stamp, operator = FileStamp.of(st), _operator_stamp(self.layout.root)
        hit = self._config
        if hit is not None and hit.file == stamp and hit.operator == operator:
            self.signature_required, self.config_error = hit.signature_required, hit.fault
            self.unsandboxed_checks, self.config_held, self.protected_paths = (
                hit.unsandboxed,
                hit.held,
                hit.protected,
            )
            return
        policy = _config_policy(path)
        self.signature_required, self.config_error, self.unsandboxed_checks, self.config_held = policy[:4]
        self.protected_paths = policy[4]
        racy = racy_after()
        if st.st_mtime_ns < racy and operator[2] < racy and operator[6] < racy:
            self._config = ConfigStamp(stamp, operator, *policy)
            self._dirty = True

    # -- scanning --------------------------------------------------------------------------
    def scan(self) -> Snapshot:
        """A full snapshot; the index makes an unchanged key cost a few dictionary lookups."""
        now = time.time()
        rows: dict[str, JobRow] = {}
        for batch in self.scan_batches(now=now):
            rows.update(batch)
        return Snapshot(
            rows,
            now,
            self.signature_required,
            self.config_error,
            unsandboxed_checks=self.unsandboxed_checks,
            config_held=self.config_held,
            protected_paths=self.protected_paths,
        )

    def scan_batches(self, size: int = 4096, now: float | None = None) -> Iterator[dict[str, JobRow]]:
        """A full scan delivered `size` rows at a time, the jobs that need an operator first.

        Keys with a receipt or in `running/` come first, then the queue, then finished
        jobs, so a board can show what matters before all of a large `.gen/` is read.
        """
        self._tree_now = {}
        gen = self._gen
        now = time.time() if now is None else now
        first = self._list_meanwhile(size, now) if self._worth_apart() else None
        if first is None:
            self._load_cache()
            listed, changed = list_folders(gen, self._listed)
            self._forget(changed)
            first = _Listed(listed, _order(listed), None, {})
        # `made`: rows made ahead, of cached facts while another process listed attempts/,
        # and when many keys are read in several processes at once.
        listed, order, ready, made = first
        fixed, volatile = self._fixed, self._volatile
        racy = racy_after()
        files = {f: listed[f].files for f in LISTED}
        leases = listed["running"].leases or {}
        keys = list(order)
        for key, facts, settled in read_many(
            [k for k in keys if k not in fixed and k not in volatile],
            lambda key: read_facts(gen, key, files, racy),
        ):
            made[key] = self._row(key, files, key in leases, now, racy, True, (facts, settled))
        for at, chunk in enumerate(_chunks(keys, size)):
            batch, todo = _batch(chunk, fixed) if ready is None else ready[at]
            for key in todo:
                row = made.pop(key, None)
                batch[key] = row if row is not None else self._row(key, files, key in leases, now, racy, True)
            yield cast(dict[str, JobRow], batch)  # no None is left
        # The policy is the snapshot's, not the rows': read after them, so that a changed
        # config.toml (pydantic, the config model) does not hold back the first rows.
        self._read_config()
        for key in fixed.keys() - order.keys():
            del fixed[key]
        for key in volatile.keys() - order.keys():
            del volatile[key]
        for key in self._leases.keys() - leases.keys():
            del self._leases[key]
        old = self._listed
        self._dirty = self._dirty or old is None or any(listed[f] is not old.get(f) for f in LISTED)
        self._listed = listed

    def _list_meanwhile(self, size: int, now: float) -> _Listed | None:
        """A first scan's listing, made while another process reads the leases and lists
        attempts/; meanwhile this one loads the index and makes the rows it has facts for.
        None when no other process can (`core.read.snapshot_pool.list_apart`)."""
        gen = self._gen
        apart = list_apart(partial(list_growing, gen, "attempts"), partial(read_leases, gen))
        if apart is None:
            return None
        try:
            self._load_cache()
            old = self._listed
            listed, changed = list_folders(gen, old, tuple(f for f in LISTED if f != "attempts"))
            self._forget(changed)
            leases = listed["running"].leases or {}
            order = _order(listed)
            # The batches of finished rows, made while the other process still lists:
            # `scan_warm` 0.54 s with this, 0.58 s without (best of five).
            ready = [_batch(chunk, self._fixed) for chunk in _chunks(list(order), size)]
            # The leases, read by the other process before it lists attempts/:
            # `scan_warm` 0.59 s with this, 0.63 s without (best of six each).
            ahead = apart.ahead()
            made = {
                key: self._finish(key, facts, key in leases, now, ahead.get(key))[0]
                for key, facts in self._volatile.items()
            }
        except BaseException:
            apart.files(None)  # the process is waited for, however the scan ends
            raise
        taken = apart.files(None if old is None else old["attempts"].files)
        rest, grew = list_folders(gen, old, ("attempts",), None if taken is None else {"attempts": taken})
        listed = {f: listed[f] if f in listed else rest[f] for f in LISTED}
        self._forget(grew)
        if grew is None:
            return _Listed(listed, order, None, made)
        for key in grew:
            made.pop(key, None)
        _unmake(ready, order, grew, size)
        return _Listed(listed, order, ready, made)

    def _worth_apart(self) -> bool:
        """Whether to list attempts/ in another process while this one loads the index:
        for a first scan, with an index, of an attempts/ of some 3,000 entries or more."""
        if not self._unloaded:
            return False
        try:
            return (
                os.stat(f"{self._gen}/attempts").st_size >= APART_FOLDER_BYTES and self._cache_path.exists()
            )
        except OSError:
            return False

    def _forget(self, changed: set[str] | None) -> None:
        """Drop what is cached for the keys whose files `changed` (None: for all keys)."""
        if changed is None:
            self._fixed.clear()
            self._volatile.clear()
            return
        for key in changed:
            self._fixed.pop(key, None)
            self._volatile.pop(key, None)

    def found(self, key: str) -> bool:
        """Whether the last full scan delivered a row for `key`."""
        self._load_cache()
        listed = self._listed
        return listed is not None and any(key in listed[f].files for f in JSON_FOLDERS)

    def refresh(self, keys: Iterable[str]) -> dict[str, JobRow | None]:
        """Re-derive just `keys` (after file events); None for a key that is gone."""
        self._load_cache()
        now = time.time()
        racy = racy_after()
        self._tree_now = {}
        changed: dict[str, JobRow | None] = {}
        gen = self._gen
        for key in keys:
            now_ids = [file_identity(f"{gen}/{folder}/{key}.json", False) for folder in JSON_FOLDERS]
            has_lease = os.path.lexists(f"{gen}/running/{key}.lease")
            attempts_id = file_identity(f"{gen}/attempts/{key}.jsonl", True)
            candidates_id = file_identity(f"{gen}/candidates/{key}", True)
            if all(i is None for i in now_ids):
                changed[key] = None
                continue
            # What is cached for the key holds only while its files are the ones listed.
            listed = self._listed
            same = (
                listed is not None
                and all(listed[f].files.get(key) == i for f, i in zip(JSON_FOLDERS, now_ids, strict=True))
                and (key in (listed["running"].leases or {})) == has_lease
                and listed["attempts"].files.get(key) == attempts_id
                and listed["candidates"].files.get(key) == candidates_id
            )
            if not same:
                self._fixed.pop(key, None)
                self._volatile.pop(key, None)
            row = self._fixed.get(key)
            if row is None:
                files: dict[str, dict[str, FileId]] = {
                    f: {key: i} if i is not None else {} for f, i in zip(JSON_FOLDERS, now_ids, strict=True)
                }
                files["attempts"] = {key: attempts_id} if attempts_id is not None else {}
                files["candidates"] = {key: candidates_id} if candidates_id is not None else {}
                row = self._row(key, files, has_lease, now, racy, same)
            changed[key] = row
        return changed

    # -- one key -----------------------------------------------------------------------------
    def _row(
        self,
        key: str,
        files: Files,
        has_lease: bool,
        now: float,
        racy: int,
        keep: bool,
        ahead: tuple[FileFacts, bool] | None = None,
    ) -> JobRow:
        """The row of `key`, from its cached facts if there are any, else from its files
        (as `files`, folder -> key -> identity, lists them) or as read ahead; what was read
        is cached when `keep` and every file read had settled."""
        facts = self._volatile.get(key)
        if facts is not None:
            return self._finish(key, facts, has_lease, now)[0]
        facts, settled = ahead if ahead is not None else read_facts(self._gen, key, files, racy)
        row, fixed = self._finish(key, facts, has_lease, now)
        if keep and settled:
            self._dirty = True
            if fixed:
                self._fixed[key] = row
            else:
                self._volatile[key] = facts
        return row

    def _finish(
        self, key: str, facts: FileFacts, has_lease: bool, now: float, lease_bytes: bytes | None = None
    ) -> tuple[JobRow, bool]:
        """The row, and whether it depends on the key's files alone (`lease_bytes`: the
        lease file's bytes when they were read already)."""
        folders, receipt, job = facts.folders, facts.receipt, facts.job
        problems = list(facts.receipt_problems)
        fixed = True
        base_fresh = None
        if receipt == ReceiptStatus.OK and facts.has_job and "running" in folders:
            stale = [p for p, want in job.inputs if self._tree_hash(p) != want]
            base_fresh = not stale
            problems += [f"{p}: changed since the job was minted" for p in stale]
            fixed = False
        worker = facts.worker
        verdict: Verdict | None = None
        candidates = _candidates(facts)
        if folders == ("running",):
            verdict, holder = self._lease(
                key, has_lease, lease_bytes, now, receipt, base_fresh, facts.invalid, candidates
            )
            worker = holder or worker
            fixed = fixed and not has_lease
        lease = verdict.state if verdict is not None else None
        state = _derive(folders, lease, receipt, base_fresh, facts.invalid, candidates)
        if facts.invalid:
            problems.insert(0, facts.invalid)
        if state is State.INCONSISTENT:
            problems.append(inconsistency_rule(frozenset(folders), receipt is not None))
        elif state is State.ORPHANED and verdict is not None:
            problems.append(f"lease {verdict.state.value}: {verdict.why}; requeue replays the job")
            fixed = False
        elif state is State.RUNNING:
            if verdict is not None and verdict.why:
                problems.append(f"lease: {verdict.why}")
            fixed = False
        if facts.rejection:
            problems.append(f"rejected: {facts.rejection}")
        problems_kept = share(tuple(problems)) if problems else ()
        row = JobRow(
            key,
            state,
            job.schema,
            job.digest,
            job.instruction,
            job.allowed_paths,
            job.created_at,
            facts.attempts,
            worker,
            receipt,
            folders,
            problems_kept,
            facts.candidates,
        )
        return row, fixed

    def _lease(
        self,
        key: str,
        has_lease: bool,
        lease_bytes: bytes | None,
        now: float,
        receipt: str | None,
        base_fresh: bool | None,
        invalid: str | None,
        candidates: str | None,
    ) -> tuple[Verdict, str]:
        """The lease verdict and holder of a job in running/ alone.

        Without a lease file the state is "claiming" or "missing" by the job file's age;
        when the job's state is the same either way (and not orphaned, whose message
        says which), the job file is not looked at.
        """
        if has_lease:
            path = f"{self._gen}/running/{key}.lease"
            data = lease_bytes or read_lease(path)
            if isinstance(data, str):
                return freshness.unreadable(data), ""
            if isinstance(data, bytes):  # else it vanished since running/ was listed
                read = self._lease_read(key, data, path)
                if read.fault is not None:
                    return freshness.unreadable(read.fault), ""
                f = read.facts
                return freshness.judge(f.heartbeat, f.ttl, f.host, f.pid, now), f.worker
        running = ("running",)
        either = _derive(running, LeaseState.MISSING, receipt, base_fresh, invalid, candidates)
        if either is not State.ORPHANED and either is _derive(
            running, LeaseState.CLAIMING, receipt, base_fresh, invalid, candidates
        ):
            return freshness.NO_LEASE, ""
        try:
            claimed: float | None = os.lstat(f"{self._gen}/running/{key}.json").st_ctime
        except FileNotFoundError:
            claimed = None
        return freshness.judge_absent(claimed, now), ""

    def _lease_read(self, key: str, data: bytes, path: str) -> LeaseRead:
        """What the lease bytes `data` say, parsed again only when they changed."""
        known = self._leases.get(key)
        if known is not None and known.data == data:
            return known
        got = parse_lease(data, path)
        read = LeaseRead(data, got, NO_LEASE_FACTS) if isinstance(got, str) else LeaseRead(data, None, got)
        self._leases[key] = read
        self._dirty = True
        return read


# Batches of rows as a scan delivers them, each with the keys it has no row for yet.
_Ready = list[tuple[dict[str, JobRow | None], list[str]]]


class _Listed(NamedTuple):
    """The folders a full scan lists, the keys in the order it delivers them, the batches
    of finished rows made already (each with the keys it lacks), and rows made ahead."""

    listed: dict[str, Listing]
    order: dict[str, FileId]
    ready: _Ready | None
    made: dict[str, JobRow]


def _order(listed: Mapping[str, Listing]) -> dict[str, FileId]:
    """The keys of a scan in the order they are delivered: those with a receipt, those in
    running/, the queue, then finished jobs."""
    order = {**listed["receipts"].files, **listed["running"].files, **listed["queue"].files}
    order.update(listed["applied"].files)
    order.update(listed["rejected"].files)
    return order


def _chunks(keys: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(keys), size):
        yield keys[start : start + size]


def _batch(chunk: list[str], fixed: Mapping[str, JobRow]) -> tuple[dict[str, JobRow | None], list[str]]:
    """The finished rows of `chunk`, and the keys that have none."""
    batch: dict[str, JobRow | None] = dict(zip(chunk, map(fixed.get, chunk), strict=True))
    return batch, [k for k, row in batch.items() if row is None]


def _unmake(
    ready: list[tuple[dict[str, JobRow | None], list[str]]],
    order: Mapping[str, FileId],
    keys: set[str],
    size: int,
) -> None:
    """Take out of the `ready` batches the rows of `keys` (their files changed since)."""
    if not keys:
        return
    where = {k: i // size for i, k in enumerate(order)}
    for key in keys.intersection(where):
        batch, todo = ready[where[key]]
        if batch[key] is not None:
            batch[key] = None
            todo.append(key)


def keys_from_paths(layout: Layout, paths: Iterable[str | Path]) -> set[str]:
    """The job keys that changed files under `.gen/` belong to."""
    keys = set()
    gen = str(layout.gen) + os.sep
    candidates = gen + "candidates" + os.sep
    for p in paths:
        s = str(p)
        if not s.startswith(gen):
            continue
        if s.startswith(candidates):
            # .gen/candidates/<key>/<n>/...: the key is the folder's first part.
            stem = s[len(candidates) :].split(os.sep, 1)[0]
        else:
            stem = os.path.basename(s).split(".", 1)[0]
        if KEY_RE.fullmatch(stem):
            keys.add(stem)
    return keys


def take_snapshot(layout: Layout, disk_cache: bool = True) -> Snapshot:
    scanner = Scanner(layout, disk_cache)
    snap = scanner.scan()
    scanner.save_cache()
    return snap
