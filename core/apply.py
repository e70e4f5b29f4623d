"""The apply plane: the only code that writes the repository's tree.

Apply runs under `.gen/state.lock`:
 1. a job already in `applied/` is a no-op (a journal left behind is closed);
 2. the receipt must verify now: every check in `core.verify`, the signature by policy.
    A tree that moved on since the job was minted makes the job STALE (`Stale`). Every
    check policy requires (`require_checks`) must have passed on these exact outputs;
 3. the targets follow from the job and the verified receipt alone: each output path
    with the job's input hash (before; None for a new file) and the output hash (after);
 4. a journal naming them goes to `.gen/journal/<key>.json`; each output is copied from
    `.gen/out/<digest>/` next to its target under a temp name, hashed as it is copied
    and fsynced. Every folder is reached through descriptors (`core.tree`), never
    through a path checked earlier;
 5. each target in turn is swapped with its copy in one atomic step, and what came out
    must be the bytes the job was minted against (for a new file: nothing may be
    there). Anything else is a user's edit: it is put back, everything this job wrote
    is rolled back from the originals kept in `.gen/journal/<key>/`, and `ApplyConflict`
    says which files were written and which were not;
 6. the job and an apply record go to `applied/`; the journal and originals are removed.

A journal is a claim, not a fact: anyone who can write `.gen/` can write one. Finishing
it (here or in `recover`) verifies the receipt again and requires the journal to name
exactly the targets derived from it; any other journal is set aside under
`.gen/logs/<key>/` and nothing is written. A resumed apply rolls forward when every
target is at its before or after hash and rolls back when one holds anything else.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from core.canonical import canonical, loads_strict, read_bytes
from core.checks import require_checks
from core.config import Config, load_config
from core.durable import (
    atomic_write,
    create_exclusive,
    environment_fault,
    flocked,
    folder,
    fsync_dir,
    fsync_fd,
    rename_at,
)
from core.errors import (
    ApplyConflict,
    BadInput,
    GenjobError,
    Stale,
    VerificationFailed,
    WrongState,
)
from core.events import actor, record_event
from core.evidence import set_aside
from core.layout import FOLDER_STATE, Layout
from core.models import Job, Receipt
from core.ownership import repository_owners, require_trusted
from core.queue import Located, locate, read_job_file
from core.repo import is_git_work_tree
from core.tree import (
    closing,
    copy_hashing,
    exchange,
    hash_at,
    identity,
    make_folder,
    open_dir,
    open_folder,
    open_regular,
)
from core.verify import Verification, verify

# Bits an output never takes over from the file it replaces.
_NO_SPECIAL_BITS = ~(stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX)
_NEW_COPY = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Applied:
    key: str
    changed: list[str]
    already: bool
    record: Path
    verification: Verification | None
    commit: str | None = None


@dataclass(frozen=True)
class Target:
    """One file apply writes: where, what it must hold now, and what it will hold."""

    index: int
    path: str
    before: str | None
    after: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "before": self.before, "after": self.after}

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def folders(self) -> list[str]:
        return self.path.split("/")[:-1]


def plan(job: Job, receipt: Receipt) -> list[Target]:
    """The targets of an apply: derived from the job and a verified receipt, nothing else."""
    return [
        Target(i, rel, job.input_digest(rel), after)
        for i, (rel, after) in enumerate(sorted(receipt.outputs.items()))
    ]


def apply_job(layout: Layout, key: str, commit: bool = False) -> Applied:
    """Verify and apply one job's outputs to the tree; idempotent and crash-safe."""
    config = load_config(layout.config)
    with flocked(layout.lock):
        loc = locate(layout, key)
        journal_path = layout.journal_file(key)
        if loc.folder == "applied":
            if os.path.lexists(journal_path) or os.path.lexists(layout.journal / key):
                # Killed after the apply record was made: only the cleanup was left to do.
                _close(layout, loc.job)
            return Applied(key, [], True, loc.path, None)
        if loc.folder != "running":
            if os.path.lexists(journal_path):
                _refuse_journal(
                    layout, key, f"the job is {FOLDER_STATE[loc.folder]}; no apply of it can be under way"
                )
            hint = f" (ship it first: genjob ship {key})" if loc.folder == "queue" else ""
            raise WrongState(
                f"{key}: is {FOLDER_STATE[loc.folder]}; only a job with a receipt can be applied{hint}"
            )
        if commit:
            check_commit_ready(layout)
        v = verify(layout, loc.job, config)
        if os.path.lexists(journal_path):
            targets = _trusted_journal(layout, loc, v)
            changed = _Apply(layout, loc.job, targets, config, resuming=True).run()
        else:
            targets = _checked_plan(layout, loc, v)
            require_checks(layout, loc.job, config, v)
            changed = _Apply(layout, loc.job, targets, config, resuming=False).run()
        _record(layout, loc.job, targets, changed, v)
    result = Applied(key, changed, False, layout.job_file("applied", key), v)
    if commit and changed:
        return Applied(key, changed, False, result.record, v, git_commit(layout, loc.job, changed))
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


