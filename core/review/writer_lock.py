"""One writer: every apply of a repository's tree runs under `.gen/apply.lock`.

An exclusive `fcntl.flock` on that file, held for the whole apply (its commit too), by
the CLI's `apply`, the board's approve (both call `core.review.apply.apply_job`), `apply
--ready` and `recover`, across every process of this machine. The kernel drops it when
its process dies, however it dies, so a killed apply never leaves the lock taken. Whoever
holds it writes who they are into the file (pid, command, since when); that text is
read only to say who holds a lock that is busy, never to decide anything.

Within one process the lock is reentrant: `apply --ready` holds it for the whole queue
and each apply it makes takes it again (a second `flock` of the same file from the same
process on another descriptor would wait for itself forever).

NFS: flock over NFS is emulated with byte-range (POSIX) locks on Linux since 2.6.12 and
holds between the clients of one server only when the mount uses the lock manager (not
`nolock`, not `local_lock=flock`); on another mount two machines may each take the lock.
Run one apply plane per repository there.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from core.errors import BadInput, GenjobError
from core.model.canonical import canonical, loads_strict
from core.store.durable import environment_fault, folder
from core.store.layout import Layout
from core.store.tree import FILE_MODE

# How much of the lock file is read to say who holds it.
_HOLDER_BYTES = 4096
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class WriterBusy(GenjobError):
    """Another apply holds the repository's writer lock and the caller chose not to wait."""

    exit_code = 1


@dataclass(frozen=True)
class Holder:
    """Who said they hold the writer lock: read from the lock file, a claim only."""

    pid: int | None
    command: str
    since: float | None

    def describe(self) -> str:
        pid = f"pid {self.pid}" if self.pid is not None else "an unknown process"
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since)) if self.since else "?"
        return f"{pid} ({self.command or 'unknown command'}) since {since}"


class _ProcessLock:
    """This process's hold on one lock file: a reentrant lock for its threads, the flock
    taken by the first of them and dropped by the last."""

    def __init__(self) -> None:
        self.threads = threading.RLock()
        self.depth = 0
        self.fd: int | None = None


_GUARD = threading.Lock()
_HELD: dict[str, _ProcessLock] = {}


def lock_path(layout: Layout) -> str:
    return str(layout.apply_lock)


def _process_lock(layout: Layout) -> _ProcessLock:
    with _GUARD:
        return _HELD.setdefault(lock_path(layout), _ProcessLock())


def read_holder(layout: Layout) -> Holder:
    """Who the lock file says holds the lock (fields it lacks are left unknown)."""
    try:
        with open(lock_path(layout), "rb") as fh:
            data = fh.read(_HOLDER_BYTES)
        obj = loads_strict(data, lock_path(layout)) if data else {}
    except (OSError, BadInput):
        obj = {}
    if not isinstance(obj, dict):
        obj = {}
    pid, command, since = obj.get("pid"), obj.get("command"), obj.get("since")
    return Holder(
        pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        command[:200] if isinstance(command, str) else "",
        float(since) if isinstance(since, (int, float)) and not isinstance(since, bool) else None,
    )


def _busy(layout: Layout) -> WriterBusy:
    return WriterBusy(
        f"{lock_path(layout)}: another apply holds it: {read_holder(layout).describe()}; "
        "nothing was applied (apply without --no-wait to wait for it)"
    )


def _open_lock(layout: Layout) -> int:
    with folder(layout.gen) as gen:
        try:
            return os.open(layout.apply_lock.name, _LOCK_FLAGS, FILE_MODE, dir_fd=gen)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a symlink where the lock file belongs
                raise BadInput(f"{lock_path(layout)}: a symlink, not the lock file") from None
            raise environment_fault(exc, lock_path(layout)) or exc from None


def _say_who(fd: int) -> None:
    """Write this process into the lock file (it holds the lock now)."""
    me = {"pid": os.getpid(), "command": " ".join(sys.argv)[:200], "since": time.time()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, canonical(me), 0)


def _take(layout: Layout, held: _ProcessLock, wait: bool, waiting: Callable[[Holder], None] | None) -> None:
    fd = _open_lock(layout)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise _busy(layout) from None
            if waiting is not None:
                waiting(read_holder(layout))
            fcntl.flock(fd, fcntl.LOCK_EX)
        _say_who(fd)
    except BaseException:
        os.close(fd)
        raise
    held.fd = fd


def _drop(held: _ProcessLock) -> None:
    fd, held.fd = held.fd, None
    if fd is not None:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # nobody holds it once it is dropped
        os.close(fd)  # closing the last descriptor releases the flock


@contextlib.contextmanager
def writer(
    layout: Layout, wait: bool = True, waiting: Callable[[Holder], None] | None = None
) -> Iterator[None]:
    """Hold the repository's writer lock for the block.

    `wait` False: raise `WriterBusy`, naming the holder, instead of waiting for it.
    `waiting`: told who holds the lock, once, when this call has to wait for it."""
    held = _process_lock(layout)
    if not held.threads.acquire(blocking=wait):
        raise _busy(layout)
    try:
        if held.depth == 0:
            _take(layout, held, wait, waiting)
        held.depth += 1
        try:
            yield
        finally:
            held.depth -= 1
            if held.depth == 0:
                _drop(held)
    finally:
        held.threads.release()
