"""Path rules for allowed paths: the pure check, and checks against the disk.

An allowed path is a repository-relative POSIX path. The pure rule (`check_relpath`,
whose one home is the stdlib-only runner, so the generator host applies the same rule)
refuses anything that could name a place outside the job's files or hide on a terminal;
the disk rules refuse a path that passes through a symlink or that is not what it should
be, component by component, because ``O_NOFOLLOW`` only protects the last one.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from core.errors import BadInput
from core.remote.rules import MAX_COMPONENT_BYTES, MAX_PATH_BYTES, RESERVED_TOP, check_relpath

__all__ = [
    "MAX_COMPONENT_BYTES",
    "MAX_PATH_BYTES",
    "RESERVED_TOP",
    "check_relpath",
    "checked",
    "lstat_inside",
    "regular_file_inside",
    "repo_relative",
]


def checked(rel: str, source: str) -> str:
    """`check_relpath` with the fault reported as `BadInput` naming `source`."""
    try:
        return check_relpath(rel)
    except ValueError as exc:
        raise BadInput(f"{source}: {rel!r}: {exc}") from None


def lstat_inside(root: Path, rel: str) -> os.stat_result | None:
    """lstat `root/rel` after checking that no parent component is a link or non-directory.

    Returns None when the path (or one of its parents) does not exist.
    Raises BadInput when a component is a symlink or a parent is not a directory.
    """
    parts = rel.split("/")
    here = root
    for part in parts[:-1]:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(st.st_mode):
            raise BadInput(f"{rel}: passes through the symlink {here}")
        if not stat.S_ISDIR(st.st_mode):
            raise BadInput(f"{rel}: {here} is not a directory")
    try:
        return os.lstat(root / rel)
    except FileNotFoundError:
        return None


def regular_file_inside(root: Path, rel: str) -> os.stat_result | None:
    """Like `lstat_inside`, and the path must be a regular file when it exists."""
    st = lstat_inside(root, rel)
    if st is None:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise BadInput(f"{rel}: is a symlink")
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{rel}: is not a regular file")
    return st


def repo_relative(root: Path, given: str, cwd: Path) -> str:
    """Turn a path typed by the user (relative to `cwd`, or absolute) into a repo path."""
    p = Path(given)
    full = p if p.is_absolute() else cwd / p
    full = Path(os.path.normpath(full))
    try:
        rel = full.relative_to(root)
    except ValueError:
        raise BadInput(f"{given}: outside the repository {root}") from None
    return checked(rel.as_posix(), given)
