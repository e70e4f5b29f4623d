"""One writer: every apply of a repository's tree runs under `.gen/apply.lock`.

An exclusive `fcntl.flock` on that file, held for the whole apply (its commit too), by
the CLI's `apply`, the board's approve (both call `core.review.apply_job.apply_job`), `apply
--ready` and `recover`, across every process of this machine. The kernel drops it when
its process dies, however it dies, so a killed apply never leaves the lock taken. Who
holds a busy lock is what the kernel says (`/proc/locks`), with that process's command
line and start time from /proc: nothing is written into the file, so taking the lock
changes nothing on disk.

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
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from core.errors import BadInput, GenjobError
from core.store.durable import environment_fault, folder
from core.store.layout import Layout
from core.store.procfs import START_TIME, stat_fields
from core.store.tree import FILE_MODE, closing

# How much of the lock file is read to say who holds it.
_HOLDER_BYTES = 4096
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC


class WriterBusy(GenjobError):
    """Another apply holds the repository's writer lock and the caller chose not to wait."""

    exit_code = 1


@dataclass(frozen=True)
class Holder:
    """The process the kernel says holds the writer lock (`/proc/locks`), as /proc shows it."""

    pid: int | None
    command: str
    since: float | None

    def describe(self) -> str:
        pid = f"pid {self.pid}" if self.pid is not None else "another process"
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.since)) if self.since else None
        running = f", running since {since}" if since else ""
        return f"{pid} ({self.command or 'command unknown'}{running})"


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


def _holder_pid(fd: int) -> int | None:
    """The pid of the flock held on the file open at `fd`, from `/proc/locks` (None where
    it cannot be told: no /proc, or another pid namespace's holder)."""
    st = os.fstat(fd)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", "rb") as fh:
            table = fh.read().decode(errors="replace")
    except OSError:
        return None
    for line in table.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == inode and fields[4].isdigit():
            return int(fields[4])  # a waiter's line has "->" second: never matched
    return None


def _started_at(pid: int) -> float | None:
    """When process `pid` started, as a wall-clock time."""
    fields = stat_fields(pid)
    try:
        with open("/proc/stat", "rb") as fh:
            boot = next(int(line.split()[1]) for line in fh if line.startswith(b"btime "))
        ticks = int(fields[START_TIME]) if fields is not None else None
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK") if ticks is not None else None


def _holder(fd: int) -> Holder:
    pid = _holder_pid(fd)
    if pid is None:
        return Holder(None, "", None)
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            command = fh.read(_HOLDER_BYTES).replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        command = ""
    return Holder(pid, command[:200], _started_at(pid))


def read_holder(layout: Layout) -> Holder:
    """Who holds the writer lock now (nobody known: every field None or empty)."""
    try:
        fd = _open_lock(layout)
    except (OSError, BadInput):
        return Holder(None, "", None)
    with closing(fd):
        return _holder(fd)


def _busy(layout: Layout, holder: Holder | None = None) -> WriterBusy:
    holder = holder or read_holder(layout)
    return WriterBusy(
        f"{lock_path(layout)}: another apply holds it: {holder.describe()}; "
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


def _take(layout: Layout, held: _ProcessLock, wait: bool, waiting: Callable[[Holder], None] | None) -> None:
    fd = _open_lock(layout)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise _busy(layout, _holder(fd)) from None
            if waiting is not None:
                waiting(_holder(fd))
            fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    held.fd = fd


def _drop(held: _ProcessLock) -> None:
    fd, held.fd = held.fd, None
    if fd is not None:
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
