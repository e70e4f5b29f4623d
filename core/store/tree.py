"""Files below a folder, reached only through directory descriptors.

Apply must never write outside the repository, whatever happens to the tree while it
runs. A path checked once and used later loses to a racing writer: a parent folder can
be a symlink by the time it is used. So every folder on the way to a file is opened
relative to the one above it with ``O_DIRECTORY | O_NOFOLLOW``, and every later open,
mkdir, link and rename is made relative to that descriptor (``dir_fd=``): a component
swapped for a symlink at any moment is refused, never followed. Files are opened with
``O_NOFOLLOW | O_NONBLOCK`` and must be regular, so a FIFO put in a file's place is
refused instead of blocking, and a link is refused instead of read.

Every folder genjob makes under `.gen/` is made here (`make_folder`, or `open_folder`
asked to make what is missing) with `DIR_MODE`, and every file with an explicit mode
(`FILE_MODE` unless it is secret): a mode given to mkdir or open is only ever narrowed
by the umask, so under any umask nothing genjob makes there is writable by the group or
by others. A folder that a fresh clone or an archive dropped (neither keeps an empty
folder) is made again by whoever writes into it.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.errors import BadInput

# What genjob makes under `.gen/`: writable by its owner only.
DIR_MODE = 0o755
FILE_MODE = 0o644
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CHUNK = 1 << 20
# The block `hash_fd` reads at a time (measured: 4 MiB hashes at the speed of `openssl dgst`).
HASH_BLOCK = 4 << 20

Identity = tuple[int, int]  # (st_dev, st_ino): what a folder is, wherever it has moved


def identity(fd: int) -> Identity:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def open_dir(path: Path | str) -> int:
    """Open a folder that the caller trusts by its path (the repository root, `.gen/`):
    a symlink at its last component is refused all the same."""
    try:
        return os.open(path, DIR_FLAGS)
    except OSError as exc:
        raise BadInput(f"{path}: cannot open as a folder ({_why(exc)})") from None


def _why(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "it is a symlink"
    if exc.errno == errno.ENOTDIR:
        return "it is not a folder"
    return exc.strerror or str(exc)


def open_folder(base_fd: int, parts: list[str], where: str, created: list[str] | None = None) -> int:
    """Open the folder `parts` below `base_fd`, one component at a time, never through a link.

    With `created` given, a missing folder is made (`DIR_MODE`) and its relative path appended
    to `created`; without it, a missing folder raises FileNotFoundError. A component that
    is a symlink or not a folder raises BadInput naming `where` and the component.
    """
    fd = os.dup(base_fd)
    done: list[str] = []
    try:
        for part in parts:
            done.append(part)
            try:
                next_fd = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if created is None:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, DIR_MODE, dir_fd=fd)
                    created.append("/".join(done))
                next_fd = _open_sub(fd, part, where, done)
            except OSError as exc:
                raise _refused(where, done, exc, fd) from None
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


def make_folder(path: Path, anchor: Path) -> Path:
    """`path`, a folder inside `anchor` (one the caller trusts by its path, such as `.gen/`),
    made with `DIR_MODE` where missing, every folder from `anchor` down reached through
    the descriptor of the one above it; a link or a file on the way raises BadInput."""
    parts = list(path.relative_to(anchor).parts)
    base = open_dir(anchor)
    try:
        os.close(open_folder(base, parts, str(path), []))
    finally:
        os.close(base)
    return path


def _open_sub(fd: int, part: str, where: str, done: list[str]) -> int:
    try:
        return os.open(part, DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        raise _refused(where, done, exc, fd) from None


def _refused(where: str, done: list[str], exc: OSError, dir_fd: int) -> BadInput:
    what = _why(exc)
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        what = f"is {_kind_at(dir_fd, done[-1])}, not a folder"
    return BadInput(f"{where}: {'/'.join(done)} {what}; nothing is done through it")


def open_regular(dir_fd: int, name: str, where: str) -> tuple[int, os.stat_result] | None:
    """Open a regular file for reading; None when there is none by that name.

    A symlink, FIFO, device, socket or folder by that name raises BadInput.
    """
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
            raise BadInput(f"{where}: {_kind_at(dir_fd, name)}, not a regular file") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise BadInput(f"{where}: {_kind(st.st_mode)}, not a regular file")
    return fd, st


def _kind_at(dir_fd: int, name: str) -> str:
    try:
        return _kind(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return "not readable"


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "a file"
    for test, what in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return what
    return "a special file"


def hash_fd(fd: int, limit: int | None = None, where: str = "") -> str:
    """sha256 of what is left to read from `fd`; over `limit` bytes raises BadInput.

    Read into one reused buffer of `HASH_BLOCK` bytes: no allocation per block, and
    blocks large enough that hashing, not system calls, is what takes the time.
    """
    h = hashlib.sha256()
    buffer = bytearray(HASH_BLOCK)
    view = memoryview(buffer)
    size = 0
    while n := os.readv(fd, [buffer]):
        size += n
        if limit is not None and size > limit:
            raise BadInput(f"{where}: over the {limit}-byte limit")
        h.update(view[:n])
    return h.hexdigest()


def read_fd(fd: int, limit: int, where: str) -> bytes:
    """The rest of `fd`, at most `limit` bytes (more raises BadInput)."""
    chunks = []
    size = 0
    while chunk := os.read(fd, min(CHUNK, limit + 1 - size) or 1):
        size += len(chunk)
        if size > limit:
            raise BadInput(f"{where}: over the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


def hash_at(dir_fd: int, name: str, where: str) -> str | None:
    """sha256 of the regular file `name` in `dir_fd`; None when there is none."""
    opened = open_regular(dir_fd, name, where)
    if opened is None:
        return None
    fd, _ = opened
    try:
        return hash_fd(fd)
    finally:
        os.close(fd)


def copy_hashing(src_fd: int, dst_fd: int, limit: int, where: str) -> str:
    """Copy `src_fd` to `dst_fd` (from their current offsets); return the sha256 of the
    bytes copied, hashed as they are copied. Over `limit` bytes raises BadInput."""
    h = hashlib.sha256()
    size = 0
    while chunk := os.read(src_fd, CHUNK):
        size += len(chunk)
        if size > limit:
            raise BadInput(f"{where}: over the {limit}-byte limit")
        h.update(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst_fd, view) :]
    return h.hexdigest()


@contextlib.contextmanager
def closing(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


# renameat2(2) with RENAME_EXCHANGE swaps two names atomically: what was at the target
# comes out under the other name, so apply can check exactly the bytes it displaced.
# ctypes is loaded on the first swap: every command that reads `.gen/` imports this module.
_RENAME_EXCHANGE = 2


@functools.cache
def _renameat2() -> Any:
    """libc's renameat2, or None (the process's own symbols include libc's)."""
    import ctypes

    return getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)


def exchange(dir_a: int, a: str, dir_b: int, b: str) -> bool:
    """Swap the entries `a` (in folder `dir_a`) and `b` (in `dir_b`) in one atomic step;
    False when this system or filesystem cannot (the caller then checks and renames)."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    if renameat2(dir_a, os.fsencode(a), dir_b, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    import ctypes

    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), b)
