"""Merge instead of fight: a STALE receipt three-way merged over the tree as it is now.

A receipt goes STALE when the tree moves on after its job was minted, most often because
another job over the same file was applied first. When the tree moved only on files the
receipt writes, each of them is merged with `git merge-file` (base: the bytes the job was
minted on, kept at mint under `.gen/blobs/`; ours: the tree now; theirs: the receipt's
verified output). When every file merges clean, the merged bytes go through the same
atomic apply as any output (`core.review.apply`: journal, descriptor-walked swaps,
rollback), staged under `.gen/merges/<key>/`, and the apply record says what was merged
over: the receipt's sha256, each merged file's tree hash and base hash, and the tool.
A conflict writes nothing and names its hunks (`MergeConflict`); a replay is the way on.

After a crash the journal, which says it is a merge's, is finished by `finish_merge`, and
only when every write can be derived again from what verifies now: the receipt, the kept
base (verified by its name) and the bytes the tree held (at the journal's before hash, in
the tree or among the originals the apply kept), merged again to the journal's after
hash. Otherwise it is rolled back from the originals, as any apply.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import BadInput, GenjobError, Stale, VerificationFailed, WrongState
from core.model.canonical import read_bytes, sha256_bytes
from core.model.check_record import MergedOutputs
from core.model.models import Job, Receipt
from core.model.protected import ProtectedPaths, require_approval
from core.review.apply import (
    Applied,
    Target,
    TreeWrite,
    record_applied,
    refuse_journal,
)
from core.review.commit import check_commit_ready, git_commit
from core.review.merge_checks import require_merged_checks, run_merged_checks
from core.review.verify import Verification, verify
from core.review.writer_lock import writer
from core.store.blobs import KEEP_LIMIT, read_blob, read_tree_file
from core.store.config import Config, load_config
from core.store.durable import flocked
from core.store.events import record_event
from core.store.job_state import said_state
from core.store.layout import Layout
from core.store.overlaps import moved_inputs
from core.store.queue import Located, locate
from core.store.tree import closing, make_folder, open_dir, open_folder

_MARKERS = ("<<<<<<< ", "=======", "||||||| ", ">>>>>>> ")


class MergeConflict(GenjobError):
    """A stale receipt's three-way merge conflicts: nothing was written. `hunks` holds,
    for each conflicting path, the lines of its conflicting hunks (with git's markers)."""

    def __init__(self, message: str, hunks: dict[str, list[str]]) -> None:
        super().__init__(message)
        self.hunks = hunks


@dataclass(frozen=True)
class MergedFile:
    """One file merged: the hashes it was merged from and the merged bytes."""

    path: str
    base: str
    ours: str
    theirs: str
    data: bytes

    @property
    def after(self) -> str:
        return sha256_bytes(self.data)


@dataclass
class MergePlan:
    """What a merge would write: every target, the files merged, and any conflicts."""

    targets: list[Target]
    merged: dict[str, MergedFile] = field(default_factory=dict)
    conflicts: dict[str, list[str]] = field(default_factory=dict)


def merge_tool() -> str:
    """The tool that merges, as the apply record names it (`git merge-file`, git's version)."""
    try:
        proc = subprocess.run(["git", "--version"], capture_output=True, text=True, check=False)
    except OSError as exc:
        raise GenjobError(f"git: cannot run ({exc.strerror}); a merge needs git merge-file") from None
    return f"git merge-file ({proc.stdout.strip() or 'git'})"


def _three_way(ours: bytes, base: bytes, theirs: bytes, rel: str) -> tuple[bytes, bool]:
    """`git merge-file -p` of the three: the merged bytes, and whether they are clean."""
    with tempfile.TemporaryDirectory(prefix="genjob-merge-") as tmp:
        names = []
        for name, data in (("tree", ours), ("base", base), ("receipt", theirs)):
            path = Path(tmp) / name
            path.write_bytes(data)
            names.append(str(path))
        argv = ["git", "merge-file", "-p", "-L", "tree", "-L", "job's base", "-L", "receipt", *names]
        try:
            proc = subprocess.run(argv, capture_output=True, check=False)
        except OSError as exc:
            raise GenjobError(f"git: cannot run ({exc.strerror}); {rel} was not merged") from None
    if proc.returncode < 0 or proc.returncode > 127:  # an error, not a count of conflicts
        why = proc.stderr.decode(errors="replace").strip() or f"exit {proc.returncode}"
        return f"git merge-file cannot merge {rel}: {why}\n".encode(), False
    return proc.stdout, proc.returncode == 0


def conflict_hunks(merged: bytes) -> list[str]:
    """The lines of each conflicting hunk in `git merge-file` output, markers included."""
    lines, inside = [], False
    for line in merged.decode(errors="replace").splitlines():
        if line.startswith(_MARKERS[0]):
            inside = True
        if inside:
            lines.append(line)
        if line.startswith(_MARKERS[3]):
            inside = False
    return lines or [merged.decode(errors="replace").strip()]


def _theirs(layout: Layout, job: Job, rel: str, digest: str, limit: int) -> bytes:
    where = f"{layout.out_dir(job.digest)}/{rel}"
    out = open_dir(layout.out_dir(job.digest))
    with closing(out):
        data = read_tree_file(out, rel, limit)
    if data is None or sha256_bytes(data) != digest:
        raise VerificationFailed(f"{where}: changed or gone since it was verified; nothing was written")
    return data


def _base(layout: Layout, job: Job, rel: str, limit: int) -> bytes:
    digest = job.input_digest(rel)
    assert digest is not None  # a new path has no base: `_merge_one` says so first
    data = read_blob(layout, digest, limit)
    if data is None:
        raise Stale(
            f"{layout.gen / 'blobs' / digest}: the bytes {job.key} was minted on over {rel} are not kept "
            f"(genjob keeps text inputs up to {KEEP_LIMIT >> 20} MiB at mint), so it cannot be merged; "
            f"nothing was written. Replay it: genjob replay {job.key}"
        )
    return data


def _merge_one(
    layout: Layout, job: Job, rel: str, theirs_hash: str, ours: bytes | None, limit: int
) -> tuple[MergedFile | None, list[str]]:
    """Merge one moved path: the merged file, or None and the lines that say why not."""
    if job.input_digest(rel) is None:
        return None, [f"{rel}: the job creates it, and the tree has one now (there is no base to merge on)"]
    if ours is None:
        return None, [f"{rel}: deleted in the tree, or no longer a regular file, since the job was minted"]
    theirs = _theirs(layout, job, rel, theirs_hash, limit)
    data, clean = _three_way(ours, _base(layout, job, rel, limit), theirs, rel)
    if not clean:
        return None, conflict_hunks(data)
    base = job.input_digest(rel)
    assert base is not None
    return MergedFile(rel, base, sha256_bytes(ours), theirs_hash, data), []


def plan_merge(layout: Layout, job: Job, v: Verification, config: Config) -> MergePlan:
    """The merge of a STALE receipt over the tree as it is: raises when it cannot be one."""
    if v.ok:
        raise WrongState(f"{job.key}: is not STALE; apply it as it is: genjob apply {job.key}")
    receipt = v.receipt
    if receipt is None or not v.only_base_failed():
        lines = "; ".join(f"{c.name}: {c.detail}" for c in v.failures) or "incomplete checks"
        raise VerificationFailed(f"{layout.receipt(job.key)}: does not verify; {lines}")
    moved = moved_inputs(layout, job)
    read_only = [rel for rel in moved if rel not in receipt.outputs]
    if read_only:
        raise Stale(
            f"{job.key}: the tree moved on {', '.join(read_only)}, which the job reads but its receipt does "
            f"not write: no merge can say what that change meant to it; nothing was written. Replay it: "
            f"genjob replay {job.key}"
        )
    limit = config.limits.max_file_bytes
    plan = MergePlan([])
    root = open_dir(layout.root)
    with closing(root):
        for i, (rel, after) in enumerate(sorted(receipt.outputs.items())):
            if rel not in moved:
                plan.targets.append(Target(i, rel, job.input_digest(rel), after))
                continue
            merged, why = _merge_one(layout, job, rel, after, read_tree_file(root, rel, limit), limit)
            if merged is None:
                plan.conflicts[rel] = why
                continue
            plan.merged[rel] = merged
            plan.targets.append(Target(i, rel, merged.ours, merged.after))
    return plan


def _merges_dir(layout: Layout, key: str) -> Path:
    return layout.gen / "merges" / key


def _stage_merge(
    layout: Layout, job: Job, receipt: Receipt, merged: dict[str, MergedFile], limit: int
) -> None:
    """`.gen/merges/<key>/`, made afresh: each merged file's bytes, and a copy of every
    other output; the apply reads them there (and checks each hash once more)."""
    folder = _merges_dir(layout, job.key)
    _drop_stage(layout, job.key)
    make_folder(folder, layout.gen)
    for rel in sorted(receipt.outputs):
        data = merged[rel].data if rel in merged else _theirs(layout, job, rel, receipt.outputs[rel], limit)
        path = make_folder((folder / rel).parent, layout.gen) / rel.rsplit("/", 1)[-1]
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with closing(fd):
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)


