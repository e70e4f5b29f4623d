"""What Linux's /proc says of a process, read in one place.

`/proc/<pid>/stat` holds the command name in parentheses, and that name may itself hold
spaces and parentheses: the fields that follow are found after its last ``)``.
"""

from __future__ import annotations

# Indexes into `stat_fields`: the process state, its session, its start time (clock ticks
# since boot).
STATE, SESSION, START_TIME = 0, 3, 19


def stat_fields(pid: int | str) -> list[bytes] | None:
    """The fields of `/proc/<pid>/stat` after the command name; None when there is no
    such process (or it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            line = fh.read()
    except OSError:
        return None
    return line[line.rfind(b")") + 2 :].split()


def alive(pid: int | str) -> bool:
    """Whether process `pid` exists and is not a zombie (exited, not yet reaped)."""
    fields = stat_fields(pid)
    return fields is not None and fields[STATE] not in (b"Z", b"X")
