"""Durable file operations: write-to-temp, fsync, rename, fsync the folder.

After CPython's Maildir: temp names are unique and opened with ``O_EXCL``; unlike it, the
folder is fsynced after every rename so the new name survives a power cut. A failed
fsync is never retried (a retried fsync can report success for lost data): the
operation fails with `DurabilityError` and leaves its target as it was.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from core.errors import BadInput, DurabilityError

TMP_PREFIX = ".tmp-"


def fsync_fd(fd: int, what: Path) -> None:
    try:
        os.fsync(fd)
    except OSError as exc:
        raise DurabilityError(f"{what}: fsync failed ({exc.strerror}); nothing was committed") from None


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync_fd(fd, folder)
    finally:
        os.close(fd)


def _write_temp(folder: Path, data: bytes | Iterable[bytes], mode: int = 0o644, durable: bool = True) -> Path:
    tmp = folder / f"{TMP_PREFIX}{secrets.token_hex(8)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        for chunk in (data,) if isinstance(data, bytes) else data:
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
        if durable:
            fsync_fd(fd, tmp)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    return tmp


def atomic_write(path: Path, data: bytes | Iterable[bytes], mode: int = 0o644, durable: bool = True) -> None:
    """Replace `path` with `data` (bytes, or chunks of them made as they are written) so
    that readers see the old or the new bytes, never a mix.

    `durable=False` skips the fsyncs, for files whose loss is safe (a lease: a job
    without one reads as orphaned and is requeued).
    """
    tmp = _write_temp(path.parent, data, mode, durable)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)


def create_exclusive(path: Path, data: bytes, mode: int = 0o644) -> bool:
    """Create `path` with `data` only if no file has that name; True if this call made it.

    The bytes are made durable under a temp name first and then hard-linked into place,
    so `path` appears whole or not at all, and an existing file is never replaced.
    """
    tmp = _write_temp(path.parent, data, mode)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return True


def move(src: Path, dst: Path, sync_source: bool = True) -> None:
    """Rename `src` to `dst` (one filesystem) and make the folders durable.

    Raises FileNotFoundError when `src` is gone (someone else moved it first) and
    FileExistsError when `dst` already exists: a rename never replaces a job file.
    """
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, "target exists", str(dst))
    try:
        os.rename(src, dst)
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            raise DurabilityError(f"{src} and {dst} are on different filesystems") from None
        raise
    fsync_dir(dst.parent)
    if sync_source and src.parent != dst.parent:
        fsync_dir(src.parent)


def append_line(path: Path, line: bytes, durable: bool = False) -> None:
    """Append one line with a single write to an O_APPEND file (fsynced when `durable`).

    Only to a regular file: opened without blocking, a FIFO put in its place is refused
    (BadInput) instead of waiting for a reader forever.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.ELOOP):
            raise BadInput(f"{path}: not a regular file; nothing appended") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BadInput(f"{path}: not a regular file; nothing appended")
        os.write(fd, line if line.endswith(b"\n") else line + b"\n")
        if durable:
            fsync_fd(fd, path)
    finally:
        os.close(fd)


@contextlib.contextmanager
def flocked(path: Path, blocking: bool = True) -> Iterator[bool]:
    """Hold an exclusive advisory lock on `path` (created if needed) for the block.

    Yields False instead of waiting when `blocking` is False and someone else holds it.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def remove_stale_temps(folder: Path) -> list[Path]:
    """Remove leftover temp files of interrupted writes in `folder`; return what was removed."""
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(folder):
            if entry.name.startswith(TMP_PREFIX) and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed
