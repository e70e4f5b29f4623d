"""One job's row: what its files say, then what its lease, the tree and the clock add.

`read_facts` reads a key's documents (`core.model.quick_checks`, the strict models
for what those refuse) into `KeyFacts`, which hold while those files are not replaced;
`RowMaker.row` adds the lease, tree, clock and candidates (the attempts file only for a
row shown in full). A file that does not parse makes its job INVALID; nothing raises.
"""

from __future__ import annotations

import functools
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from core.errors import BadInput
from core.model import freshness, quick_checks
from core.model.canonical import MAX_JSON_BYTES, loads_strict, read_with_stat, sha256_file
from core.model.contract import KEY_RE, MAX_LEASE_BYTES, ReceiptStatus
from core.model.freshness import LeaseState, Verdict
from core.model.lifecycle import Facts, State, derive_state, inconsistency_rule
from core.model.paths import lstat_inside
from core.model.quick_checks import JobSummary, LeaseFacts, ReceiptFacts
from core.store.events import last_claim
from core.store.layout import Layout

# A file changed this recently may change again within its mtime's granularity without its
# identity changing: what was read from it is used but not kept (git's "racily clean").
RACY_NS = 2_000_000_000
NO_JOB = JobSummary("", "", "", (), (), 0.0)
# A lease file as it was read: its identity (inode, size, mtime, ctime) and what it said.
Lease = tuple[tuple[int, ...], LeaseFacts]
# A tree file as a row met it: its identity (zeros: absent) and sha256 (None: absent).
TreeFile = tuple[tuple[int, ...], str | None]
# The folders whose jobs keep their inputs: a closed job meets the tree no more.
OPEN = ("queue", "running")


def racy_after() -> int:
    """The time (ns) after which a file's mtime says it may still be changing."""
    return time.time_ns() - RACY_NS


class JobRow(NamedTuple):
    """What a listing shows of one job; `attempts` is None when its attempts file was not read."""

    key: str
    state: State
    schema: str = ""
    digest: str = ""
    instruction: str = ""
    allowed_paths: tuple[str, ...] = ()
    created_at: float = 0.0
    attempts: int | None = None
    worker: str = ""
    receipt_status: str | None = None
    folders: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    candidates: int = 0  # best-of-N: how many candidates the job has (`core.review.candidates`)
    modified: int = 0  # its job file's mtime (ns): the board's order within some states

    def to_dict(self) -> dict[str, object]:
        lists = {name: list(getattr(self, name)) for name in ("allowed_paths", "folders", "problems")}
        return {**self._asdict(), **lists, "state": self.state.value, "worker": self.worker or None}


class KeyFacts(NamedTuple):
    """What a key's job documents and receipt say: the first valid job document's
    `JobSummary` fields (its schema "" when there is none; its inputs kept only in queue/
    and running/, where the tree is met)."""

    folders: tuple[str, ...]  # the state folders holding `<key>.json`, in `JOB_FOLDERS` order
    inode: int  # of the first of those files, as it was read (0: none)
    receipt_inode: int  # of the receipt read (0: none)
    modified: int  # the mtime (ns) of the first of those files
    schema: str
    digest: str
    instruction: str
    allowed_paths: tuple[str, ...]
    inputs: tuple[tuple[str, str | None], ...]
    created_at: float
    rejection: str  # the reason in a rejected record, else ""
    invalid: str | None  # the first fault of the key's name or a job document
    receipt: str | None  # the receipt's status, "invalid", or None when there is none
    receipt_worker: str
    receipt_problems: tuple[str, ...]


class FileRead(NamedTuple):
    data: bytes | str | None  # the bytes, or why they cannot be read, or None: the file is gone
    inode: int
    modified: int  # mtime (ns)
    settled: bool  # changed before the time asked about: what is made of it may be kept


def read_file(path: str, racy_ns: int = 0, limit: int = MAX_JSON_BYTES) -> FileRead:
    try:
        data: bytes | str
        data, st = read_with_stat(path, limit)
    except BadInput as exc:
        try:
            data, st = str(exc), os.lstat(path)
        except FileNotFoundError:
            return FileRead(None, 0, 0, False)
    return FileRead(data, st.st_ino, st.st_mtime_ns, st.st_mtime_ns < racy_ns)


