"""The scratch tree a check runs in: never the operator's tree.

It holds the repository as it is now — the files git tracks (``git ls-files``; in a
folder that is no git work tree at all, every file but ``.gen/`` and ``.git/``; where git
fails in one, no tree and no check) and the job's inputs, each at its minted hash — with
the receipt's verified outputs written in. It lives under
``.gen/scratch/<id>/`` and is removed when the run ends, whatever happens; a run that
was killed leaves it behind for the next run's `sweep`.

Two ways to make it:
 - ``overlay``: a farm of hard links to the tracked files (cheap: one link each, on the
   repository's own filesystem), later seen by the check through an overlay whose
   writes stay in memory (`core.review.sandbox.Overlay`), so writing to a linked file never
   reaches the original. Only files owned by the operator are linked (the overlay copies
   a file up under its owner, which must exist in the sandbox's user namespace); others
   are copied.
 - ``copy``: every file copied. Used when the overlay cannot be mounted here, and always
   when the check runs unsandboxed (a hard link would let it write the original).

Either way the job's inputs and outputs are copied, never linked, through directory
descriptors (`core.store.tree`), and hashed as they are copied: an input that is not at its
minted hash makes the job stale, an output that is not at the receipt's hash fails.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from core.errors import BadInput, GenjobError, Stale, VerificationFailed
from core.model.models import Job, Receipt
from core.store.durable import folder
from core.store.layout import GEN, Layout
from core.store.tree import closing, copy_hashing, open_folder, open_regular

Mode = Literal["overlay", "copy"]
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_LOCK_FILE = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_NO_SPECIAL_BITS = ~(stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX) & 0o7777
# A scratch folder with no lock beside it, older than this, was left by a crash.
ORPHAN_AGE = 60.0
SKIP_TOP = frozenset({GEN, ".git"})


@dataclass
class Scratch:
    """A scratch tree, made: where it is and how it was made.

    base: each allowed path's hash as laid down before the outputs (None: absent).
    outputs: each output path's hash, as copied in.
    """

    run_dir: Path
    tree: Path
    mode: Mode
    base: dict[str, str | None] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    linked: int = 0
    copied: int = 0

    @property
    def mount_point(self) -> Path:
        """An empty folder for the overlay's memory filesystem (overlay mode)."""
        return self.run_dir / "mnt"

    @property
    def home(self) -> Path:
        """An empty HOME for a check run unsandboxed, outside the tree."""
        return self.run_dir / "home"


def tracked_files(root: Path) -> list[str] | None:
    """The files git tracks under `root` (submodules' too), or None outside a git work tree."""
    return git_files(
        root,
        ["--recurse-submodules"],
        "the check did not run: it gets the files git tracks, and never every file (your "
        "untracked ones, such as .env, with them)",
    )


def git_files(root: Path, options: Sequence[str], refused: str) -> list[str] | None:
    """What ``git ls-files`` lists under `root` with `options`; None when `root` lies in no
    git work tree at all (no `.git` in it or above it).

    When git fails in one (it refuses a repository another user owns: "dubious
    ownership"), GenjobError with git's own words, which say how to fix it, and
    `refused`, what was not done because of it: a walk of every file instead would
    hand out the files git was to leave out.
    """
    if not _in_git_work_tree(root):
        return None
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", *options], capture_output=True, check=False
        )
    except OSError as exc:
        raise GenjobError(
            f"{root}: a git work tree, but git cannot be run ({exc.strerror}); {refused}"
        ) from None
    if proc.returncode != 0:
        words = " ".join(proc.stderr.decode(errors="replace").split()) or f"exit status {proc.returncode}"
        raise GenjobError(
            f"{root}: git ls-files failed, so which files git tracks is unknown; {refused}. git: {words}"
        )
    return [os.fsdecode(p) for p in proc.stdout.split(b"\0") if p]


def _in_git_work_tree(root: Path) -> bool:
    """Whether git takes `root` for part of a work tree: a `.git` in it or a folder above
    it, or a repository named by GIT_DIR."""
    if os.environ.get("GIT_DIR"):
        return True
    here = Path(os.path.abspath(root))
    return any(os.path.lexists(folder / ".git") for folder in (here, *here.parents))


