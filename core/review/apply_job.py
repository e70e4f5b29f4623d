"""Applying one job (`apply_job`): steps 1 to 3 of `core.review.apply` and the judging of
an open journal, under the writer and state locks; the writing is `core.review.apply`'s,
and an interrupted merge's journal is finished by `core.review.merge`.
"""

from __future__ import annotations

import os
import re

from core.errors import BadInput, GenjobError, Stale, VerificationFailed, WrongState
from core.model.canonical import loads_strict, read_bytes
from core.model.models import Receipt
from core.model.protected import ProtectedPaths, require_approval
from core.review.apply import Applied, Target, TreeWrite, close_applied, plan, record_applied, refuse_journal
from core.review.check_status import require_checks
from core.review.commit import check_commit_ready, commit_applied, commit_state, git_commit, pending_commit
from core.review.merge import finish_merge
from core.review.verify import Verification, verify
from core.review.writer_lock import writer
from core.store.config import load_config
from core.store.durable import flocked
from core.store.job_state import said_state
from core.store.layout import Layout
from core.store.ownership import repository_owners, require_trusted
from core.store.queue import Located, locate

_SHA256 = re.compile(r"[0-9a-f]{64}")


def apply_job(
    layout: Layout, key: str, commit: bool = False, *, protected: bool = False, sign: bool | None = None
) -> Applied:
    """Verify and apply one job's outputs to the tree; idempotent and crash-safe.

    `protected`: the operator approved this job explicitly, so its outputs may include
    paths `policy.protected_paths` covers (`core.model.protected`). `sign`: the commit is
    signed with the operator's key, with the job's attestation (default:
    `policy.sign_commits`). Runs under the repository's writer lock (`core.review.writer_lock`),
    waiting for any other apply to end."""
    with writer(layout):
        return _apply_one(layout, key, commit, protected=protected, sign=sign)


def _apply_one(layout: Layout, key: str, commit: bool, *, protected: bool, sign: bool | None) -> Applied:
    config = load_config(layout.config)
    with flocked(layout.lock):
        loc = locate(layout, key)
        journal_path = layout.journal_file(key)
        if loc.folder == "applied":
            if os.path.lexists(journal_path) or os.path.lexists(layout.journal / key):
                # Killed after the apply record was made: only the cleanup was left to do.
                close_applied(layout, loc.job)
            pending = commit_state(loc.record) == "pending"
    if loc.folder == "applied":
        if pending and commit:
            return Applied(key, [], True, loc.path, None, commit_applied(layout, loc, sign=sign))
        return Applied(key, [], True, loc.path, None, uncommitted=pending)
    with flocked(layout.lock):
        loc = locate(layout, key)
        if loc.folder == "applied":  # applied meanwhile, by another apply
            return Applied(key, [], True, loc.path, None, uncommitted=commit_state(loc.record) == "pending")
        if loc.folder != "running":
            if os.path.lexists(journal_path):
                refuse_journal(
                    layout, key, f"the job is {said_state(layout, key)}; no apply of it can be under way"
                )
            hint = f" (ship it first: genjob ship {key})" if loc.folder == "queue" else ""
            raise WrongState(
                f"{key}: is {said_state(layout, key)}; only a job with a receipt can be applied{hint}"
            )
        signed = config.policy.sign_commits if sign is None else sign
        if commit:
            check_commit_ready(layout, sign=signed)
        v = verify(layout, loc.job, config)
        journal = _open_journal(layout, key) if os.path.lexists(journal_path) else None
        if isinstance(journal, dict) and "merge" in journal:
            return finish_merge(layout, loc, v, config, journal, protected=protected)
        if journal is not None:
            targets, wish = _journal_targets(layout, loc, journal, v.receipt)
            if wish is not None and not commit:  # an apply with --commit was interrupted
                commit, signed = True, wish
            resumed = TreeWrite(layout, loc.job, targets, config, resuming=True)
            failed = [c for c in v.failures if c.name != "base"]  # a torn tree is off its base
            if failed or v.receipt is None:
                why = "; ".join(f"{c.name}: {c.detail}" for c in failed) or "the receipt was not read"
                resumed.roll_back(f"the receipt does not verify now ({why})")
            try:
                require_approval(key, v.receipt.outputs, config.policy.protected_paths, protected)
            except ProtectedPaths as exc:
                resumed.roll_back(f"it is not approved now ({exc})")
            _same_filesystem(layout)
            changed = resumed.run()
        else:
            targets = _checked_plan(layout, loc, v)
            require_checks(layout, loc.job, config, v)
            require_approval(key, [t.path for t in targets], config.policy.protected_paths, protected)
            wish = signed if commit else None
            changed = TreeWrite(layout, loc.job, targets, config, resuming=False, commit=wish).run()
        wanted = pending_commit(signed) if commit and changed else None
        record_applied(layout, loc.job, targets, changed, v, commit=wanted)
    result = Applied(key, changed, False, layout.job_file("applied", key), v)
    if commit and changed:
        return Applied(
            key, changed, False, result.record, v, git_commit(layout, loc.job, changed, sign=signed)
        )
    return result


