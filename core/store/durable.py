"""Durable file operations: write-to-temp, fsync, rename, fsync the folder.

After CPython's Maildir: temp names are unique and opened with ``O_EXCL``; unlike it, the
folder is fsynced after every rename so the new name survives a power cut. A failed
fsync is never retried (a retried fsync can report success for lost data): the
operation fails with `DurabilityError` and leaves its target as it was.

Every operation works inside one folder opened once with ``O_DIRECTORY | O_NOFOLLOW``
(its descriptor is used for the create, link and rename), so a folder that was swapped
for a symlink is refused at the moment of the write instead of being written through.
An environment fault (a full disk, a read-only mount, no permission, a quota) is raised
as `DurabilityError` naming the file and the fault; nothing is left half-written.

Every rename under `.gen/` goes through here. `rename_at` and `rename` are the bare
ones, for steps that check what they moved and sync the folder themselves.

Every file made here has an explicit mode (`FILE_MODE` unless it is secret), as every
folder under `.gen/` is made by `core.store.tree.make_folder` with `DIR_MODE`: see there.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from core.errors import BadInput, DurabilityError
from core.store.tree import FILE_MODE

TMP_PREFIX = ".tmp-"
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

_ENVIRONMENT = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EIO: "input/output error",
}


def environment_fault(exc: OSError, what: Path | str) -> DurabilityError | None:
    """The one-line error for a fault of the machine rather than of genjob's input."""
    why = _ENVIRONMENT.get(exc.errno or 0)
    if why is None:
        return None
    return DurabilityError(f"{what}: {why}; nothing was changed there")


@contextlib.contextmanager
def folder(path: Path) -> Iterator[int]:
    """The folder `path`, open for `*_at` operations; a symlink or non-folder is refused."""
    try:
        fd = os.open(path, DIR_FLAGS)
    except OSError as exc:
        raise _folder_fault(exc, path) from None
    try:
        yield fd
    finally:
        os.close(fd)