def _trusted_journal(layout: Layout, loc: Located, v: Verification) -> list[Target]:
    """The targets of an open journal, if it matches a receipt that verifies now.

    Every check but `base` must pass (a half-applied tree is not at the job's inputs),
    and the journal must name exactly the targets derived from the job and receipt;
    otherwise the journal is set aside as evidence and nothing is written.
    """
    path = layout.journal_file(loc.key)
    why: str | None = None
    try:
        require_trusted(path, layout.gen, repository_owners(layout.root), "an apply journal")
        journal = loads_strict(read_bytes(path), str(path))
    except BadInput as exc:
        why = str(exc)
        journal = None
    failed = [c for c in v.failures if c.name != "base"]
    if why is None and (failed or v.receipt is None):
        why = "the receipt does not verify now: " + "; ".join(f"{c.name}: {c.detail}" for c in failed)
    targets = plan(loc.job, v.receipt) if v.receipt is not None else []
    if why is None and not (
        isinstance(journal, dict)
        and journal.get("key") == loc.key
        and journal.get("targets") == [t.to_dict() for t in targets]
    ):
        why = "it does not name exactly the outputs of the verified receipt"
    if why is None:
        _same_filesystem(layout)
        return targets
    _refuse_journal(layout, loc.key, why)


def _refuse_journal(layout: Layout, key: str, why: str) -> NoReturn:
    """Set a journal (and any originals it kept) aside as evidence; nothing is written."""
    path = layout.journal_file(key)
    aside = set_aside(layout, key, path, "journal-refused")
    originals = layout.journal / key
    if os.path.lexists(originals):
        set_aside(layout, key, originals, "journal-refused-originals")
    record_event(layout, "journal_refused", key, reason=why[:500], kept=aside.name)
    raise VerificationFailed(
        f"{path}: refused: {why}; nothing was written, and the journal was kept aside at "
        f"{aside.relative_to(layout.root)}"
    )


def _same_filesystem(layout: Layout) -> None:
    if os.stat(layout.gen).st_dev != os.stat(layout.root).st_dev:
        raise GenjobError(f"{layout.gen}: on another filesystem than {layout.root}; apply needs one")


class _Conflict(Exception):
    """A target was not what apply expected at the moment it acted."""


_OTHER = "other"  # what a target holds when it is not a regular file


