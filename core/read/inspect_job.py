"""Everything known about one job, for `genjob show` and the dashboard's detail pane."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.errors import BadInput, GenjobError
from core.model.presets import spend_of
from core.model.protected import DEFAULT_PROTECTED, protected_among
from core.model.standing import CheckStatus
from core.read.snapshot import JobRow, job_row
from core.review.applied_diff import applied_diffs
from core.review.check_status import check_statuses
from core.review.commit import CommitState, commit_state
from core.review.diff import FileDiff, file_diff
from core.review.verify import Verification, verify
from core.store import candidate_store
from core.store.config import Config, load_config
from core.store.events import attempts, job_events
from core.store.evidence import newest_log_tail
from core.store.layout import Layout
from core.store.lease import Lease, read_lease
from core.store.queue import Located, cancel_requested_at, host_failure_lines, locate


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

    @property
    def host_failures(self) -> list[str]:
        """Each run of the job its host could not start, with the host's error."""
        return host_failure_lines(self.attempts)

    @property
    def commit(self) -> CommitState | None:
        """An applied job's commit: "pending" (applied, not committed), "committed", or None."""
        return commit_state(self.located.record if self.located else None)

    @property
    def commit_sha(self) -> str | None:
        record = self.located.record if self.located else None
        sha = (record or {}).get("apply", {}).get("commit", {}).get("sha")
        return sha if self.commit == "committed" and isinstance(sha, str) else None

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
            "spend": spend_of(self.attempts).to_dict(),
            "commit": self.commit,
            "commit_sha": self.commit_sha,
            "host_failures": self.host_failures,
        }


def job_detail(layout: Layout, key: str) -> JobDetail:
    """Read, verify and diff one job. Never raises for a bad file: faults go to `errors`."""
    row = job_row(layout, key, attempts=True)
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
    if located is not None and located.folder == "applied":
        diffs = applied_diffs(layout, located.job, located.record)
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
        candidates=candidate_store.count(layout, key),
        chosen=candidate_store.chosen(layout, key),
        protected=protected_among(row.allowed_paths, patterns),
    )
