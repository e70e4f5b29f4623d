"""Kill an operation with SIGKILL just before each of its filesystem mutations.

The operation runs in a forked child that installs an audit hook (`sys.addaudithook`)
counting the audit events that change the filesystem and sends itself SIGKILL at the
n-th. Product code has no test hooks: the kill lands exactly where a crash, an OOM kill
or a power cut between two system calls would.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from corekit import carry_pins

# Audit events that change what is on disk (https://docs.python.org/3/library/audit_events.html).
# `os.replace` raises "os.rename"; `os.unlink` raises "os.remove".
MUTATING_EVENTS = frozenset(
    {
        "os.rename",
        "os.link",
        "os.symlink",
        "os.remove",
        "os.rmdir",
        "os.mkdir",
        "os.truncate",
        "os.chmod",
        "os.chown",
        "os.utime",
        "shutil.rmtree",
        "shutil.copyfile",
        "shutil.copytree",
        "shutil.move",
    }
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def mutates(event: str, args: tuple[Any, ...]) -> bool:
    """Whether an audit event is about to change the filesystem."""
    if event == "open":
        _, mode, flags = args
        if isinstance(mode, str):
            return any(c in mode for c in "wax+")
        return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)
    return event in MUTATING_EVENTS


def run_killed_at(n: int, operation: Callable[[], object]) -> bool:
    """Run `operation` in a child killed just before its n-th mutation; True if it was killed.

    The child exits normally when the operation makes fewer than `n` mutations; an
    exception in the operation fails the caller.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 3
        try:
            seen = 0

            def hook(event: str, args: tuple[Any, ...]) -> None:
                nonlocal seen
                if mutates(event, args):
                    seen += 1
                    if seen == n:
                        os.kill(os.getpid(), signal.SIGKILL)

            sys.addaudithook(hook)
            operation()
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return True
    assert os.WEXITSTATUS(status) == 0, f"the operation failed in the child (exit {os.WEXITSTATUS(status)})"
    return False


def every_crash(
    template: Path, work: Path, operation: Callable[[Path], object]
) -> Iterator[tuple[Path, bool]]:
    """For n = 1, 2, ...: a fresh copy of `template` at `work` after `operation(work)` was
    killed before its n-th mutation; the last copy is the one where it ran to the end."""
    n = 0
    while True:
        n += 1
        if work.exists():
            shutil.rmtree(work)
        shutil.copytree(template, work, symlinks=True)
        carry_pins(template, work)
        killed = run_killed_at(n, lambda: operation(work))
        yield work, killed
        if not killed:
            return


class _Faults:
    """The one audit hook that turns the n-th filesystem mutation into an OSError.

    Audit hooks cannot be removed, so one is installed for the whole test process and
    stays inert until `inject` arms it.
    """

    def __init__(self) -> None:
        self.installed = False
        self.countdown = 0
        self.errno = 0
        self.seen = 0

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.countdown <= 0 or not mutates(event, args):
            return
        self.seen += 1
        self.countdown -= 1
        if self.countdown == 0:
            where = args[0] if args and isinstance(args[0], (str, bytes, os.PathLike)) else None
            raise OSError(self.errno, os.strerror(self.errno), where)

    def arm(self, n: int, err: int) -> None:
        if not self.installed:
            sys.addaudithook(self.hook)
            self.installed = True
        self.countdown, self.errno, self.seen = n, err, 0


FAULTS = _Faults()


def fail_at(n: int, err: int) -> None:
    """Make the n-th filesystem mutation from now on raise OSError(`err`), once."""
    FAULTS.arm(n, err)


def disarm() -> bool:
    """Stop injecting; True if the fault was raised (the operation reached its n-th mutation)."""
    fired = FAULTS.countdown == 0 and FAULTS.seen > 0
    FAULTS.countdown = 0
    return fired


def first_crash_where(
    template: Path, work: Path, operation: Callable[[Path], object], holds: Callable[[Path], bool]
) -> Path:
    """The copy at `work` after `operation` was killed before the first of its mutations
    at which the state satisfies `holds` (such as: the first of two files is written)."""
    for root, killed in every_crash(template, work, operation):
        if killed and holds(root):
            return root
    raise AssertionError("no kill of the operation left the state asked for")
