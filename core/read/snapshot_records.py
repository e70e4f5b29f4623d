"""The named records of the listing engine: what it reads from files, what it shows, and
what its index keeps between processes (`core.read.snapshot_index` stores exactly these).
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterator, Mapping
from itertools import chain
from typing import NamedTuple

from core.model.lifecycle import State

# The identity of a file as its folder's listing gives it: the inode of a `<key>.json`
# (never rewritten in place), or (inode, size, mtime_ns) of a `<key>.jsonl` (appended to).
FileId = int | tuple[int, int, int]


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
    candidates: int = 0  # best-of-N: how many candidates the job has (`core.review.candidates`)

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
            "candidates": self.candidates,
        }


class JobSummary(NamedTuple):
    """What a listing keeps of a valid job document."""

    schema: str
    digest: str
    instruction: str
    allowed_paths: tuple[str, ...]
    # (path, input hash or None) sorted by path; kept only for a running job, whose
    # receipt is checked against the tree.
    inputs: tuple[tuple[str, str | None], ...]
    created_at: float


NO_SUMMARY = JobSummary("", "", "", (), (), 0.0)


class ReceiptFacts(NamedTuple):
    """What a listing keeps of a valid receipt."""

    status: str  # a `core.model.contract.ReceiptStatus` word, as plain text
    worker_id: str
    idempotency_key: str
    job_digest: str


class LeaseFacts(NamedTuple):
    """What a listing keeps of a valid lease."""

    worker: str
    host: str
    pid: int
    heartbeat: float
    ttl: float


class FileFacts(NamedTuple):
    """What a key's files say: all of a row that stays true while those files do not
    change (its lease, the tree and the clock are looked at again on every scan)."""

    folders: tuple[str, ...]  # the state folders holding `<key>.json`, in `JOB_FOLDERS` order
    has_job: bool  # a job document parsed: `job` is its summary (else `NO_SUMMARY`)
    job: JobSummary
    rejection: str  # the reason in a rejected record, else ""
    invalid: str | None  # the first fault of the key's name or a job document
    receipt: str | None  # the receipt's status (plain text), "invalid", or None when there is none
    receipt_problems: tuple[str, ...]
    worker: str  # named by the receipt, else by the last claim in the attempts file
    attempts: int  # claims in the attempts file
    candidates: int = 0  # committed best-of-N candidates
    candidates_ok: int = 0  # of which came back `ok`


class PackedIds(Mapping[str, FileId]):
    """The entries of a growing folder as two blocks: the keys joined by NUL, and each
    key's (inode, size, mtime_ns) as 64-bit integers. A dictionary is made of them only
    when a key is looked up.

    A warm scan compares attempts/ as listed now with the index's listing as these
    blocks, and when no file grew it never looks a key up: `scan_warm` spends 0.08 s
    less in the scanning process than with 70,000 keys and triples loaded and compared.
    """

    __slots__ = ("_dict", "names", "numbers")

    def __init__(self, names: str, numbers: bytes) -> None:
        if type(names) is not str or type(numbers) is not bytes:
            raise ValueError("not a packed listing")
        count = names.count("\0") + 1 if names else 0
        if len(numbers) != 24 * count:
            raise ValueError("not one (inode, size, mtime) for each key")
        self.names, self.numbers = names, numbers
        self._dict: dict[str, FileId] | None = None

    @classmethod
    def of(cls, files: Mapping[str, FileId]) -> PackedIds:
        """`files` packed; ValueError if an identity is not three 64-bit integers."""
        if isinstance(files, PackedIds):
            return files
        try:
            numbers = array("q", chain.from_iterable(files.values())).tobytes()  # type: ignore[arg-type]
        except (TypeError, OverflowError) as exc:
            raise ValueError("an identity that does not pack") from exc
        return cls("\0".join(files), numbers)

    def _files(self) -> dict[str, FileId]:
        if self._dict is None:
            ids = iter(array("q", self.numbers))
            keys = self.names.split("\0") if self.names else []
            self._dict = dict(zip(keys, zip(ids, ids, ids, strict=True), strict=True))
        return self._dict

    def __getitem__(self, key: str) -> FileId:
        return self._files()[key]

    def __contains__(self, key: object) -> bool:
        return key in self._files()

    def __iter__(self) -> Iterator[str]:
        return iter(self._files())

    def __len__(self) -> int:
        return len(self._files())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedIds) and other.names == self.names and other.numbers == self.numbers:
            return True
        if isinstance(other, Mapping):
            return self._files() == (other._files() if isinstance(other, PackedIds) else dict(other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PackedIds({self._files()!r})"


class Listing(NamedTuple):
    """A state folder as listed."""

    settled: tuple[int, int, int] | None  # its (inode, mtime_ns, ctime_ns), if it had settled
    files: Mapping[str, FileId]  # key -> the identity of the key's file there
    leases: dict[str, None] | None  # running/ only: the keys with a `<key>.lease`


NO_LEASE_FACTS = LeaseFacts("", "", 0, 0.0, 0.0)


class LeaseRead(NamedTuple):
    """A lease file's bytes as last read, and what they say."""

    data: bytes
    fault: str | None  # why they are not a valid lease, or None
    facts: LeaseFacts  # `NO_LEASE_FACTS` when they are not


class FileStamp(NamedTuple):
    """A file's identity as `stat` gives it: it changes when the file is replaced or written."""

    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileStamp:
        return cls(st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class TreeStamp(NamedTuple):
    """A tree file as it was when hashed, and its hash."""

    file: FileStamp
    digest: str


class ConfigStamp(NamedTuple):
    """`config.toml` (and the operator's, which sets a floor under it) as they were when
    read, and the policy read from them."""

    file: FileStamp
    operator: tuple[int, ...]  # `FileStamp`s of the operator's config.toml and this repository's pins
    signature_required: bool
    fault: str | None
    unsandboxed: tuple[str, ...]  # the checks configured with sandbox = "none"
    held: str | None  # what the config would run and may not yet (`core.store.config.Held.hint`)
    protected: tuple[str, ...]  # `policy.protected_paths`


class Index(NamedTuple):
    """What a scanner keeps between scans, and between processes in `.gen/cache/`."""

    config: ConfigStamp | None
    tree: dict[str, TreeStamp]  # repository-relative path -> stamp
    listed: dict[str, Listing]  # folder -> listing
    fixed: dict[str, JobRow]  # rows that depend on their key's files alone
    volatile: dict[str, FileFacts]  # file facts of rows that also depend on a lease, the tree or the clock
    leases: dict[str, LeaseRead]  # key -> its lease as last read