def _checked(data: bytes, path: str, quick: Callable[[Any], Any], strict: Callable[[], Any]) -> Any:
    """What `quick` makes of the document, else what the strict model does; or the fault."""
    try:
        got = quick(loads_strict(data, path))
        return got if got is not None else strict()
    except BadInput as exc:
        return str(exc)


def _rejection(record: object) -> str:
    rejection = record.get("rejection") if isinstance(record, dict) else None
    return str(rejection.get("reason") or "") if isinstance(rejection, dict) else ""


def parse_job(data: bytes, path: str, folder: str, key: str) -> tuple[JobSummary, str] | str:
    """A job document (or the record holding one) as its summary and rejection reason, or its fault."""

    def strict() -> tuple[JobSummary, str]:
        from core.store.job_state import read_job_file

        job, record = read_job_file(Path(path), folder)
        return quick_checks.summary_of(job), _rejection(record)

    def quick(obj: Any) -> tuple[JobSummary, str] | None:
        doc: Any = (
            (obj.get("job") if type(obj) is dict else None) if folder in ("applied", "rejected") else obj
        )
        summary = quick_checks.quick_job(doc)
        return (summary, _rejection(obj)) if summary is not None and doc["idempotency_key"] == key else None

    got = _checked(data, path, quick, strict)
    if isinstance(got, str) or folder in OPEN:
        return got  # type: ignore[no-any-return]
    return got[0]._replace(inputs=()), got[1]


def parse_receipt(data: bytes, path: str) -> ReceiptFacts | str:
    def strict() -> ReceiptFacts:
        from core.model.models import receipt_from_obj

        rec = receipt_from_obj(loads_strict(data, path), path)
        return ReceiptFacts(rec.status.value, rec.worker_id, rec.idempotency_key, rec.job_digest)

    return _checked(data, path, quick_checks.quick_receipt, strict)  # type: ignore[no-any-return]


def parse_lease(data: bytes, path: str) -> LeaseFacts | str:
    def strict() -> LeaseFacts:
        from core.store.lease import lease_from_bytes

        lease = lease_from_bytes(data, path)
        return LeaseFacts(lease.worker, lease.host, lease.pid, float(lease.heartbeat), float(lease.ttl))

    return _checked(data, path, quick_checks.quick_lease, strict)  # type: ignore[no-any-return]


def read_facts(
    gen: str, key: str, folders: tuple[str, ...], *, receipt: bool, racy_ns: int
) -> tuple[KeyFacts, bool]:
    """What the files of `key` in `folders` (and its receipt) say, and whether all had settled."""
    name, settled, kept, inode, modified, job, rejection = f"{key}.json", True, [], 0, 0, None, ""
    invalid = None if KEY_RE.fullmatch(key) else f"{name}: file name is not a job key"
    for folder in folders:
        path = f"{gen}/{folder}/{name}"
        read = read_file(path, racy_ns)
        settled = settled and read.settled
        if read.data is not None:  # else gone since its folder was listed
            kept.append(folder)
            inode, modified = inode or read.inode, modified or read.modified
            parsed = parse_job(read.data, path, folder, key) if isinstance(read.data, bytes) else read.data
            if isinstance(parsed, str):
                invalid = invalid or parsed
            elif job is None:
                job, rejection = parsed
    status, worker, problems = None, "", tuple[str, ...]()
    read = read_file(f"{gen}/receipts/{name}", racy_ns) if receipt else FileRead(None, 0, 0, True)
    got = parse_receipt(read.data, f"{gen}/receipts/{name}") if isinstance(read.data, bytes) else read.data
    if isinstance(got, str):
        status, problems = "invalid", (got,)
    elif got is not None:
        status, worker = got.status, got.worker_id
        problems = ("receipt names another job digest",) if job and got.job_digest != job.digest else ()
    facts = KeyFacts(
        tuple(kept),
        inode,
        read.inode,
        modified,
        *(job or NO_JOB),
        rejection,
        invalid,
        status,
        worker,
        problems,
    )
    return facts, settled and read.settled


