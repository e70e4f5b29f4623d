"""Reading one key's files under `.gen/` into the `FileFacts` a listing row is made from.

Each document is parsed by the strict JSON reader and checked by `core.read.docscan`; only a
document the quick check does not accept goes to the strict models (and pydantic is
imported), whose error is the one shown. A file that does not parse makes its job
INVALID with that error; nothing here raises for a bad file.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from core.errors import BadInput
from core.model.canonical import MAX_JSON_BYTES, loads_strict, read_with_stat
from core.model.contract import KEY_RE, MAX_LEASE_BYTES, V1, V2, ReceiptStatus
from core.read.docscan import quick_job, quick_lease, quick_receipt
from core.read.snapshot_records import NO_SUMMARY, FileFacts, FileId, JobSummary, LeaseFacts, ReceiptFacts
from core.store.layout import JOB_FOLDERS

ATTEMPTS_BYTES = 64 * 1024 * 1024

_CLAIMED = b'"event":"claimed"'

# A file changed this recently may change again within its mtime's granularity (one clock
# tick, or two seconds on coarse filesystems) without its identity changing: what was
# read from it is used but not kept, as git does with "racily clean" index entries.
RACY_NS = 2_000_000_000


def racy_after() -> int:
    """The time (ns) after which a file's mtime says it may still be changing."""
    return time.time_ns() - RACY_NS


class Gone:
    """What `read` gives for a file that vanished since its folder was listed."""


GONE = Gone()

# Values that repeat across many rows (paths, folder tuples, workers, statuses) are kept
# once: less memory, and a smaller index that loads faster.
_SHARED: dict[Any, Any] = {}
_SHARED_MAX = 65536


def share(value: Any) -> Any:
    """The one copy of `value` this process keeps (an equal value seen before, or this one)."""
    got = _SHARED.get(value)
    if got is not None:
        return got
    if len(_SHARED) >= _SHARED_MAX:
        _SHARED.clear()
    _SHARED[value] = value
    return value


def read(path: str, racy_ns: int, limit: int = MAX_JSON_BYTES) -> tuple[bytes | str | Gone, bool]:
    """The bytes of a file, or why it cannot be read, or `GONE` if it vanished; and
    whether it had settled (changed before `racy_ns`), so that what is made of it may be kept."""
    try:
        data, st = read_with_stat(path, limit)
    except BadInput as exc:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return GONE, False
        return str(exc), st.st_mtime_ns < racy_ns
    return data, st.st_mtime_ns < racy_ns


# -- job documents -------------------------------------------------------------------------
# A job document as a listing keeps it: its summary and the reason of a rejected record
# (else ""), or the fault that makes it invalid.
ParsedJob = tuple[JobSummary, str] | str


def summary_of(job: Any) -> JobSummary:
    """The summary of a job the strict model accepted (`core.model.models.Job`)."""
    return JobSummary(
        job.schema_name,
        job.digest,
        job.instruction,
        tuple(job.allowed_paths),
        tuple(sorted(job.inputs.items())),
        float(job.created_at),
    )


def _strict_job(path: str, folder: str) -> ParsedJob:
    """The strict reader's verdict on a job file the quick check did not accept."""
    from core.store.queue import read_job_file

    try:
        job, record = read_job_file(Path(path), folder)
    except BadInput as exc:
        return str(exc)
    return summary_of(job), _rejection_reason(record)


def _rejection_reason(record: object) -> str:
    rejection = record.get("rejection") if isinstance(record, dict) else None
    return str(rejection.get("reason") or "") if isinstance(rejection, dict) else ""