class _Apply:
    """One run of steps 4 and 5 over open descriptors of the tree, `.gen/` and the outputs."""

    def __init__(
        self, layout: Layout, job: Job, targets: list[Target], config: Config, resuming: bool
    ) -> None:
        self.layout = layout
        self.job = job
        self.targets = targets
        self.limit = config.limits.max_file_bytes
        self.resuming = resuming
        self.parents: dict[int, int] = {}
        self._originals: int | None = None
        self.created: list[str] = []
        self._fds: list[int] = []

    # --- descriptors ---------------------------------------------------------------

    def _keep(self, fd: int) -> int:
        self._fds.append(fd)
        return fd

    def _open_tree(self) -> None:
        self.root = self._keep(open_dir(self.layout.root))
        with folder(self.layout.gen) as gen:
            where = str(self.layout.out_dir(self.job.digest))
            self.out = self._keep(open_folder(gen, ["out", self.job.digest], where))

    def _open_originals(self) -> None:
        """`.gen/journal/<key>/`, where each replaced original is kept until the end."""
        with folder(self.layout.gen) as gen:
            where = str(self.layout.journal / self.job.key)
            self._originals = self._keep(open_folder(gen, ["journal", self.job.key], where, []))

    @property
    def originals(self) -> int:
        if self._originals is None:
            raise RuntimeError("the originals folder is opened before any target is written")
        return self._originals

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()

    def parent(self, t: Target, create: bool = False) -> int | None:
        """The folder holding `t`, opened once through descriptors; None when missing
        (with `create`, missing folders are made first and noted for a rollback)."""
        if t.index not in self.parents:
            try:
                fd = open_folder(self.root, t.folders, t.path, self.created if create else None)
            except FileNotFoundError:
                return None
            self.parents[t.index] = self._keep(fd)
        return self.parents[t.index]

    def made_parent(self, t: Target) -> int:
        """The folder holding `t`, made where missing; gone while it was made is a conflict."""
        p = self.parent(t, create=True)
        if p is None:
            raise _Conflict(f"{t.path}: its folder was moved or replaced during the apply")
        return p

    def tmp(self, t: Target) -> str:
        return f".genjob-{self.job.key[:16]}-{t.index}.tmp"

    # --- reading -------------------------------------------------------------------

    def now(self, t: Target) -> str | None:
        """The target's hash now: None when absent, `_OTHER` when not a regular file."""
        p = self.parent(t)
        if p is None:
            return None
        return _hash_or_other(p, t.name, t.path)

    # --- the run -------------------------------------------------------------------

    def run(self) -> list[str]:
        """Write every pending target; returns the paths whose bytes changed."""
        pending: list[Target] = []
        written: list[str] = []
        try:
            self._open_tree()
            if self.resuming:
                self._open_originals()
                self._settle_leftovers()
            try:
                pending = self._pending()
            except Stale:
                raise  # a fresh apply that found a conflict before writing anything
            if not self.resuming:
                journal = self.layout.journal_file(self.job.key)
                atomic_write(
                    make_folder(journal.parent, self.layout.gen) / journal.name, canonical(self._journal())
                )
                self._open_originals()
            for t in pending:
                self._stage(t)
            for t in pending:
                self._commit(t)
                written.append(t.path)
        except Stale:
            raise
        except BaseException as exc:
            if self.resuming or os.path.lexists(self.layout.journal_file(self.job.key)):
                self._undo(exc, [t.path for t in pending], written)
            if isinstance(exc, OSError):
                raise environment_fault(exc, exc.filename or self.layout.root) or exc from None
            raise
        finally:
            self.close()
        return [t.path for t in self.targets if t.before != t.after]

    def _journal(self) -> dict[str, Any]:
        return {
            "key": self.job.key,
            "digest": self.job.digest,
            "targets": [t.to_dict() for t in self.targets],
            "started_at": time.time(),
            "by": actor(),
        }

    def _pending(self) -> list[Target]:
        """The targets still to write; a target holding anything but its before or after
        bytes stops the apply (before anything is written, on a fresh apply)."""
        pending, conflicts = [], []
        for t in self.targets:
            now = self.now(t)
            if now == t.after and (self.resuming or t.before == t.after):
                continue
            if now == t.before:
                pending.append(t)
            elif self.resuming:
                conflicts.append(f"{t.path}: {_describe(now, t)} during the apply")
            else:
                conflicts.append(f"{t.path}: {_describe(now, t)} since verification")
        if not conflicts:
            return pending
        if not self.resuming:
            raise Stale(
                f"{self.job.key}: {'; '.join(conflicts)}; nothing was written. "
                f"Replay it against the current tree: genjob replay {self.job.key}"
            )
        raise _Conflict("; ".join(conflicts))

    def _stage(self, t: Target) -> None:
        """Copy the output next to its target under the temp name, checking its hash."""
        p = self.made_parent(t)
        tmp = self.tmp(t)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=p)
        try:
            mode = stat.S_IMODE(os.stat(t.name, dir_fd=p, follow_symlinks=False).st_mode) & _NO_SPECIAL_BITS
        except FileNotFoundError:
            mode = None
        where = f"{self.layout.out_dir(self.job.digest)}/{t.path}"
        try:
            src_parent = open_folder(self.out, t.folders, where)
        except FileNotFoundError:
            raise VerificationFailed(f"{where}: gone since verification; nothing was written") from None
        with closing(src_parent):
            opened = open_regular(src_parent, t.name, where)
        if opened is None:
            raise VerificationFailed(f"{where}: gone since verification; nothing was written")
        src, _ = opened
        with closing(src):
            dst = os.open(
                tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666, dir_fd=p
            )
            with closing(dst):
                if mode is not None:
                    os.fchmod(dst, mode)
                digest = copy_hashing(src, dst, self.limit, where)
                fsync_fd(dst, f"{t.path} (copy)")
        if digest != t.after:
            os.unlink(tmp, dir_fd=p)
            raise VerificationFailed(
                f"{where}: changed after it was verified (now {digest[:12]}…, the receipt says "
                f"{t.after[:12]}…); nothing was written from it"
            )

    def _commit(self, t: Target) -> None:
        """Swap the staged copy into place; the original goes to `.gen/journal/<key>/`."""
        p = self.parents[t.index]
        _check_parent(self.root, t, p)
        tmp = self.tmp(t)
        if t.before is None:
            try:
                os.link(tmp, t.name, src_dir_fd=p, dst_dir_fd=p, follow_symlinks=False)
            except FileExistsError:
                raise _Conflict(f"{t.path}: was created during the apply; it is kept as it is") from None
            os.unlink(tmp, dir_fd=p)
        else:
            self._swap(t, p, tmp)
        fsync_fd(p, t.path)

    def _swap(self, t: Target, p: int, tmp: str) -> None:
        original = str(t.index)
        try:
            swapped = exchange(p, tmp, p, t.name)
        except FileNotFoundError:
            raise _Conflict(f"{t.path}: was deleted during the apply") from None
        if swapped:
            displaced = _hash_or_other(p, tmp, t.path)
            if displaced != t.before:
                exchange(p, tmp, p, t.name)  # the user's version goes back
                self._drop_copy(p, tmp, t)
                raise _Conflict(f"{t.path}: {_describe(displaced, t)} during the apply; that version is kept")
            rename_at(p, tmp, self.originals, original)
            return
        # No atomic exchange on this filesystem: keep the original by a hard link, check
        # that it is the job's input, and rename the copy over it at once.
        try:
            os.link(t.name, original, src_dir_fd=p, dst_dir_fd=self.originals, follow_symlinks=False)
        except FileNotFoundError:
            raise _Conflict(f"{t.path}: was deleted during the apply") from None
        kept = _hash_or_other(self.originals, original, t.path)
        if kept != t.before:
            os.unlink(original, dir_fd=self.originals)
            raise _Conflict(f"{t.path}: {_describe(kept, t)} during the apply; that version is kept")
        rename_at(p, tmp, p, t.name)

    def _drop_copy(self, p: int, name: str, t: Target) -> None:
        """Remove a staged copy, unless it no longer holds the output (then keep it)."""
        if _hash_or_other(p, name, t.path) == t.after:
            os.unlink(name, dir_fd=p)
            return
        kept = f"{self.tmp(t)}.kept"
        rename_at(p, name, self.originals, kept)

    # --- after a crash ---------------------------------------------------------------

    def _settle_leftovers(self) -> None:
        """Temp copies a killed apply left in the tree: an original caught mid-swap goes to
        the originals, the user's version caught mid-swap goes back, copies go."""
        for t in self.targets:
            p = self.parent(t)
            tmp = self.tmp(t)
            if p is None:
                continue
            held = _hash_or_other(p, tmp, t.path)
            if held is None:
                continue
            original = str(t.index)
            if held == t.after:
                os.unlink(tmp, dir_fd=p)
            elif held == t.before and _hash_or_other(self.originals, original, t.path) is None:
                rename_at(p, tmp, self.originals, original)
            elif held not in (t.before, _OTHER) and self.now(t) == t.after:
                exchange(p, tmp, p, t.name)
                self._drop_copy(p, tmp, t)
            else:
                rename_at(p, tmp, self.originals, f"{tmp}.kept")

    # --- rollback ------------------------------------------------------------------

    def _undo(self, exc: BaseException, pending: list[str], written: list[str]) -> None:
        """After a failure: remove the temp copies, put back every original this job
        replaced, remove the files it created and the folders it made; close the journal.

        Raises ApplyConflict for a conflict, naming what was written and what was not.
        """
        for t in self.targets:
            p = self.parents.get(t.index)
            if p is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.tmp(t), dir_fd=p)
        left = self._roll_back(written)
        self._remove_created()
        _close_journal(self.layout, self.job.key)
        record_event(self.layout, "apply_rolled_back", self.job.key, reason=str(exc)[:500], left=left)
        if isinstance(exc, _Conflict):
            done = ", ".join(written) or "none"
            not_done = ", ".join(p for p in pending if p not in written) or "none"
            kept = f" Left as they are now: {'; '.join(left)}." if left else ""
            raise ApplyConflict(
                f"{self.job.key}: apply stopped: {exc}. Written, then rolled back: {done}. "
                f"Never written: {not_done}.{kept} The job is STALE now: "
                f"genjob replay {self.job.key}"
            ) from None

    def _roll_back(self, written: list[str]) -> list[str]:
        """Every target at its after hash goes back to its before bytes; returns the ones
        this run wrote that changed again since (they stay as they are)."""
        left = []
        for t in reversed(self.targets):
            if t.before == t.after:
                continue
            p = self.parent(t)
            now = self.now(t)
            if p is None or now != t.after:  # without its folder, now is None
                if now != t.before and t.path in written:
                    left.append(f"{t.path} (changed after it was written)")
                continue
            if not self._put_back(t, p):
                left.append(f"{t.path} (changed after it was written)")
        return left

    def _put_back(self, t: Target, p: int) -> bool:
        if t.before is None:
            tmp = self.tmp(t)
            rename_at(p, t.name, p, tmp)
            if _hash_or_other(p, tmp, t.path) == t.after:
                os.unlink(tmp, dir_fd=p)
                return True
            with contextlib.suppress(FileExistsError):
                os.link(tmp, t.name, src_dir_fd=p, dst_dir_fd=p, follow_symlinks=False)
                os.unlink(tmp, dir_fd=p)
            return False
        original = str(t.index)
        if self._originals is None or _hash_or_other(self.originals, original, t.path) != t.before:
            return False
        if exchange(self.originals, original, p, t.name):
            if _hash_or_other(self.originals, original, t.path) == t.after:
                os.unlink(original, dir_fd=self.originals)
                return True
            exchange(self.originals, original, p, t.name)
            return False
        rename_at(self.originals, original, p, t.name)
        return True

    def _remove_created(self) -> None:
        for rel in reversed(self.created):
            parts = rel.split("/")
            with contextlib.suppress(OSError, BadInput):
                fd = open_folder(self.root, parts[:-1], rel)
                with closing(fd):
                    os.rmdir(parts[-1], dir_fd=fd)