def all_files(root_fd: int) -> list[str]:
    """Every entry under the folder `root_fd` but `.gen/` and `.git/`, links not followed."""
    found: list[str] = []
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(".", dir_fd=root_fd, follow_symlinks=False):
        rel = "" if dirpath == "." else dirpath[2:] + "/"
        if dirpath == ".":
            dirnames[:] = [d for d in dirnames if d not in SKIP_TOP]
        for name in list(dirnames):
            if stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
                found.append(rel + name)  # a link to a folder: kept as a link, not entered
                dirnames.remove(name)
        found.extend(rel + name for name in filenames)
    return sorted(found)


def _plain(rel: str) -> list[str] | None:
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts) or parts[0] in SKIP_TOP:
        return None
    return parts


class _Chain:
    """Descriptors of the folders on the way to the current file, reused from one file to
    the next (paths come sorted, so siblings share them): few opens, few descriptors."""

    def __init__(self, root_fd: int, where: str, create: bool) -> None:
        self.fds = [root_fd]
        self.parts: list[str] = []
        self.where = where
        self.create = create

    def enter(self, parts: list[str]) -> int:
        common = 0
        while common < min(len(parts), len(self.parts)) and parts[common] == self.parts[common]:
            common += 1
        while len(self.parts) > common:
            self.parts.pop()
            os.close(self.fds.pop())
        for part in parts[common:]:
            fd = open_folder(self.fds[-1], [part], f"{self.where}/{part}", [] if self.create else None)
            self.fds.append(fd)
            self.parts.append(part)
        return self.fds[-1]

    def close(self) -> None:
        while len(self.fds) > 1:
            os.close(self.fds.pop())
        self.parts.clear()


class _Builder:
    """Lays the files down in the scratch tree, from open descriptors of both trees."""

    def __init__(self, scratch: Scratch, root_fd: int, tree_fd: int, root: Path) -> None:
        self.scratch = scratch
        self.src = _Chain(root_fd, str(root), create=False)
        self.dst = _Chain(tree_fd, str(scratch.tree), create=True)
        self.uid, self.gid = os.geteuid(), os.getegid()

    def close(self) -> None:
        self.src.close()
        self.dst.close()

    def place(self, rel: str) -> None:
        """Link or copy one file of the tree; one that is gone, or reached through a link,
        is left out (the repository as it is now)."""
        parts = _plain(rel)
        if parts is None:
            return
        try:
            src = self.src.enter(parts[:-1])
            st = os.stat(parts[-1], dir_fd=src, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError, BadInput):
            return
        name = parts[-1]
        if stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(name, dir_fd=src), name, dir_fd=self.dst.enter(parts[:-1]))
            self.scratch.copied += 1
        elif stat.S_ISREG(st.st_mode):
            dst = self.dst.enter(parts[:-1])
            if self._link(src, dst, name, st):
                self.scratch.linked += 1
            else:
                self._copy(src, dst, name, rel)
                self.scratch.copied += 1

    def _link(self, src: int, dst: int, name: str, st: os.stat_result) -> bool:
        if self.scratch.mode != "overlay" or (st.st_uid, st.st_gid) != (self.uid, self.gid):
            return False
        try:
            os.link(name, name, src_dir_fd=src, dst_dir_fd=dst, follow_symlinks=False)
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.EACCES, errno.EXDEV, errno.EMLINK, errno.EOPNOTSUPP):
                return False
            raise
        return True

    def _copy(self, src: int, dst: int, name: str, where: str) -> None:
        try:
            opened = open_regular(src, name, where)
        except BadInput:
            return  # swapped for something else since it was listed
        if opened is None:
            return
        in_fd, st = opened
        with closing(in_fd):
            out_fd = os.open(name, _NEW_FILE, st.st_mode & _NO_SPECIAL_BITS, dir_fd=dst)
            with closing(out_fd):
                _copy_fd(in_fd, out_fd, st.st_size)

    def input_copy(self, rel: str, limit: int) -> str | None:
        """Copy the job's input `rel`, hashing it as it is copied; its hash (None: absent)."""
        parts = rel.split("/")
        try:
            src = self.src.enter(parts[:-1])
            opened = open_regular(src, parts[-1], rel)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if opened is None:
            return None
        in_fd, st = opened
        with closing(in_fd):
            dst = self.dst.enter(parts[:-1])
            out_fd = os.open(parts[-1], _NEW_FILE, st.st_mode & _NO_SPECIAL_BITS, dir_fd=dst)
            with closing(out_fd):
                return copy_hashing(in_fd, out_fd, limit, rel)

    def output_copy(self, out_fd: int, rel: str, limit: int, where: Path) -> str:
        """Write the receipt's output `rel`, hashing it as it is copied, with the mode of
        the file it replaces in the tree (a new file: 0644)."""
        parts = rel.split("/")
        source = f"{where}/{rel}"
        try:
            src_parent = open_folder(out_fd, parts[:-1], source)
        except FileNotFoundError:
            raise VerificationFailed(f"{source}: gone since verification; the check did not run") from None
        with closing(src_parent):
            opened = open_regular(src_parent, parts[-1], source)
            if opened is None:
                raise VerificationFailed(f"{source}: gone since verification; the check did not run")
            in_fd, _ = opened
            with closing(in_fd):
                out = os.open(
                    parts[-1], _NEW_FILE, self._mode_in_tree(parts), dir_fd=self.dst.enter(parts[:-1])
                )
                with closing(out):
                    return copy_hashing(in_fd, out, limit, source)

    def _mode_in_tree(self, parts: list[str]) -> int:
        try:
            st = os.stat(parts[-1], dir_fd=self.src.enter(parts[:-1]), follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError, BadInput):
            return 0o644
        return stat.S_IMODE(st.st_mode) & _NO_SPECIAL_BITS if stat.S_ISREG(st.st_mode) else 0o644


