"""What /proc says of a process: its fields past a command name that holds spaces and
parentheses, its session, and whether it is alive (a zombie is not)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from corekit import dead_pid

from core.store import procfs


def test_the_fields_of_this_process() -> None:
    fields = procfs.stat_fields(os.getpid())
    assert fields is not None
    assert fields[procfs.STATE] in (b"R", b"S")
    assert int(fields[procfs.SESSION]) == os.getsid(0)
    assert int(fields[procfs.START_TIME]) > 0
    assert procfs.alive(os.getpid())


def test_a_command_name_with_spaces_and_parentheses(tmp_path: Path) -> None:
    odd = tmp_path / "a) (b c"  # the name /proc/<pid>/stat shows in parentheses
    odd.symlink_to(shutil.which("sleep") or "/bin/sleep")
    proc = subprocess.Popen([str(odd), "30"])
    try:
        deadline = time.monotonic() + 10  # only bounds how long a failing test waits
        while Path(f"/proc/{proc.pid}/comm").read_bytes() != b"a) (b c\n":
            assert time.monotonic() < deadline, "the command never started"
            time.sleep(0.005)
        fields = procfs.stat_fields(proc.pid)
        assert fields is not None and fields[procfs.STATE] in (b"R", b"S")
        assert int(fields[procfs.SESSION]) == os.getsid(0)
    finally:
        proc.kill()
        proc.wait()


def test_a_zombie_and_a_gone_process_are_not_alive() -> None:
    proc = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10  # only bounds how long a failing test waits
    while procfs.alive(proc.pid):
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.005)
    assert procfs.stat_fields(proc.pid) is not None  # a zombie still has its entry
    proc.wait()
    assert procfs.stat_fields(proc.pid) is None
    assert not procfs.alive(dead_pid())