def _check_parent(root: int, t: Target, parent: int) -> None:
    """Right before a swap: the path to `t` still leads to the folder opened for it."""
    try:
        fd = open_folder(root, t.folders, t.path)
    except (FileNotFoundError, BadInput):
        raise _Conflict(f"{t.path}: its folder was moved or replaced during the apply") from None
    with closing(fd):
        if identity(fd) != identity(parent):
            raise _Conflict(f"{t.path}: its folder was moved or replaced during the apply")


def _hash_or_other(dir_fd: int, name: str, where: str) -> str | None:
    try:
        return hash_at(dir_fd, name, where)
    except BadInput:
        return _OTHER


def _describe(now: str | None, t: Target) -> str:
    if now is None:
        return "deleted" if t.before is not None else "absent"
    if now == _OTHER:
        return "no longer a regular file"
    if t.before is None:
        return "exists now, but the job creates it"
    return f"changed (now {now[:12]}…, the job was minted on {t.before[:12]}…)"


def _record(layout: Layout, job: Job, targets: list[Target], changed: list[str], v: Verification) -> None:
    record = {
        "job": job.document(),
        "apply": {
            "at": time.time(),
            "by": actor(),
            "signer": v.signer,
            "signature_required": v.signature_required,
            "targets": [t.to_dict() for t in targets],
            "changed": changed,
        },
    }
    path = layout.job_file("applied", job.key)
    create_exclusive(make_folder(path.parent, layout.gen) / path.name, canonical(record))
    _close(layout, job)
    record_event(layout, "applied", job.key, changed=changed, signer=v.signer)