def meets_tree(schema: str, folders: tuple[str, ...], receipt: str | None) -> bool:
    """Whether a job's row is judged against the tree (its inputs, which are its allowed
    paths): a queued job's, or an open one's whose receipt came back ok."""
    open_ = any(folder in OPEN for folder in folders)
    return bool(schema) and open_ and ((folders == ("queue",) and not receipt) or receipt == ReceiptStatus.OK)


@functools.cache
def _state(folders: tuple[str, ...], lease: LeaseState | None, receipt: str | None, *rest: Any) -> State:
    """`derive_state`, once for each combination (`rest`: fresh, invalid, batch)."""
    return derive_state(Facts(frozenset(folders), lease, receipt, *rest))


def read_candidates(path: str) -> tuple[int, int]:
    """(candidates, of which came back ok) in a key's candidates folder (`core.review.candidates`):
    one whose receipt does not read counts, not as ok."""
    try:
        names = [] if stat.S_ISLNK(os.lstat(path).st_mode) else os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return 0, 0
    numbered = [n for n in names if n.isdigit() and n[0] != "0"]
    receipts = [read_file(f"{path}/{n}/receipt.json").data for n in numbered]
    got = [parse_receipt(data, path) for data in receipts if isinstance(data, bytes)]
    return len(numbered), sum(isinstance(r, ReceiptFacts) and r.status == ReceiptStatus.OK for r in got)


# Tree files hashed, by path: kept while the file's identity (inode, size, times) holds.
_HASHED: dict[str, tuple[tuple[int, ...], str]] = {}


def hash_of(path: str, st: os.stat_result) -> str:
    """A regular file's sha256, again only when its identity changed since it was hashed
    (not kept while its mtime is racy)."""
    identity = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    kept = _HASHED.get(path)
    if kept is not None and kept[0] == identity:
        return kept[1]
    digest = sha256_file(Path(path))
    if st.st_mtime_ns < racy_after():
        _HASHED[path] = identity, digest
    return digest


