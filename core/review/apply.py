"""The apply plane: the only code that writes the repository's tree.

Apply runs under `.gen/state.lock`:
 1. a job already in `applied/` is a no-op (a journal left behind is closed);
 2. the receipt must verify now: every check in `core.review.verify`, the signature by policy.
    A tree that moved on since the job was minted makes the job STALE (`Stale`). Every
    check policy requires (`require_checks`) must have passed on these exact outputs;
 3. the targets follow from the job and the verified receipt alone: each output path
    with the job's input hash (before; None for a new file) and the output hash (after);
 4. a journal naming them goes to `.gen/journal/<key>.json`; each output is copied from
    `.gen/out/<digest>/` next to its target under a temp name, hashed as it is copied
    and fsynced. Every folder is reached through descriptors (`core.store.tree`), never
    through a path checked earlier;
 5. each target in turn is swapped with its copy in one atomic step, and what came out
    must be the bytes the job was minted against (for a new file: nothing may be
    there). Anything else is a user's edit: it is put back, everything this job wrote
    is rolled back from the originals kept in `.gen/journal/<key>/`, and `ApplyConflict`
    says which files were written and which were not;
 6. the job and an apply record go to `applied/`; the journal and originals are removed.

A journal is a claim, not a fact: anyone who can write `.gen/` can write one. It counts
only when no other user could have written it, and only for what it shares with the job:
each target must be an allowed path with the job's input hash (and, while the receipt
loads, exactly the targets derived from it); any other journal is set aside under
`.gen/logs/<key>/` and nothing is written. A journal that counts is finished:
 - rolled forward, when the receipt verifies now and every target is at its before or
   after hash: every write is derived from the receipt again, never from the journal;
 - rolled back, when the receipt no longer verifies (a key no longer trusted, a policy
   turned on, outputs changed or gone) or a target holds a user's edit: each target at
   the output the journal names goes back to its original from `.gen/journal/<key>/`,
   which must hold the job's input hash, and a new file holding its output is removed,
   so a rollback writes nothing but the bytes the job was minted on. It is all or
   nothing: an original missing or not at the input hash stops it before anything is
   written (`TornApply`), and a target that changes while it runs undoes it again.
Every write, forward or back, goes through the same descriptor-walked swap, re-checked
right before and after it acts.

`core.review.apply_job` takes steps 1 to 3 and judges an open journal; this module writes:
the journal, the copies, the swaps, the record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import shutil
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from core.errors import (
    ApplyConflict,
    BadInput,
    RolledBack,
    Stale,
    TornApply,
    VerificationFailed,
)
from core.model.canonical import canonical
from core.model.models import Job, Receipt
from core.review.verify import Verification
from core.store.config import Config
from core.store.durable import (
    atomic_write,
    create_exclusive,
    environment_fault,
    folder,
    fsync_dir,
    fsync_fd,
    move,
    rename_at,
)
from core.store.events import actor, record_event
from core.store.evidence import set_aside
from core.store.job_state import read_job_file
from core.store.layout import Layout
from core.store.tree import (
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
    # Applied before, with a commit asked for that git has not made (`core.review.commit`).
    uncommitted: bool = False


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


def refuse_journal(layout: Layout, key: str, why: str) -> NoReturn:
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


class _Conflict(Exception):
    """A target was not what apply expected at the moment it acted."""

    # What the operator does next, after what was rolled back.
    advice = "The job is STALE now: genjob replay {key}"


class _Unmovable(_Conflict):
    """A target apply cannot swap at all (a mount point): replaying the job would not help."""

    advice = "Nothing of the job is in the tree: unmount it, or mint the job without that path"


_OTHER = "other"  # what a target holds when it is not a regular file
# The errors a rename gives for a mount point (EBUSY) and across mounts (EXDEV).
_MOUNT_ERRORS = (errno.EBUSY, errno.EXDEV)


def _mount_fault(t: Target, exc: OSError) -> _Unmovable:
    if exc.errno == errno.EBUSY:
        return _Unmovable(f"{t.path}: a mount point; apply cannot replace it")
    return _Unmovable(f"{t.path}: it or its folder is a mount point; apply cannot replace it")


@dataclass
class _Undone:
    """What a rollback did: the paths it restored and removed, and those it left as they are."""

    restored: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    left: list[tuple[str, str]] = field(default_factory=list)  # (path, what it holds now)

    def said(self) -> str:
        if self.restored or self.removed:
            restored = ", ".join(sorted(self.restored)) or "none"
            done = f"restored {restored}; removed {', '.join(sorted(self.removed)) or 'none'}."
        else:
            done = "nothing of it had been written."
        return done + (f" Left as they are: {_left(self.left)}." if self.left else "")


def _left(left: list[tuple[str, str]]) -> str:
    return "; ".join(f"{path} ({what})" for path, what in left)


def _held(now: str | None) -> str:
    """What a target holds that is neither the job's input nor its output."""
    if now is None:
        return "gone"
    if now == _OTHER:
        return "no longer a regular file"
    return "neither the job's input nor its output"