def _drop_stage(layout: Layout, key: str) -> None:
    folder = _merges_dir(layout, key)
    if os.path.isdir(folder) and not os.path.islink(folder):
        shutil.rmtree(folder)


def _provenance(layout: Layout, job: Job, merged: dict[str, MergedFile], how: str) -> dict[str, Any]:
    return {
        "receipt": f"sha256:{sha256_bytes(read_bytes(layout.receipt(job.key)))}",
        "tool": merge_tool(),
        "over": {rel: m.ours for rel, m in sorted(merged.items())},
        "base": {rel: m.base for rel, m in sorted(merged.items())},
        "approved": how,
    }


def merged_over_trailers(merge: dict[str, Any]) -> list[str]:
    return [f"Genjob-Merged-Over: {rel} sha256:{ours}" for rel, ours in sorted(merge["over"].items())]


def apply_merged(
    layout: Layout,
    key: str,
    commit: bool = False,
    *,
    protected: bool = False,
    sign: bool | None = None,
    how: str = "operator",
) -> Applied:
    """Merge `key`'s STALE receipt over the tree and apply the result (see the module),
    once every required check passed on the merged bytes (`core.review.merge_checks`).

    `how` is recorded as who approved it: "operator", or "auto_merge" for `apply --ready`."""
    with writer(layout):
        config = load_config(layout.config)
        if config.policy.require_checks:
            _check_merge(layout, key, config)
        with flocked(layout.lock):
            loc = _mergeable(layout, key)
            if loc.folder == "applied":
                return Applied(key, [], True, loc.path, None)
            signed = config.policy.sign_commits if sign is None else sign
            if commit:
                check_commit_ready(layout, sign=signed)
            v = verify(layout, loc.job, config)
            plan = _clean_plan(layout, loc.job, v, config)
            require_merged_checks(layout, loc.job, merged_outputs(loc.job, plan), config)
            require_approval(key, [t.path for t in plan.targets], config.policy.protected_paths, protected)
            assert v.receipt is not None  # plan_merge refused a receipt that was not read
            info = _provenance(layout, loc.job, plan.merged, how)
            _stage_merge(layout, loc.job, v.receipt, plan.merged, config.limits.max_file_bytes)
            source = ["merges", key]
            try:
                changed = TreeWrite(
                    layout, loc.job, plan.targets, config, False, source=source, merge=info
                ).run()
            finally:
                _drop_stage(layout, key)
            record_applied(layout, loc.job, plan.targets, changed, v, merged=info)
            record_event(layout, "merged", key, over=info["over"], tool=info["tool"])
        result = Applied(key, changed, False, layout.job_file("applied", key), v)
        if commit and changed:
            sha = git_commit(layout, loc.job, changed, sign=signed, trailers_after=merged_over_trailers(info))
            return dataclasses.replace(result, commit=sha)
        return result