class RowMaker:
    """Makes rows of facts at one moment: the clock, the tree and each lease as they are now.

    A lease file is read again only when its identity changed since `leases` were kept
    (a worker's heartbeat replaces it), a tree file hashed again only when its identity
    changed since `tree`; what a lease says is judged against the clock each time.
    `momentary` says whether the last row made met a lease, the clock, candidates or a
    tree file that may still be changing: such a row holds for this moment only."""

    def __init__(
        self,
        layout: Layout,
        now: float | None = None,
        leases: dict[str, Lease] | None = None,
        tree: dict[str, TreeFile] | None = None,
    ) -> None:
        self.layout, self.gen, self.root = layout, str(layout.gen), layout.root
        self.now = time.time() if now is None else now
        self._hashes: dict[str, str | None] = {}  # tree files hashed for this moment
        self._known, self.leases = leases or {}, dict[str, Lease]()  # kept before, and now
        self._known_tree, self.tree = tree or {}, dict[str, TreeFile]()
        self._racy = racy_after()
        self.momentary = False

    def _tree_hash(self, rel: str) -> str | None:
        """A tree file's hash; None when it is absent, "" when it is not a safe regular file."""
        if rel not in self._hashes:
            try:
                st = lstat_inside(self.root, rel)
                identity = (0,) * 4 if st is None else (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                kept = self._known_tree.get(rel)
                if kept is not None and kept[0] == identity:
                    self._hashes[rel] = kept[1]
                else:
                    self._hashes[rel] = None if st is None else hash_of(str(self.root / rel), st)
                if st is None or st.st_mtime_ns < self._racy:
                    self.tree[rel] = identity, self._hashes[rel]
            except (BadInput, OSError):
                self._hashes[rel] = ""
        return self._hashes[rel]

    def tree_changes(self) -> set[str]:
        """The tree files met before (`tree`) that are not as they were, or not settled."""
        for rel in self._known_tree:
            self._tree_hash(rel)
        return {rel for rel, kept in self._known_tree.items() if self.tree.get(rel) != kept}

    def _lease(
        self, key: str, leased: bool, state_with: Callable[[LeaseState], State]
    ) -> tuple[Verdict, str]:
        """The verdict on a lease of a job in running/ alone, and its holder. Without a lease
        file the state is "claiming" or "missing" by the job file's age, if that matters."""
        path = f"{self.gen}/running/{key}"
        got = self._read_lease(key, f"{path}.lease") if leased else None
        self.momentary |= leased
        if isinstance(got, LeaseFacts):
            return freshness.judge(got.heartbeat, got.ttl, got.host, got.pid, self.now), got.worker
        if got is not None:
            return freshness.unreadable(got), ""
        missing = state_with(LeaseState.MISSING)
        if missing is not State.ORPHANED and missing is state_with(LeaseState.CLAIMING):
            return freshness.NO_LEASE, ""
        self.momentary = True
        try:
            claimed: float | None = os.lstat(f"{path}.json").st_ctime
        except FileNotFoundError:
            claimed = None
        return freshness.judge_absent(claimed, self.now), ""

    def _read_lease(self, key: str, path: str) -> LeaseFacts | str | None:
        """What a lease file says (as kept, while it is the same file), its fault, or None: gone."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        identity = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        kept = self._known.get(key)
        if kept is None or kept[0] != identity:
            read = read_file(path, self._racy, limit=MAX_LEASE_BYTES)
            got = parse_lease(read.data, path) if isinstance(read.data, bytes) else read.data
            if not isinstance(got, LeaseFacts) or not read.settled:
                return got
            kept = identity, got  # the identity before the read: a file replaced meanwhile is read again
        self.leases[key] = kept
        return kept[1]

    def row(
        self, key: str, facts: KeyFacts, *, leased: bool, candidates: bool = False, attempts: bool = False
    ) -> JobRow:
        """The row of `key`, which has a lease file or a candidates folder if so said; with
        `attempts`, its attempts file is read too."""
        folders, receipt, invalid = facts.folders, facts.receipt, facts.invalid
        problems = [invalid, *facts.receipt_problems] if invalid else [*facts.receipt_problems]
        fresh, self.momentary = None, candidates
        if meets_tree(facts.schema, folders, receipt):
            stale = [p for p, want in facts.inputs if self._tree_hash(p) != want]
            fresh, problems = not stale, problems + [f"{p}: changed since the job was minted" for p in stale]
            self.momentary |= any(p not in self.tree for p, _ in facts.inputs)
        count, ok = read_candidates(f"{self.gen}/candidates/{key}") if candidates else (0, 0)
        bad, batch = invalid is not None or None, ("ok" if ok else "failed") if count else None
        verdict, worker = None, facts.receipt_worker
        if folders == ("running",):
            verdict, holder = self._lease(
                key, leased, lambda lease: _state(folders, lease, receipt, fresh, bad, batch)
            )
            worker = holder or worker
        state = _state(folders, verdict.state if verdict else None, receipt, fresh, bad, batch)
        if state is State.INCONSISTENT:
            problems.append(inconsistency_rule(frozenset(folders), receipt is not None))
        elif state is State.ORPHANED and verdict is not None:
            problems.append(f"lease {verdict.state.value}: {verdict.why}; requeue replays the job")
        elif state is State.RUNNING and verdict is not None and verdict.why:
            problems.append(f"lease: {verdict.why}")
        if facts.rejection:
            problems.append(f"rejected: {facts.rejection}")
        row = JobRow(
            key=key,
            state=state,
            schema=facts.schema,
            digest=facts.digest,
            instruction=facts.instruction,
            allowed_paths=facts.allowed_paths,
            created_at=facts.created_at,
            worker=worker,
            receipt_status=receipt,
            folders=folders,
            problems=tuple(problems),
            candidates=count,
            modified=facts.modified,
        )
        return with_attempts(self.layout, row) if attempts else row


def with_attempts(layout: Layout, row: JobRow) -> JobRow:
    """`row` with its claims counted, and the last claim's worker when it names none."""
    claims, last = last_claim(layout, row.key)
    return row._replace(attempts=claims, worker=row.worker or last)