def _copy_fd(src: int, dst: int, size: int) -> None:
    """Copy a whole file, in the kernel where it can (a reflink, on filesystems that have them)."""
    left = size
    try:
        while left > 0:
            n = os.copy_file_range(src, dst, left)
            if n == 0:
                break
            left -= n
        while chunk := os.read(src, 1 << 20):  # grown since it was opened
            os.write(dst, chunk)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise
        os.lseek(src, 0, os.SEEK_SET)
        os.lseek(dst, 0, os.SEEK_SET)
        os.ftruncate(dst, 0)
        while chunk := os.read(src, 1 << 20):
            view = memoryview(chunk)
            while view:
                view = view[os.write(dst, view) :]


@contextlib.contextmanager
def scratch_tree(
    layout: Layout, job: Job, receipt: Receipt, mode: Mode, limit: int, *, out: Path | None = None
) -> Iterator[Scratch]:
    """Make the scratch tree for `job`'s verified `receipt`; remove it when the block ends.
    The outputs are read from `out`, a folder below `.gen/` (default: the job's
    `out/<digest>/`; a candidate's `candidates/<key>/<n>/out/`).

    Raises `Stale` when an input is not at its minted hash, and `VerificationFailed`
    when an output is not at the receipt's hash (both: nothing is left behind).
    """
    with _run_folder(layout) as run_dir:
        scratch = Scratch(run_dir, run_dir / "tree", mode)
        for sub in (scratch.tree, scratch.mount_point, scratch.home):
            os.mkdir(sub, 0o700 if sub != scratch.tree else 0o755)
        _populate(layout, job, receipt, scratch, limit=limit, out=out or layout.out_dir(job.digest))
        yield scratch


def _populate(layout: Layout, job: Job, receipt: Receipt, scratch: Scratch, *, limit: int, out: Path) -> None:
    listed = tracked_files(layout.root)
    with folder(layout.root) as root_fd, folder(scratch.tree) as tree_fd:
        entries = listed if listed is not None else all_files(root_fd)
        allowed = set(job.allowed_paths)
        build = _Builder(scratch, root_fd, tree_fd, layout.root)
        try:
            for rel in entries:
                if rel not in allowed:
                    build.place(rel)
            _inputs(build, job, receipt, scratch, limit)
            _outputs(layout, build, receipt, scratch, limit=limit, out_dir=out)
        finally:
            build.close()