def _job_parser(folder: str) -> Callable[[bytes, str, str], ParsedJob]:
    is_record = folder in ("applied", "rejected")
    # Inputs matter only to a running job's base check; elsewhere they are not kept.
    keep_inputs = folder == "running"

    def parse(data: bytes, path: str, key: str) -> ParsedJob:
        try:
            obj = loads_strict(data, path)
        except BadInput as exc:
            return str(exc)
        doc, reason = obj, ""
        if is_record:
            if type(obj) is not dict or "job" not in obj:
                return _strict_job(path, folder)
            doc, reason = obj["job"], _rejection_reason(obj)
        summary = quick_job(doc)
        if summary is None or doc["idempotency_key"] != key:
            return _strict_job(path, folder)
        # One string for each schema name, one tuple for each set of paths or inputs.
        kept = JobSummary(
            V2 if summary.schema == V2 else V1,
            summary.digest,
            summary.instruction,
            share(summary.allowed_paths),
            share(summary.inputs) if keep_inputs else (),
            summary.created_at,
        )
        return kept, reason

    return parse


_JOB_PARSERS = {folder: _job_parser(folder) for folder in JOB_FOLDERS}


# -- receipts, leases and attempts ---------------------------------------------------------
def parse_receipt(data: bytes, path: str) -> ReceiptFacts | str:
    try:
        obj = loads_strict(data, path)
    except BadInput as exc:
        return str(exc)
    quick = quick_receipt(obj)
    if quick is None:
        from core.model.models import receipt_from_obj

        try:
            rec = receipt_from_obj(obj, path)
        except BadInput as exc:
            return str(exc)
        # The index keeps plain text (marshal stores no enum members).
        quick = ReceiptFacts(rec.status.value, rec.worker_id, rec.idempotency_key, rec.job_digest)
    return ReceiptFacts(share(quick.status), share(quick.worker_id), quick.idempotency_key, quick.job_digest)


def parse_lease(data: bytes, path: str) -> LeaseFacts | str:
    try:
        obj = loads_strict(data, path, MAX_LEASE_BYTES)
    except BadInput as exc:
        return str(exc)
    quick = quick_lease(obj)
    if quick is not None:
        return quick
    from core.store.lease import lease_from_bytes

    try:
        lease = lease_from_bytes(data, path)
    except BadInput as exc:
        return str(exc)
    return LeaseFacts(lease.worker, lease.host, lease.pid, float(lease.heartbeat), float(lease.ttl))


def read_lease(path: str) -> bytes | str | Gone:
    """A lease's bytes (rewritten by every heartbeat, so read on every scan), or why it
    cannot be read, or `GONE`."""
    try:
        return read_with_stat(path, MAX_LEASE_BYTES)[0]
    except BadInput as exc:
        return str(exc) if os.path.lexists(path) else GONE


def read_leases(gen: str) -> dict[str, bytes]:
    """The bytes of each lease in running/ that reads, by key: what a first scan has
    another process read while it loads the index (`core.read.snapshot_pool.list_apart`)."""
    try:
        names = os.listdir(f"{gen}/running")
    except OSError:
        return {}
    out = {}
    for name in names:
        if name.endswith(".lease") and name[0] != ".":
            data = read_lease(f"{gen}/running/{name}")
            if type(data) is bytes:
                out[name[:-6]] = data
    return out


# A claim line as `core.store.queue` writes it (canonical JSON, a worker name without escapes):
# what `json.loads` would make of it, read off directly. Integers are held to 20 digits,
# well under the length `json.loads` refuses.
_CLAIM_LINE = re.compile(
    rb'\{"at":-?(?:0|[1-9][0-9]{0,19})(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?,'
    rb'"attempt":-?(?:0|[1-9][0-9]{0,19}),"event":"claimed","worker":"([\x20\x21\x23-\x5b\x5d-\x7e]+)"\}'
)


def parse_attempts(data: bytes) -> tuple[int, str]:
    """(claims, the worker of the last claim that names one); only claim lines are parsed."""
    if _CLAIMED not in data:
        return (0, "")
    claims = [line for line in data.splitlines() if _CLAIMED in line]
    for line in reversed(claims):
        if plain := _CLAIM_LINE.fullmatch(line):
            return (len(claims), share(plain[1].decode()))
        try:
            obj = json.loads(line)  # evidence, not a contract: a bad line is skipped
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict) and (worker := obj.get("worker")):
            return (len(claims), share(str(worker)))
    return (len(claims), "")