class TreeWrite:
    """One run of steps 4 and 5 over open descriptors of the tree, `.gen/` and the outputs."""

    def __init__(
        self,
        layout: Layout,
        job: Job,
        targets: list[Target],
        config: Config,
        resuming: bool,
        *,
        commit: bool | None = None,
        source: Sequence[str] | None = None,
        merge: dict[str, Any] | None = None,
    ) -> None:
        self.layout = layout
        self.commit = commit  # to be committed, signed or not; None: not to be committed
        self.job = job
        self.targets = targets
        self.limit = config.limits.max_file_bytes
        self.resuming = resuming
        # Where the outputs are read from, below `.gen/` (a merge's: its merged bytes), and
        # what the journal says of the merge.
        self.source = list(source) if source is not None else ["out", job.digest]
        self.merge = merge
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
            self.out = self._keep(open_folder(gen, self.source, str(self.source_path)))

    @property
    def source_path(self) -> Path:
        return self.layout.gen.joinpath(*self.source)

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

    def in_originals(self, name: str) -> str:
        """A name in the originals folder, as the operator finds it."""
        return f"{(self.layout.journal / self.job.key).relative_to(self.layout.root)}/{name}"

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
                journal = make_folder(self.layout.journal, self.layout.gen) / f"{self.job.key}.json"
                atomic_write(journal, canonical(self._journal()))
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
        journal = {
            "key": self.job.key,
            "digest": self.job.digest,
            "targets": [t.to_dict() for t in self.targets],
            "started_at": time.time(),
            "by": actor(),
            **({"commit": {"sign": self.commit}} if self.commit is not None else {}),
        }
        return journal | ({"merge": self.merge} if self.merge is not None else {})

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
        try:
            os.unlink(tmp, dir_fd=p)
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            raise BadInput(
                f"{t.path}: a folder {tmp} beside it is where apply copies the output; "
                "move it away and apply again"
            ) from None
        try:
            mode = stat.S_IMODE(os.stat(t.name, dir_fd=p, follow_symlinks=False).st_mode) & _NO_SPECIAL_BITS
        except FileNotFoundError:
            mode = None
        where = f"{self.source_path}/{t.path}"
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
            dst = os.open(tmp, _NEW_COPY, 0o666, dir_fd=p)
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
        except OSError as exc:
            if exc.errno in _MOUNT_ERRORS:
                raise _mount_fault(t, exc) from None
            raise
        if swapped:
            displaced = _hash_or_other(p, tmp, t.path)
            if displaced != t.before:
                exchange(p, tmp, p, t.name)  # the user's version goes back
                self._drop_copy(p, tmp, t)
                raise _Conflict(f"{t.path}: {_describe(displaced, t)} during the apply; that version is kept")
            try:
                rename_at(p, tmp, self.originals, original)
            except OSError as exc:
                exchange(p, tmp, p, t.name)  # the original goes back where it was
                self._drop_copy(p, tmp, t)
                if exc.errno in _MOUNT_ERRORS:
                    raise _mount_fault(t, exc) from None
                raise
            return
        # No atomic exchange on this filesystem: keep the original by a hard link, check
        # that it is the job's input, and rename the copy over it at once.
        try:
            os.link(t.name, original, src_dir_fd=p, dst_dir_fd=self.originals, follow_symlinks=False)
        except FileNotFoundError:
            raise _Conflict(f"{t.path}: was deleted during the apply") from None
        except OSError as exc:
            if exc.errno in _MOUNT_ERRORS:
                raise _mount_fault(t, exc) from None
            raise
        kept = _hash_or_other(self.originals, original, t.path)
        if kept != t.before:
            os.unlink(original, dir_fd=self.originals)
            raise _Conflict(f"{t.path}: {_describe(kept, t)} during the apply; that version is kept")
        try:
            rename_at(p, tmp, p, t.name)
        except OSError as exc:
            os.unlink(original, dir_fd=self.originals)
            if exc.errno in _MOUNT_ERRORS:
                raise _mount_fault(t, exc) from None
            raise

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
        the originals, the user's version caught mid-swap goes back, copies go. What is
        not a file under a temp name was not made by apply, and stays where it is."""
        for t in self.targets:
            p = self.parent(t)
            tmp = self.tmp(t)
            if p is None:
                continue
            held = _hash_or_other(p, tmp, t.path)
            if held is None or held == _OTHER:
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

    def roll_back(self, why: str) -> NoReturn:
        """Undo an interrupted apply that cannot be finished (`why`), all or nothing.

        Raises RolledBack naming what was restored and removed, or TornApply (nothing
        more written, the journal kept) when an original is missing or not the job's input.
        """
        try:
            self.root = self._keep(open_dir(self.layout.root))
            self._open_originals()
            self._settle_leftovers()
            undone = self._undo_all(why)
            self._remove_created()
        finally:
            self.close()
        kept = self._set_journal_aside()
        record_event(
            self.layout, "apply_rolled_back", self.job.key, reason=why[:500], **dataclasses.asdict(undone)
        )
        took_out = undone.restored or undone.removed
        kept_what = "Its journal, and what was taken out of the tree," if took_out else "Its journal"
        raise RolledBack(
            f"{self.job.key}: the interrupted apply cannot be finished: {why}; so it was rolled back "
            f"from the originals it kept: {undone.said()} {kept_what} is kept at {kept}"
        )

    def _set_journal_aside(self) -> str:
        """After a rollback: the journal joins the originals folder (which now holds what
        was taken out of the tree), and that goes to the job's evidence folder; where."""
        originals = self.layout.journal / self.job.key
        move(self.layout.journal_file(self.job.key), originals / "journal.json")
        aside = set_aside(self.layout, self.job.key, originals, "rolled-back")
        return str(aside.relative_to(self.layout.root))

    # --- rollback ------------------------------------------------------------------

    def _undo(self, exc: BaseException, pending: list[str], written: list[str]) -> None:
        """After a failure: remove the temp copies, put back every original this job
        replaced, remove the files it created and the folders it made; close the journal.

        Raises ApplyConflict for a conflict, naming what was written and what was not,
        and TornApply when what was written cannot be put back (the journal stays).
        """
        if self._originals is None:
            self._open_originals()
        self._settle_leftovers()  # a temp name may hold an original caught mid-swap
        undone = self._undo_all(f"apply stopped: {exc}")
        self._remove_created()
        _close_journal(self.layout, self.job.key)
        record_event(self.layout, "apply_rolled_back", self.job.key, reason=str(exc)[:500], left=undone.left)
        if not isinstance(exc, _Conflict):
            return
        advice = exc.advice.format(key=self.job.key)
        if self.resuming:
            raise RolledBack(
                f"{self.job.key}: apply stopped: {exc}. Rolled back from the originals it kept: "
                f"{undone.said()} {advice}"
            ) from None
        done = ", ".join(written) or "none"
        not_done = ", ".join(p for p in pending if p not in written) or "none"
        left = [(path, what) for path, what in undone.left if path in written]
        kept = f" Left as they are now: {_left(left)}." if left else ""
        raise ApplyConflict(
            f"{self.job.key}: apply stopped: {exc}. Written, then rolled back: {done}. "
            f"Never written: {not_done}.{kept} {advice}"
        ) from None

    def _undo_all(self, why: str) -> _Undone:
        """Every target at the output it was given goes back: an existing file to its
        original, which must hold the job's input; a new file out of the tree. All or
        nothing: any original missing or changed stops it before it writes, and a target
        that changes meanwhile undoes what it did (TornApply, either way)."""
        undone, todo, faults = _Undone(), [], []
        for t in reversed(self.targets):
            now = self.now(t)
            if t.before == t.after or now == t.before:
                continue
            if now != t.after:
                undone.left.append((t.path, _held(now)))
                continue
            fault = self._original_fault(t)
            if fault is not None:
                faults.append(fault)
            todo.append(t)
        if faults:
            self._torn(why, faults, "Nothing more was written")
        self.created = self._folders_of_new_paths()
        done: list[Target] = []
        try:
            for t in todo:
                self._take_out(t)
                done.append(t)
                (undone.restored if t.before is not None else undone.removed).append(t.path)
        except _Conflict as exc:
            self._torn(why, [str(exc), *self._put_all_in(done)], "What the rollback had done was undone")
        return undone

    def _put_all_in(self, done: list[Target]) -> list[str]:
        """Undo `_take_out` of each of `done`, last first; what could not be undone."""
        faults = []
        for t in reversed(done):
            try:
                self._put_in(t)
            except OSError as exc:
                faults.append(f"{t.path} could not be put back as it was ({exc.strerror})")
        return faults

    def _original_fault(self, t: Target) -> str | None:
        """Why the kept original of `t` cannot be put back; None for a new file, or when it
        holds exactly the bytes the job was minted on."""
        if t.before is None:
            return None
        original = str(t.index)
        kept = _hash_or_other(self.originals, original, t.path)
        if kept == t.before:
            return None
        what = "is missing" if kept is None else "does not hold the bytes the job was minted on"
        return (
            f"the original of {t.path}, {self.in_originals(original)}, {what} (sha256 {t.before[:12]}…): put "
            f"a copy of those bytes there (from git, if that commit has them)"
        )

    def _torn(self, why: str, faults: list[str], written: str) -> NoReturn:
        interrupted = "interrupted apply" if self.resuming else "apply"
        raise TornApply(
            f"{self.layout.journal_file(self.job.key)}: the {interrupted} can be neither finished nor "
            f"rolled back: {why}, and {'; '.join(faults)}. {written}; the journal stays where it is, "
            f"and genjob recover tries again"
        )

    def _take_out(self, t: Target) -> None:
        """Put `t` back as the job found it: its original swapped in (what it displaced kept
        as `<index>.after`), or the new file moved to `<index>.after`; each checked right
        after it acts, and put back as it was when the check fails."""
        p = self.parents[t.index]
        _check_parent(self.root, t, p)
        original, aside = str(t.index), f"{t.index}.after"
        try:
            if t.before is None:
                rename_at(p, t.name, self.originals, aside)
                if _hash_or_other(self.originals, aside, t.path) != t.after:
                    self._link_back(t, p, aside)
                    raise _Conflict(f"{t.path}: changed while it was rolled back; it is kept as it is")
            elif exchange(self.originals, original, p, t.name):
                taken_out = _hash_or_other(self.originals, original, t.path)
                put_in = _hash_or_other(p, t.name, t.path)
                if (taken_out, put_in) != (t.after, t.before):
                    exchange(self.originals, original, p, t.name)
                    raise _Conflict(f"{t.path}: changed while it was rolled back; it is kept as it is")
                rename_at(self.originals, original, self.originals, aside)
            else:
                os.link(t.name, aside, src_dir_fd=p, dst_dir_fd=self.originals, follow_symlinks=False)
                if _hash_or_other(self.originals, aside, t.path) != t.after:
                    os.unlink(aside, dir_fd=self.originals)
                    raise _Conflict(f"{t.path}: changed while it was rolled back; it is kept as it is")
                rename_at(self.originals, original, p, t.name)
                if _hash_or_other(p, t.name, t.path) != t.before:
                    self._put_in(t)
                    raise _Conflict(f"{t.path}: its original changed while it was rolled back")
        except OSError as exc:
            if exc.errno in _MOUNT_ERRORS:
                raise _mount_fault(t, exc) from None
            raise
        fsync_fd(p, t.path)

    def _link_back(self, t: Target, p: int, aside: str) -> None:
        """A file moved out of the tree goes back to its place, unless one was made there
        meanwhile (then it stays in the originals folder, and the conflict says where)."""
        try:
            os.link(aside, t.name, src_dir_fd=self.originals, dst_dir_fd=p, follow_symlinks=False)
        except FileExistsError:
            kept = self.in_originals(aside)
            raise _Conflict(
                f"{t.path}: changed while it was rolled back; what it held is kept at {kept}"
            ) from None
        os.unlink(aside, dir_fd=self.originals)

    def _put_in(self, t: Target) -> None:
        """Undo `_take_out(t)`: the output it took out goes back in, the original back aside."""
        p = self.parents[t.index]
        original, aside = str(t.index), f"{t.index}.after"
        if t.before is None:
            self._link_back(t, p, aside)
        elif exchange(self.originals, aside, p, t.name):
            rename_at(self.originals, aside, self.originals, original)
        else:
            os.link(t.name, original, src_dir_fd=p, dst_dir_fd=self.originals, follow_symlinks=False)
            rename_at(self.originals, aside, p, t.name)
        fsync_fd(p, t.path)

    def _folders_of_new_paths(self) -> list[str]:
        """The folders a rollback removes if they are empty: on a fresh run, those it made;
        after a crash, each folder on the way to a new path that holds none of the paths
        the job found in the tree. Top down."""
        if not self.resuming:
            return self.created
        existing = [t.path for t in self.targets if t.before is not None]
        folders: list[str] = []
        for t in (t for t in self.targets if t.before is None):
            for depth in range(1, len(t.folders) + 1):
                rel = "/".join(t.folders[:depth])
                if rel not in folders and not any(p.startswith(f"{rel}/") for p in existing):
                    folders.append(rel)
        return folders

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


def record_applied(
    layout: Layout,
    job: Job,
    targets: list[Target],
    changed: list[str],
    v: Verification,
    *,
    commit: dict[str, Any] | None = None,
    merged: dict[str, Any] | None = None,
) -> None:
    """The apply record; `commit`: the commit it asks for (`core.review.commit`); `merged`:
    what a merge applied over (`core.review.merge`)."""
    record = {
        "job": job.document(),
        "apply": {
            "at": time.time(),
            "by": actor(),
            "signer": v.signer,
            "signature_required": v.signature_required,
            "targets": [t.to_dict() for t in targets],
            "changed": changed,
            **({"commit": commit} if commit is not None else {}),
        }
        | ({"merged": merged} if merged is not None else {}),
    }
    path = layout.job_file("applied", job.key)
    create_exclusive(make_folder(path.parent, layout.gen) / path.name, canonical(record))
    close_applied(layout, job)
    record_event(layout, "applied", job.key, changed=changed, signer=v.signer)


def close_applied(layout: Layout, job: Job) -> None:
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