def _mergeable(layout: Layout, key: str) -> Located:
    """Where `key` is: applied already, or in `running/` with no apply of it interrupted."""
    loc = locate(layout, key)
    if loc.folder == "applied":
        return loc
    if loc.folder != "running" or os.path.lexists(layout.journal_file(key)):
        interrupted = "an apply of it was interrupted: genjob recover finishes it"
        why = interrupted if loc.folder == "running" else f"is {said_state(layout, key)}"
        raise WrongState(f"{key}: {why}; only a STALE receipt can be merged")
    return loc


def _clean_plan(layout: Layout, job: Job, v: Verification, config: Config) -> MergePlan:
    """The merge of `job`'s receipt over the tree; MergeConflict when any file conflicts."""
    plan = plan_merge(layout, job, v, config)
    if plan.conflicts:
        paths = ", ".join(sorted(plan.conflicts))
        raise MergeConflict(
            f"{job.key}: the three-way merge conflicts in {paths}; nothing was written. "
            f"Replay it over the tree as it is: genjob replay {job.key}",
            plan.conflicts,
        )
    return plan


def merged_outputs(job: Job, plan: MergePlan) -> MergedOutputs:
    """The bytes `plan` would write, as checks on them are bound to them."""
    base = {rel: job.input_digest(rel) for rel in job.allowed_paths}
    base.update({t.path: t.before for t in plan.targets})
    return MergedOutputs({t.path: t.after for t in plan.targets}, base)