# -- one key -------------------------------------------------------------------------------
# The folders holding a key's job document, from whether applied/, rejected/, running/
# and queue/ hold it (in the order of JOB_FOLDERS), as one shared tuple each.
_FOLDERS = {
    (a, b, c, d): tuple(f for f, here in zip(JOB_FOLDERS, (a, b, c, d), strict=True) if here)
    for a in (False, True)
    for b in (False, True)
    for c in (False, True)
    for d in (False, True)
}


def read_facts(
    gen: str, key: str, files: Mapping[str, Mapping[str, FileId]], racy_ns: int
) -> tuple[FileFacts, bool]:
    """What the files of `key` say (as `files`, folder -> key -> identity, lists them),
    and whether all of them had settled.

    One function on purpose: it runs for every key of a cold read, where calls cost (`scan` bench).
    """
    name = f"{key}.json"
    folders = _FOLDERS[
        key in files["applied"], key in files["rejected"], key in files["running"], key in files["queue"]
    ]
    settled = True
    job: JobSummary | None = None
    rejection = ""
    invalid = None if KEY_RE.fullmatch(key) else f"{name}: file name is not a job key"
    for folder in folders:
        path = f"{gen}/{folder}/{name}"
        data, ok = read(path, racy_ns)
        settled = settled and ok
        if isinstance(data, Gone):
            continue
        parsed = _JOB_PARSERS[folder](data, path, key) if isinstance(data, bytes) else data
        if isinstance(parsed, str):
            invalid = invalid or parsed
        elif job is None:
            job, rejection = parsed
    receipt: str | None = None
    problems: tuple[str, ...] = ()
    worker = ""
    if key in files["receipts"]:
        path = f"{gen}/receipts/{name}"
        data, ok = read(path, racy_ns)
        settled = settled and ok
        got = parse_receipt(data, path) if type(data) is bytes else data
        if isinstance(got, str):
            receipt, problems = "invalid", (got,)
        elif isinstance(got, ReceiptFacts):
            receipt, worker = got.status, got.worker_id
            if job is not None and got.job_digest != job.digest:
                problems = ("receipt names another job digest",)
    attempts = 0
    if key in files["attempts"]:
        data, ok = read(f"{gen}/attempts/{key}.jsonl", racy_ns, ATTEMPTS_BYTES)
        settled = settled and ok
        if type(data) is bytes:
            attempts, last = parse_attempts(data)
            worker = worker or last
    candidates = candidates_ok = 0
    if key in files.get("candidates", {}):
        candidates, candidates_ok, ok = read_candidates(f"{gen}/candidates/{key}", racy_ns)
        settled = settled and ok
    facts = FileFacts(
        folders=folders,
        has_job=job is not None,
        job=job or NO_SUMMARY,
        rejection=rejection,
        invalid=invalid,
        receipt=receipt,
        receipt_problems=problems,
        worker=worker,
        attempts=attempts,
        candidates=candidates,
        candidates_ok=candidates_ok,
    )
    return facts, settled


def read_candidates(path: str, racy_ns: int) -> tuple[int, int, bool]:
    """(candidates, of which `ok`, whether the folder had settled) for a key's candidates
    folder (`core.review.candidates`): a candidate whose receipt does not read counts, not as ok."""
    try:
        st = os.lstat(path)
        names = os.listdir(path) if not stat.S_ISLNK(st.st_mode) else []
    except (FileNotFoundError, NotADirectoryError):
        return 0, 0, True
    numbered = [n for n in names if n.isdigit() and n[0] != "0"]
    ok = 0
    for n in numbered:
        data, _ = read(f"{path}/{n}/receipt.json", racy_ns)
        got = parse_receipt(data, path) if type(data) is bytes else None
        ok += isinstance(got, ReceiptFacts) and got.status == ReceiptStatus.OK
    return len(numbered), ok, st.st_mtime_ns < racy_ns