def _close(layout: Layout, job: Job) -> None:
    """With the apply record made: remove the job's other copies of the same document,
    its lease and cancel request, and the journal with the originals it kept."""
    for folder_name in ("running", "queue"):
        path = layout.job_file(folder_name, job.key)
        with contextlib.suppress(FileNotFoundError, BadInput):
            other, _ = read_job_file(path, folder_name)
            if other.digest == job.digest:
                path.unlink()
    layout.lease(job.key).unlink(missing_ok=True)
    layout.cancel_request(job.key).unlink(missing_ok=True)
    fsync_dir(layout.running)
    _close_journal(layout, job.key)


def _close_journal(layout: Layout, key: str) -> None:
    """Remove the originals, then the journal: while the journal is there, the next
    `apply` or `recover` finishes the cleanup."""
    originals = layout.journal / key
    if os.path.isdir(originals) and not os.path.islink(originals):
        shutil.rmtree(originals)
    layout.journal_file(key).unlink(missing_ok=True)
    fsync_dir(layout.journal)


# What `apply --commit` says when git cannot say who commits, before anything is written.
NO_GIT_IDENTITY = (
    'git does not know who you are, so nothing was applied: run git config --global user.name "Your Name"'
    ' && git config --global user.email "you@example.com", then apply again'
)