def _check_merge(layout: Layout, key: str, config: Config) -> None:
    """Run the required checks that have not yet run on the bytes the merge of `key` would
    write, staged for them and dropped after; the checks run outside the state lock (they
    may take minutes), under the writer lock the caller holds, so the tree does not move
    under them by an apply. A merge that cannot be planned is left for the caller to refuse."""
    with flocked(layout.lock):
        loc = _mergeable(layout, key)
        if loc.folder == "applied":
            return
        v = verify(layout, loc.job, config)
        plan = _clean_plan(layout, loc.job, v, config)
        assert v.receipt is not None  # plan_merge refused a receipt that was not read
        _stage_merge(layout, loc.job, v.receipt, plan.merged, config.limits.max_file_bytes)
    try:
        merged = merged_outputs(loc.job, plan)
        run_merged_checks(layout, loc.job, v.receipt, merged, _merges_dir(layout, key), config)
    finally:
        with flocked(layout.lock):
            _drop_stage(layout, key)


# --- after a crash -------------------------------------------------------------------


def finish_merge(
    layout: Layout, loc: Located, v: Verification, config: Config, journal: object, *, protected: bool
) -> Applied:
    """Finish (or roll back) the interrupted merge whose open journal `journal` is (read
    and trusted by `apply_job`, under the writer and state locks; see the module's docstring)."""
    targets, info = _journal_merge(layout, journal, loc)
    resumed = TreeWrite(layout, loc.job, targets, config, True, source=["merges", loc.key], merge=info)
    why = _underivable(layout, loc, v, resumed, info)
    if why is None:
        try:
            require_approval(loc.key, [t.path for t in targets], config.policy.protected_paths, protected)
        except ProtectedPaths as exc:
            why = f"it is not approved now ({exc})"
    if why is not None:
        _refuse_unanchored(layout, loc, v, resumed, info, why)
        _drop_stage(layout, loc.key)
        resumed.roll_back(why)
    assert v.receipt is not None  # `_underivable` said why otherwise
    merged = _derived(layout, loc, resumed, info, v.receipt.outputs)
    _stage_merge(layout, loc.job, v.receipt, merged, config.limits.max_file_bytes)
    changed = resumed.run()
    _drop_stage(layout, loc.key)
    record_applied(layout, loc.job, targets, changed, v, merged=info)
    record_event(layout, "merged", loc.key, over=info["over"], tool=info["tool"], resumed=True)
    return Applied(loc.key, changed, False, layout.job_file("applied", loc.key), v)


def _refuse_unanchored(
    layout: Layout, loc: Located, v: Verification, run: TreeWrite, info: dict[str, Any], why: str
) -> None:
    """A merged target's before hash is the tree's, not the job's, so a rollback of one is
    anchored only when the bytes kept at that hash merge with the job's base and the
    receipt's output to the bytes it rolls back: else the journal (a claim, which could
    name any bytes as the original) is set aside and nothing is written."""
    if v.receipt is not None:
        try:
            _derived(layout, loc, run, info, v.receipt.outputs)
            return
        except GenjobError:
            pass
    refuse_journal(layout, loc.key, f"{why}; and what it would put back is not anchored to the job")