def _folder_fault(exc: OSError, path: Path) -> Exception:
    """What opening the folder `path` failed with, said once for every caller."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return BadInput(f"{path}: not a real folder (a symlink or a file); nothing written there")
    return environment_fault(exc, path) or exc


def fsync_fd(fd: int, what: Path | str) -> None:
    try:
        os.fsync(fd)
    except OSError as exc:
        raise DurabilityError(f"{what}: fsync failed ({exc.strerror}); nothing was committed") from None


def fsync_dir(path: Path) -> None:
    with folder(path) as fd:
        fsync_fd(fd, path)


def write_all(fd: int, data: bytes | Iterable[bytes]) -> None:
    """Every byte of `data` to `fd`, however little each write takes."""
    for chunk in (data,) if isinstance(data, bytes) else data:
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]


@contextlib.contextmanager
def temp_at(
    dir_fd: int, data: bytes | Iterable[bytes], where: Path, mode: int = FILE_MODE, durable: bool = True
) -> Iterator[str]:
    """A new uniquely named temp file in `dir_fd` holding `data`, locked for the block.

    The temp file is locked (``flock``) from the moment it exists until the block ends,
    so `remove_stale_temps` can tell an abandoned temp file (no lock: its writer died)
    from one whose write is in progress. If the block leaves it under its temp name,
    it is removed.
    """
    while True:
        # What `secrets.token_hex(8)` returns, without importing `secrets` (and with it
        # `random`, `hmac` and `base64`) into every process that lists jobs.
        name = f"{TMP_PREFIX}{os.urandom(8).hex()}"
        try:
            fd = os.open(name, _NEW_FILE, mode, dir_fd=dir_fd)
        except OSError as exc:
            raise environment_fault(exc, where) or exc from None
        fcntl.flock(fd, fcntl.LOCK_EX)
        if os.fstat(fd).st_nlink:
            break
        os.close(fd)  # removed by a sweep between its creation and the lock: make another
    try:
        try:
            write_all(fd, data)
        except OSError as exc:
            raise environment_fault(exc, where) or exc from None
        if durable:
            fsync_fd(fd, where)
        yield name
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dir_fd)
        os.close(fd)


def atomic_write_at(
    dir_fd: int,
    name: str,
    data: bytes | Iterable[bytes],
    where: Path,
    mode: int = FILE_MODE,
    durable: bool = True,
) -> None:
    """`atomic_write` into the folder `dir_fd`."""
    with temp_at(dir_fd, data, where, mode, durable) as tmp:
        try:
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError as exc:
            raise environment_fault(exc, where) or exc from None
    if durable:
        fsync_fd(dir_fd, where.parent)


def atomic_write(
    path: Path, data: bytes | Iterable[bytes], mode: int = FILE_MODE, durable: bool = True
) -> None:
    """Replace `path` with `data` (bytes, or chunks of them made as they are written) so
    that readers see the old or the new bytes, never a mix.

    `durable=False` skips the fsyncs, for files whose loss is safe (a lease: a job
    without one reads as orphaned and is requeued).
    """
    with folder(path.parent) as fd:
        atomic_write_at(fd, path.name, data, path, mode, durable)


def create_exclusive_at(dir_fd: int, name: str, data: bytes, where: Path, mode: int = FILE_MODE) -> bool:
    """`create_exclusive` into the folder `dir_fd`."""
    with temp_at(dir_fd, data, where, mode) as tmp:
        try:
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
        except FileExistsError:
            return False
        except OSError as exc:
            raise environment_fault(exc, where) or exc from None
    fsync_fd(dir_fd, where.parent)
    return True


def create_exclusive(path: Path, data: bytes, mode: int = FILE_MODE) -> bool:
    """Create `path` with `data` only if no file has that name; True if this call made it.

    The bytes are made durable under a temp name first and then hard-linked into place,
    so `path` appears whole or not at all, and an existing file is never replaced.
    """
    with folder(path.parent) as fd:
        return create_exclusive_at(fd, path.name, data, path, mode)


def move(src: Path, dst: Path, sync_source: bool = True) -> None:
    """Rename `src` to `dst` (one filesystem) and make the folders durable.

    Raises FileNotFoundError when `src` is gone (someone else moved it first) and
    FileExistsError when `dst` already exists: a rename never replaces a job file.
    """
    with folder(src.parent) as src_fd, folder(dst.parent) as dst_fd:
        move_at(src_fd, src.name, dst_fd, dst.name, dst, sync_source and src.parent != dst.parent)


def move_at(src_fd: int, src: str, dst_fd: int, dst: str, where: Path, sync_source: bool = True) -> None:
    """`move` between two open folders."""
    try:
        os.stat(dst, dir_fd=dst_fd, follow_symlinks=False)
    except FileNotFoundError:
        pass
    else:
        raise FileExistsError(errno.EEXIST, "target exists", str(where))
    try:
        os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            raise DurabilityError(f"{src} and {where} are on different filesystems") from None
        raise environment_fault(exc, where) or exc from None
    fsync_fd(dst_fd, where.parent)
    if sync_source:
        fsync_fd(src_fd, where.parent)


def rename_at(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
    """Rename `src` in the folder `src_fd` to `dst` in the folder `dst_fd`: one ``renameat``.

    Unlike `move_at`, an existing `dst` is replaced and nothing is fsynced: for a step that
    checks what it moved and syncs the folder itself once the step is done (apply's moves
    between the tree and `.gen/journal/<key>/`, under the state lock). A fault is raised
    as the OSError it is.
    """
    os.rename(src, dst, src_dir_fd=src_fd, dst_dir_fd=dst_fd)


def rename(src: Path, dst: Path) -> None:
    """`rename_at` by path: `dst` is replaced, nothing is fsynced. For undoing a rename
    whose loss in a crash is safe (a refused claim put back in the queue: a job left in
    `running/` without a lease soon reads as ORPHANED, and can be requeued)."""
    os.rename(src, dst)


def append_line(path: Path, line: bytes, durable: bool = False) -> None:
    """Append one line with a single write to an O_APPEND file (fsynced when `durable`).

    Only to a regular file: opened without blocking, a FIFO put in its place is refused
    (BadInput) instead of waiting for a reader forever.
    """
    with folder(path.parent) as dir_fd:
        try:
            fd = os.open(
                path.name,
                os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                FILE_MODE,
                dir_fd=dir_fd,
            )
        except OSError as exc:
            if exc.errno in (errno.ENXIO, errno.ELOOP):
                raise BadInput(f"{path}: not a regular file; nothing appended") from None
            raise environment_fault(exc, path) or exc from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadInput(f"{path}: not a regular file; nothing appended")
        try:
            os.write(fd, line if line.endswith(b"\n") else line + b"\n")
        except OSError as exc:
            raise environment_fault(exc, path) or exc from None
        if durable:
            fsync_fd(fd, path)
    finally:
        os.close(fd)


@contextlib.contextmanager
def flocked(path: Path, blocking: bool = True) -> Iterator[bool]:
    """Hold an exclusive advisory lock on `path` (created if needed) for the block.

    Yields False instead of waiting when `blocking` is False and someone else holds it.
    """
    with folder(path.parent) as dir_fd:
        try:
            fd = os.open(
                path.name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE, dir_fd=dir_fd
            )
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise BadInput(f"{path}: a symlink, not the lock file") from None
            raise environment_fault(exc, path) or exc from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def remove_stale_temps(path: Path) -> list[Path]:
    """Remove the temp files of interrupted writes in `path`; return what was removed.

    A temp file is removed only when its lock can be taken at once: its writer is gone.
    One whose write is in progress in another process (a mint, a cancel request, a cache
    save) is left alone.
    """
    try:
        with folder(path) as dir_fd:
            return _remove_abandoned_temps(dir_fd, path)
    except (FileNotFoundError, BadInput):
        return []


def _remove_abandoned_temps(dir_fd: int, path: Path) -> list[Path]:
    removed = []
    for name in os.listdir(dir_fd):
        if not name.startswith(TMP_PREFIX):
            continue
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dir_fd)
                removed.append(path / name)
        finally:
            os.close(fd)
    return removed