def _checked_plan(layout: Layout, loc: Located, v: Verification) -> list[Target]:
    if not v.ok:
        if v.only_base_failed():
            raise Stale(
                f"{loc.key}: the tree changed since the job was minted ({v.check('base').detail}); "
                f"nothing was written. Replay it against the current tree: genjob replay {loc.key}"
            )
        lines = "; ".join(f"{c.name}: {c.detail}" for c in v.failures) or "incomplete checks"
        raise VerificationFailed(f"{layout.receipt(loc.key)}: does not verify; {lines}")
    if v.receipt is None:  # cannot follow checks that all passed; refused, not assumed
        raise VerificationFailed(f"{layout.receipt(loc.key)}: does not verify; the receipt was not read")
    _same_filesystem(layout)
    return plan(loc.job, v.receipt)


def _open_journal(layout: Layout, key: str) -> object:
    """The open journal of `key`, parsed, if it counts (see `core.review.apply`'s docstring).

    A journal another user could have written stays where it is, with the command that
    fixes it; one that does not load is set aside as evidence. Either way nothing is written.
    """
    path = layout.journal_file(key)
    try:
        require_trusted(path, layout.gen, repository_owners(layout.root), "an apply journal")
    except BadInput as exc:
        raise VerificationFailed(f"{exc}; nothing was written, and the journal was left in place") from None
    try:
        return loads_strict(read_bytes(path), str(path))
    except BadInput as exc:
        refuse_journal(layout, key, str(exc))


def _journal_targets(
    layout: Layout, loc: Located, journal: object, receipt: Receipt | None
) -> tuple[list[Target], bool | None]:
    """The targets of an apply's open journal, and whether the interrupted apply was to
    commit (signed or not; None: no commit). One that does not fit the job is set aside."""
    targets = _fitting_targets(journal, loc)
    if targets is None:
        refuse_journal(layout, loc.key, "its targets are not the job's paths at the job's input hashes")
    derived = plan(loc.job, receipt) if receipt is not None else targets
    if [t.to_dict() for t in targets] != [t.to_dict() for t in derived]:
        refuse_journal(layout, loc.key, "it does not name exactly the outputs of the verified receipt")
    wish = journal.get("commit") if isinstance(journal, dict) else None
    return targets, wish.get("sign") is True if isinstance(wish, dict) else None


def _fitting_targets(journal: object, loc: Located) -> list[Target] | None:
    """The journal's targets when it is this job's and each names an allowed path, once,
    with the job's input hash as its before and a sha256 as its after; else None."""
    if not isinstance(journal, dict) or journal.get("key") != loc.key:
        return None
    entries = journal.get("targets")
    if not isinstance(entries, list):
        return None
    targets = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or set(entry) != {"path", "before", "after"}:
            return None
        rel, after = entry["path"], entry["after"]
        if rel not in loc.job.allowed_paths or entry["before"] != loc.job.input_digest(rel):
            return None
        if not (isinstance(after, str) and _SHA256.fullmatch(after)):
            return None
        targets.append(Target(i, rel, entry["before"], after))
    if [t.path for t in targets] != sorted({t.path for t in targets}):
        return None  # apply writes each path once, in order
    return targets


def _same_filesystem(layout: Layout) -> None:
    if os.stat(layout.gen).st_dev != os.stat(layout.root).st_dev:
        raise GenjobError(f"{layout.gen}: on another filesystem than {layout.root}; apply needs one")
