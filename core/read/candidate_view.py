"""A job's candidates side by side, for `genjob candidates` and the board: each with its
host, status, verification, checks and size of change, and one candidate's diff against
the tree or another.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from core.errors import NotFound
from core.model.contract import ReceiptStatus
from core.model.standing import CheckStatus
from core.read.inspect_job import JobDetail
from core.review.check_status import check_statuses
from core.review.diff import DiffStatus, FileDiff, file_diff
from core.review.verify import verify_candidate
from core.store.candidate_store import Candidate, chosen, load, load_all
from core.store.config import Config, load_config
from core.store.layout import Layout
from core.store.queue import locate


@dataclass(frozen=True)
class CandidateView:
    """One candidate as the operator compares it: where it ran, how it ended, whether
    it verifies (and its signer), and the size of its change against the base."""

    number: int
    host: str | None
    attempt: int | None
    status: ReceiptStatus | Literal["invalid"]
    reason: str | None
    ok: bool
    failures: tuple[str, ...]
    signer: str | None
    signed: bool
    files: int
    added: int
    removed: int
    chosen: bool
    checks: tuple[CheckStatus, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__, failures=list(self.failures), checks=[c.to_dict() for c in self.checks])


def views(layout: Layout, key: str, config: Config | None = None) -> list[CandidateView]:
    """Every candidate of `key`, verified and measured, in number order."""
    config = config or load_config(layout.config)
    job = locate(layout, key).job
    picked = chosen(layout, key)
    out = []
    for c in load_all(layout, key):
        v = verify_candidate(layout, job, config, c)
        diffs = diff(layout, c) if c.receipt is not None and c.status is ReceiptStatus.OK else []
        out.append(
            CandidateView(
                number=c.number,
                host=c.host,
                attempt=c.attempt,
                status=c.status,
                reason=c.reason or c.error,
                ok=v.ok,
                failures=tuple(f"{x.name}: {x.detail}" for x in v.failures),
                signer=v.signer,
                signed=c.signed,
                files=sum(1 for d in diffs if d.status is not DiffStatus.UNCHANGED),
                added=sum(d.added for d in diffs),
                removed=sum(d.removed for d in diffs),
                chosen=picked == c.number,
                checks=tuple(check_statuses(layout, job, config, v, c.number)),
            )
        )
    return out


def diff(layout: Layout, candidate: Candidate, against: Candidate | None = None) -> list[FileDiff]:
    """What candidate would change: against the tree (the base), or against another
    candidate's outputs (a path only one of them has counts as new or missing)."""
    signed = candidate.receipt.outputs if candidate.receipt else {}
    mine = set(signed)
    if against is None:
        return [file_diff(layout.root, candidate.files.out, rel, signed[rel]) for rel in sorted(mine)]
    theirs = set(against.receipt.outputs) if against.receipt else set()
    return [file_diff(against.files.out, candidate.files.out, rel) for rel in sorted(mine | theirs)]


def candidate_detail(layout: Layout, detail: JobDetail, number: int) -> JobDetail:
    """`detail` (the job's) as if candidate `number` were its receipt: that candidate's
    verification and diffs against the tree, for the approve preflight."""
    candidate = load(layout, detail.row.key, number)
    if detail.located is None:
        raise NotFound(f"{detail.row.key}: no job document to check candidate {number} against")
    config = load_config(layout.config)
    v = verify_candidate(layout, detail.located.job, config, candidate)
    checks = check_statuses(layout, detail.located.job, config, v, number)
    return dataclasses.replace(detail, verification=v, diffs=diff(layout, candidate), checks=checks)