def _inputs(build: _Builder, job: Job, receipt: Receipt, scratch: Scratch, limit: int) -> None:
    """The job's inputs that no output replaces, copied and checked against their minted
    hashes (the others were checked by verification moments ago)."""
    for rel in sorted(job.allowed_paths):
        want = job.input_digest(rel)
        scratch.base[rel] = want
        if rel in receipt.outputs or want is None:
            continue
        try:
            got = build.input_copy(rel, limit)
        except BadInput as exc:
            got, why = None, str(exc)
        else:
            why = f"{rel}: {'deleted' if got is None else 'changed'} since the job was minted"
        if got != want:
            raise Stale(
                f"{job.key}: {why}; the check did not run. "
                f"Replay it against the current tree: genjob replay {job.key}"
            )


def _outputs(
    layout: Layout, build: _Builder, receipt: Receipt, scratch: Scratch, *, limit: int, out_dir: Path
) -> None:
    with folder(layout.gen) as gen:
        out_fd = open_folder(gen, list(out_dir.relative_to(layout.gen).parts), str(out_dir))
    with closing(out_fd):
        for rel, want in sorted(receipt.outputs.items()):
            got = build.output_copy(out_fd, rel, limit, out_dir)
            if got != want:
                raise VerificationFailed(
                    f"{out_dir}/{rel}: not the bytes the receipt names (changed since verification); "
                    "the check did not run"
                )
            scratch.outputs[rel] = got


@contextlib.contextmanager
def _run_folder(layout: Layout) -> Iterator[Path]:
    """A new `.gen/scratch/<id>/`, locked (`<id>.lock`) while in use, removed afterwards."""
    with folder(layout.gen) as gen:
        base_fd = open_folder(gen, ["scratch"], str(layout.scratch), [])
    with closing(base_fd):
        sweep(layout)
        while True:
            name = f"{int(time.time())}-{secrets.token_hex(6)}"
            lock_fd = os.open(f"{name}.lock", _LOCK_FILE, 0o600, dir_fd=base_fd)
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
            if os.fstat(lock_fd).st_nlink:
                break
            os.close(lock_fd)  # a sweep took it for a dead run's before it was locked
        with closing(lock_fd):
            os.mkdir(name, 0o700, dir_fd=base_fd)
            try:
                yield layout.scratch / name
            finally:
                remove(layout.scratch / name)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{name}.lock", dir_fd=base_fd)


def sweep(layout: Layout) -> list[Path]:
    """Remove the scratch folders of runs that are over (their lock is free); return them."""
    try:
        names = set(os.listdir(layout.scratch))
    except FileNotFoundError:
        return []
    removed = []
    for name in sorted(names):
        path = layout.scratch / name
        if name.endswith(".lock"):
            lock_fd = _lock_if_free(path)
            if lock_fd is None:
                continue
            # Held while its run's folder and the lock go: a run that opened this lock but
            # had not locked it yet waits, then sees it unlinked and takes another name.
            with closing(lock_fd):
                run = layout.scratch / name[: -len(".lock")]
                if os.path.lexists(run):
                    remove(run)
                    removed.append(run)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        elif f"{name}.lock" not in names:
            with contextlib.suppress(FileNotFoundError):
                if time.time() - os.lstat(path).st_mtime > ORPHAN_AGE:
                    remove(path)
                    removed.append(path)
    return removed


def _lock_if_free(path: Path) -> int | None:
    """The lock at `path`, taken, when no run holds it (its run is over); else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def remove(path: Path) -> None:
    """Remove a scratch folder and all in it, whatever a check did to its modes; never
    following a link out of it."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
        return

    def retry(func: object, failed: str, _exc: object) -> None:
        # A folder the check made unwritable or unreadable: give it back its owner's rights.
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed), 0o700)
        with contextlib.suppress(OSError):
            if os.path.isdir(failed) and not os.path.islink(failed):
                os.chmod(failed, 0o700)
        if callable(func):
            func(failed)

    try:
        shutil.rmtree(path, onerror=retry)
    except RecursionError:
        # Folders nested deeper than Python recurses: rm walks any depth.
        subprocess.run(["chmod", "-R", "u+rwX", "--", str(path)], capture_output=True, check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], capture_output=True, check=False)
    except OSError as exc:
        raise GenjobError(f"{path}: cannot remove this scratch tree ({exc.strerror})") from None
    if os.path.lexists(path):
        raise GenjobError(f"{path}: cannot remove this scratch tree; remove it by hand")