def check_commit_ready(layout: Layout) -> None:
    """Refuse an apply that is to be committed and could not be, before it writes anything:
    the tree must be in a git work tree, and git must know who commits (`user.name` and
    `user.email`, or what git can tell by itself, as `git commit` would judge it)."""
    if not is_git_work_tree(layout.root):
        where = layout.root
        raise GenjobError(f"{where}: not in a git work tree, so nothing was applied (git init makes one)")
    try:
        for who in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT"):
            if _git(layout, "var", who, check=False).returncode != 0:
                raise GenjobError(NO_GIT_IDENTITY)
    except OSError as exc:
        raise GenjobError(f"git: cannot run ({exc.strerror}), so nothing was applied") from None


def _git(layout: Layout, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`git ARGS` in the repository, its paths taken literally (OSError: git cannot run)."""
    proc = subprocess.run(
        ["git", "--literal-pathspecs", "-C", str(layout.root), *args], capture_output=True, text=True
    )
    if check and proc.returncode != 0:
        why = proc.stderr.strip() or proc.stdout.strip()
        raise GenjobError(f"git {args[0]}: {why}")
    return proc


def git_commit(layout: Layout, job: Job, paths: list[str]) -> str:
    """Commit exactly the applied paths, with a `Genjob-Key:` trailer; returns the commit id.

    Paths go to git as literal pathspecs: an allowed path such as ``:(glob)**`` or
    ``src/*.py`` names that one file, never a pattern over the user's other work.
    `check_commit_ready` has made sure, before the apply, that git can commit here.
    """
    first = job.instruction.strip().splitlines()[0][:72]
    message = (
        f"{first}\n\nApplied by genjob from a verified receipt.\n\n"
        f"Genjob-Key: {job.key}\nGenjob-Digest: {job.digest}\n"
    )

    def git(*args: str) -> str:
        try:
            return _git(layout, *args).stdout.strip()
        except OSError as exc:
            raise GenjobError(f"git: cannot run ({exc.strerror}); the apply itself stands") from None
        except GenjobError as exc:
            raise GenjobError(f"{exc} (the apply itself stands)") from None

    git("add", "--", *paths)
    git("commit", "-q", "-m", message, "--", *paths)
    sha = git("rev-parse", "HEAD")
    record_event(layout, "committed", job.key, commit=sha)
    return sha