def _journal_merge(layout: Layout, journal: object, loc: Located) -> tuple[list[Target], dict[str, Any]]:
    """A merge journal's targets and provenance; one of another shape is set aside."""
    shaped = _merge_shape(journal, loc.key)
    if shaped is None:
        refuse_journal(layout, loc.key, "it is not a merge journal of this job")
    return shaped


def _merge_shape(journal: object, key: str) -> tuple[list[Target], dict[str, Any]] | None:
    if not isinstance(journal, dict) or journal.get("key") != key:
        return None
    info, entries = journal.get("merge"), journal.get("targets")
    if not (isinstance(info, dict) and isinstance(entries, list)):
        return None
    if not (isinstance(info.get("over"), dict) and isinstance(info.get("base"), dict)):
        return None
    targets = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or set(entry) != {"path", "before", "after"}:
            return None
        if not all(isinstance(entry[k], str) for k in ("path", "after")):
            return None
        if entry["before"] is not None and not isinstance(entry["before"], str):
            return None
        targets.append(Target(i, entry["path"], entry["before"], entry["after"]))
    return targets, info


def _underivable(
    layout: Layout, loc: Located, v: Verification, run: TreeWrite, info: dict[str, Any]
) -> str | None:
    """Why the journal's writes cannot be derived again from what verifies now; None if they can."""
    failed = [c for c in v.failures if c.name != "base"]  # a half-merged tree is off its base
    if failed or v.receipt is None:
        return (
            "the receipt does not verify now ("
            + ("; ".join(f"{c.name}: {c.detail}" for c in failed) or "it was not read")
            + ")"
        )
    outputs = v.receipt.outputs
    if [t.path for t in run.targets] != sorted(outputs):
        return "its targets are not the receipt's outputs"
    for t in run.targets:
        if t.path in info["over"]:
            continue
        if (t.before, t.after) != (loc.job.input_digest(t.path), outputs[t.path]):
            return f"{t.path}: its target is not the receipt's output over the job's input"
    try:
        _derived(layout, loc, run, info, outputs)
    except GenjobError as exc:
        return f"its merged bytes cannot be made again ({exc})"
    return None


def _derived(
    layout: Layout, loc: Located, run: TreeWrite, info: dict[str, Any], outputs: dict[str, str]
) -> dict[str, MergedFile]:
    """Each merged target merged again from the kept base, the tree's bytes at its before
    hash (wherever the apply left them) and the receipt's verified output; each must be
    clean and come to the journal's after hash (GenjobError otherwise)."""
    limit = run.limit
    merged: dict[str, MergedFile] = {}
    for t in run.targets:
        if t.path not in info["over"]:
            continue
        if info["over"][t.path] != t.before or info["base"].get(t.path) != loc.job.input_digest(t.path):
            raise GenjobError(f"{t.path}: the journal's hashes are not the job's")
        assert t.before is not None
        ours = _ours(layout, loc.key, t, run.tmp(t), limit)
        if ours is None:
            raise GenjobError(f"{t.path}: no copy of the bytes it was merged over is left")
        done, why = _merge_one(layout, loc.job, t.path, outputs[t.path], ours, limit)
        if done is None or done.after != t.after:
            raise GenjobError(f"{t.path}: it does not merge to the same bytes again ({'; '.join(why)[:200]})")
        merged[t.path] = done
    return merged


def _ours(layout: Layout, key: str, t: Target, tmp: str, limit: int) -> bytes | None:
    """The bytes at `t`'s before hash: in the tree, among the originals the apply kept, or
    under the temp name a swap caught midway left them at."""
    places: list[tuple[Path, list[str], str]] = [
        (layout.root, t.folders, t.name),
        (layout.journal / key, [], str(t.index)),
        (layout.root, t.folders, tmp),
    ]
    for base, folders, name in places:
        try:
            top = open_dir(base)
        except (FileNotFoundError, BadInput):
            continue
        with closing(top):
            try:
                fd = open_folder(top, folders, str(base))
            except (FileNotFoundError, BadInput):
                continue
            with closing(fd):
                data = read_tree_file(fd, name, limit)
        if data is not None and sha256_bytes(data) == t.before:
            return data
    return None
