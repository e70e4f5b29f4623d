"""Evidence kept under `.gen/logs/<key>/`: generator output, late receipts, copies set aside.

The evidence folder is read and written like the rest of `.gen/`: reached through
descriptors from `.gen/` without following a link, files opened without blocking and
read only up to a cap, written only as new files in real folders. A symlinked log
folder, or a FIFO where a log should be, is refused with its name, never followed.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Iterator
from pathlib import Path

from core.errors import BadInput
from core.store.durable import atomic_write_at, folder, move_at
from core.store.layout import Layout
from core.store.tree import open_folder, open_regular

# How much of the newest generator log `show` and the board read: its last bytes.
MAX_TAIL_BYTES = 256 * 1024


@contextlib.contextmanager
def log_folder(layout: Layout, key: str, create: bool = True) -> Iterator[int]:
    """`.gen/logs/<key>/` as a descriptor, made as real folders when `create`."""
    with folder(layout.gen) as gen:
        fd = open_folder(gen, ["logs", key], str(layout.log_dir(key)), [] if create else None)
    try:
        yield fd
    finally:
        os.close(fd)


def keep(layout: Layout, key: str, name: str, data: bytes) -> Path:
    """Write `data` as `<name>` in the job's evidence folder (replacing one of that name)."""
    with log_folder(layout, key) as fd:
        where = layout.log_dir(key) / name
        atomic_write_at(fd, name, data, where, durable=False)
        return where


def set_aside(layout: Layout, key: str, src: Path, label: str, stamped: bool = True) -> Path:
    """Move `src` (a file or folder in a `.gen/` folder) into the job's evidence folder as
    `<label>-<milliseconds>` (or `<label>` when not `stamped`), never over anything;
    returns where it went."""
    with log_folder(layout, key) as dst_fd, folder(src.parent) as src_fd:
        stamp = int(time.time() * 1000)
        names = itertools.chain(
            [label] if not stamped else [], (f"{label}-{stamp + i}" for i in itertools.count())
        )
        for name in names:
            try:
                move_at(src_fd, src.name, dst_fd, name, layout.log_dir(key) / name)
            except FileExistsError:
                continue
            return layout.log_dir(key) / name
    raise RuntimeError("unreachable: the stamped names never run out")


def newest_log_tail(layout: Layout, key: str, limit: int = MAX_TAIL_BYTES) -> str:
    """The last `limit` bytes of the job's newest `*.log`, decoded; "" when there is none.

    Only regular files are read; a link or FIFO among the logs is skipped.
    """
    try:
        with log_folder(layout, key, create=False) as fd:
            return _tail_of_newest(fd, layout.log_dir(key), limit)
    except (FileNotFoundError, BadInput):
        return ""


def _tail_of_newest(dir_fd: int, where: Path, limit: int) -> str:
    newest: tuple[int, str] | None = None
    for name in os.listdir(dir_fd):
        if not name.endswith(".log"):
            continue
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if newest is None or st.st_mtime_ns > newest[0]:
            newest = (st.st_mtime_ns, name)
    if newest is None:
        return ""
    try:
        opened = open_regular(dir_fd, newest[1], str(where / newest[1]))
    except BadInput:
        return ""
    if opened is None:
        return ""
    fd, st = opened
    try:
        os.lseek(fd, max(0, st.st_size - limit), os.SEEK_SET)
        data = os.read(fd, limit)
    finally:
        os.close(fd)
    return data.decode("utf-8", errors="replace")
