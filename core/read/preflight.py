"""The approve preflight: what apply would write for one job, and whether it may.

An operator sees this before the tree changes: each path with its lines added and
removed, the signature and the policy that asks for it, whether the base is still
fresh, every verification step that would refuse the apply, and the job's checks
(a required one that has not passed refuses it too).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.errors import GenjobError
from core.model.standing import PASSED, CheckStatus
from core.read.inspect_job import JobDetail
from core.review.diff import DiffStatus, FileDiff, diff_bytes, file_diff
from core.review.merge import MergePlan, plan_merge
from core.review.verify import verify
from core.store.blobs import read_tree_file
from core.store.config import load_config
from core.store.layout import Layout
from core.store.queue import locate
from core.store.repo import is_git_work_tree
from core.store.signing import TrustedKey, own_signer_unpinned, trust_anchors
from core.store.tree import closing, open_dir


@dataclass(frozen=True)
class PathChange:
    path: str
    status: DiffStatus
    added: int
    removed: int
    signed: bool = True  # False: the bytes changed after the worker signed them


@dataclass(frozen=True)
class Preflight:
    """What an operator needs to see before apply writes the tree."""

    key: str
    changes: tuple[PathChange, ...]
    signature_required: bool
    signature: str
    signature_ok: bool
    base_fresh: bool
    base_detail: str
    verified: bool
    failures: tuple[str, ...]
    # Whether apply may also commit (a git work tree), and what the config proposes.
    git: bool = False
    commit_default: bool = False
    # The job's checks, and the required ones that have not passed on these outputs.
    checks: tuple[CheckStatus, ...] = ()
    checks_missing: tuple[str, ...] = ()
    # The best-of-N candidate this preflight is for (its receipt, signature and outputs).
    candidate: int | None = None
    # The outputs `policy.protected_paths` covers, each with its pattern: apply writes them
    # only when the operator approves this job explicitly.
    protected: dict[str, str] = field(default_factory=dict)
    # The receipt is `ok` and changed nothing (`core.review.verify.nothing_changed`).
    unchanged: bool = False
    # This machine's own worker key signed the receipt and nothing pins it: its `.pub`
    # file, which the board offers to trust (`core.store.signing.trust_own_worker_key`).
    own_key: str | None = None
    own_key_fingerprint: str | None = None

    @property
    def may_apply(self) -> bool:
        """The receipt verifies and every required check passed: apply would run."""
        return self.verified and not self.checks_missing

    @property
    def may_choose(self) -> bool:
        """A candidate that verifies but whose required checks have not run: checks run on a
        chosen receipt, so choosing it (without applying) is the way on."""
        return self.candidate is not None and self.verified and bool(self.checks_missing)

    @property
    def added(self) -> int:
        return sum(c.added for c in self.changes)

    @property
    def removed(self) -> int:
        return sum(c.removed for c in self.changes)


def preflight(layout: Layout, detail: JobDetail) -> Preflight:
    """The approve preflight of one job, from its freshly read detail."""
    try:
        commit_default = load_config(layout.config).policy.commit_on_approve
    except GenjobError:
        commit_default = False
    v = detail.verification
    checks = {c.name: c for c in v.checks} if v else {}
    sig = checks.get("signature")
    base = checks.get("base")
    own = _own_key_to_trust(layout, detail.row.key) if sig is not None and sig.status != PASSED else None
    return Preflight(
        key=detail.row.key,
        changes=tuple(
            PathChange(d.path, d.status, d.added, d.removed, d.signed is not False) for d in detail.diffs
        ),
        signature_required=v.signature_required if v else True,
        signature=sig.detail if sig else "no receipt to check",
        signature_ok=bool(sig and sig.status == PASSED),
        base_fresh=bool(base and base.status == PASSED),
        base_detail=base.detail if base else "not checked",
        verified=bool(v and v.ok),
        failures=tuple(f"{c.name}: {c.detail}" for c in (v.failures if v else [])) + tuple(detail.errors),
        git=is_git_work_tree(layout.root),
        commit_default=commit_default,
        checks=tuple(detail.checks),
        checks_missing=tuple(c.name for c in detail.checks if c.required and not c.satisfied),
        protected={
            p: pattern for p, pattern in detail.protected.items() if any(d.path == p for d in detail.diffs)
        },
        unchanged=bool(v and v.unchanged),
        own_key=str(own.path) if own is not None else None,
        own_key_fingerprint=own.fingerprint if own is not None else None,
    )


def _own_key_to_trust(layout: Layout, key: str) -> TrustedKey | None:
    """This machine's worker key, when it signed the job's receipt and nothing pins it."""
    try:
        return own_signer_unpinned(layout.signature(key), trust_anchors(layout.trusted_keys, layout.root))
    except (GenjobError, OSError):
        return None


def receipt_verdict(layout: Layout, key: str) -> bool | None:
    """Whether apply would accept the job's receipt now; None when there is nothing to check.

    The list shows it next to RECEIVED so that an operator sees which receipts are
    approvable without opening each one; the detail pane always verifies afresh.
    """
    try:
        located = locate(layout, key)
        if not layout.receipt(key).exists():
            return None
        return verify(layout, located.job, load_config(layout.config)).ok
    except (GenjobError, OSError):
        return None


@dataclass(frozen=True)
class MergePreflight:
    """What `genjob apply KEY --merge` would do with a STALE receipt now: the diff each
    output would make to the tree as it is (merged three-way where the tree moved), or the
    hunks that conflict, or why no merge can be made at all (`refused`)."""

    key: str
    diffs: tuple[FileDiff, ...] = ()
    merged: tuple[str, ...] = ()  # the paths merged three-way; the other outputs go as they are
    conflicts: dict[str, list[str]] = field(default_factory=dict)
    refused: str | None = None
    # The required checks, which run on the merged bytes before anything is written.
    checks: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        """Every output merges clean: "Merge and apply" is offered."""
        return self.refused is None and not self.conflicts


def merge_preflight(layout: Layout, key: str) -> MergePreflight:
    """The merge preflight of `key` (see `MergePreflight`); it writes nothing and takes no
    lock: `core.review.merge.apply_merged` plans the merge again under the writer lock."""
    config = load_config(layout.config)
    job = locate(layout, key).job
    try:
        plan = plan_merge(layout, job, verify(layout, job, config), config)
    except GenjobError as exc:
        return MergePreflight(key, refused=str(exc))
    checks = tuple(config.policy.require_checks)
    if plan.conflicts:
        return MergePreflight(key, merged=tuple(sorted(plan.merged)), conflicts=plan.conflicts, checks=checks)
    return MergePreflight(
        key,
        _merged_diffs(layout, job.digest, plan, config.limits.max_file_bytes),
        tuple(sorted(plan.merged)),
        checks=checks,
    )


def _merged_diffs(layout: Layout, digest: str, plan: MergePlan, limit: int) -> tuple[FileDiff, ...]:
    """The diff of each target from the tree now: to its merged bytes, or to the receipt's
    output where the tree did not move."""
    diffs = []
    root = open_dir(layout.root)
    with closing(root):
        for t in plan.targets:
            merged = plan.merged.get(t.path)
            if merged is None:
                diffs.append(file_diff(layout.root, layout.out_dir(digest), t.path, t.after))
                continue
            ours = read_tree_file(root, t.path, limit)
            diffs.append(diff_bytes(t.path, ours, merged.data))
    return tuple(diffs)
