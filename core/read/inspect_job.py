"""Everything known about one job, for `genjob show` and the dashboard's detail pane."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from core.errors import BadInput, GenjobError, TooLarge
from core.model.canonical import read_bytes, sha256_bytes
from core.model.protected import DEFAULT_PROTECTED, protected_among
from core.model.standing import CheckStatus
from core.read.snapshot import JobRow, Scanner
from core.review.checks import check_statuses
from core.review.verify import Verification, verify
from core.store.config import Config, load_config
from core.store.events import attempts, job_events
from core.store.evidence import newest_log_tail
from core.store.layout import Layout
from core.store.lease import Lease, read_lease
from core.store.queue import Located, cancel_requested_at, locate

MAX_DIFF_BYTES = 2 * 1024 * 1024


class DiffStatus(StrEnum):
    """What applying an output would do to its path, as far as a diff can say."""

    MODIFIED = "modified"
    NEW = "new"
    UNCHANGED = "unchanged"
    BINARY = "binary"  # it changes, and one side is not text
    TOO_LARGE = "too large"  # a side is over MAX_DIFF_BYTES, or the tree's does not read
    MISSING = "missing"  # the output is not there to read


@dataclass(frozen=True)
class FileDiff:
    path: str
    status: DiffStatus
    added: int
    removed: int
    text: str  # a unified diff, empty when there is none to show
    # Whether the output's bytes hash to what the receipt says (False: they changed after
    # the worker signed, so this diff is not what it signed); None when not compared.
    signed: bool | None = None


@dataclass
class JobDetail:
    row: JobRow
    located: Located | None
    document: dict[str, Any] | None
    lease: Lease | None
    lease_error: str | None
    attempts: list[dict[str, Any]]
    verification: Verification | None
    diffs: list[FileDiff]
    timeline: list[dict[str, Any]]
    log_tail: str
    errors: list[str] = field(default_factory=list)
    cancel_requested_at: float | None = None  # a cancel asked for and not yet honoured
    checks: list[CheckStatus] = field(default_factory=list)  # the configured checks of a receipt
    # Best-of-N: how many candidates the job has, and which one was chosen, if one was.
    candidates: int = 0
    chosen: int | None = None
    # The allowed paths that `policy.protected_paths` covers, each with its pattern.
    protected: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.row.to_dict(),
            "document": self.document,
            "lease": self.lease.model_dump() if self.lease else None,
            "attempt_records": self.attempts,
            "verification": self.verification.to_dict() if self.verification else None,
            "diffs": [d.__dict__ for d in self.diffs],
            "timeline": self.timeline,
            "log_tail": self.log_tail,
            "errors": self.errors,
            "cancel_requested_at": self.cancel_requested_at,
            "checks": [c.to_dict() for c in self.checks],
            "candidates": self.candidates,
            "chosen": self.chosen,
            "protected": self.protected,
        }


def _text(data: bytes) -> list[str] | None:
    if b"\0" in data:
        return None
    return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def file_diff(root: Path, out_dir: Path, rel: str, expected: str | None = None) -> FileDiff:
    """The diff that applying `out_dir/rel` would make to `root/rel`; with `expected` (the
    receipt's hash of the output) it also says whether the bytes are the ones signed."""
    new_path, old_path = out_dir / rel, root / rel
    try:
        new = read_bytes(new_path, MAX_DIFF_BYTES)
    except TooLarge:
        return FileDiff(rel, DiffStatus.TOO_LARGE, 0, 0, "")
    except BadInput:
        return FileDiff(rel, DiffStatus.MISSING, 0, 0, "")
    signed = None if expected is None else sha256_bytes(new) == expected
    return _diff(rel, old_path, new, signed)


def _diff(rel: str, old_path: Path, new: bytes, signed: bool | None) -> FileDiff:
    try:
        old = read_bytes(old_path, MAX_DIFF_BYTES) if old_path.exists() else b""
    except BadInput:
        return FileDiff(rel, DiffStatus.TOO_LARGE, 0, 0, "", signed)
    if old == new:
        return FileDiff(rel, DiffStatus.UNCHANGED, 0, 0, "", signed)
    a, b = _text(old), _text(new)
    if a is None or b is None:
        return FileDiff(rel, DiffStatus.BINARY, 0, 0, "", signed)
    lines = list(difflib.unified_diff(a, b, f"a/{rel}", f"b/{rel}"))
    added = sum(1 for ln in lines if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in lines if ln.startswith("-") and not ln.startswith("---"))
    text = "".join(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in lines)
    status = DiffStatus.NEW if not old_path.exists() else DiffStatus.MODIFIED
    return FileDiff(rel, status, added, removed, text, signed)


def job_detail(layout: Layout, key: str, scanner: Scanner | None = None) -> JobDetail:
    """Read, verify and diff one job. Never raises for a bad file: faults go to `errors`."""
    from core.review import candidates  # which imports this module's diffs

    scanner = scanner or Scanner(layout, disk_cache=False)
    row = scanner.refresh([key]).get(key)
    if row is None:
        raise GenjobError(f"{key}: no such job in {layout.gen}")
    errors: list[str] = []
    located = None
    try:
        located = locate(layout, key)
    except GenjobError as exc:
        errors.append(str(exc))
    lease, lease_error = None, None
    try:
        lease = read_lease(layout, key)
    except BadInput as exc:
        lease_error = str(exc)
    verification = None
    diffs: list[FileDiff] = []
    checks: list[CheckStatus] = []
    config: Config | None = None
    try:
        config = load_config(layout.config)
    except GenjobError as exc:
        errors.append(str(exc))
    patterns = config.policy.protected_paths if config is not None else DEFAULT_PROTECTED
    if located is not None and config is not None and layout.receipt(key).exists():
        try:
            verification = verify(layout, located.job, config)
            if located.folder == "running":
                checks = check_statuses(layout, located.job, config, verification)
        except GenjobError as exc:
            errors.append(str(exc))
        rec = verification.receipt if verification else None
        if rec is not None and located.folder != "applied":
            out = layout.out_dir(located.job.digest)
            diffs = [file_diff(layout.root, out, rel, rec.outputs[rel]) for rel in sorted(rec.outputs)]
    return JobDetail(
        row=row,
        located=located,
        document=located.job.document() if located else None,
        lease=lease,
        lease_error=lease_error,
        attempts=attempts(layout, key),
        verification=verification,
        diffs=diffs,
        timeline=job_events(layout, key),
        log_tail=newest_log_tail(layout, key),
        errors=errors,
        cancel_requested_at=cancel_requested_at(layout, key),
        checks=checks,
        candidates=candidates.count(layout, key),
        chosen=candidates.chosen(layout, key),
        protected=protected_among(row.allowed_paths, patterns),
    )
