"""Who could have written a file that grants power: StrictModes for `.gen/` and the operator.

A pinned key, the policy in `config.toml` and an apply journal each let their author
decide what lands in the tree. A file that a user other than the owner could have
written hands that power to that user. So, in the spirit of OpenSSH's StrictModes, such
a file counts only when it and every folder from it up to its anchor (`.gen/`, or the
operator's config folder) are owned by the owner (or root) and writable by no one else.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from core.errors import Untrusted


def repository_owners(root: Path) -> frozenset[int]:
    """The repository's owner (the owner of its root folder), and root."""
    return frozenset({os.stat(root).st_uid, 0})


def operator_owners() -> frozenset[int]:
    """This user, and root: who may write the operator's own config folder."""
    return frozenset({os.getuid(), 0})


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def untrusted_because(path: Path, anchor: Path, owners: frozenset[int]) -> str | None:
    """Why `path` cannot be trusted, with the command that fixes it; None when it can.

    Checks `path` and each folder above it up to and including `anchor`, without
    following links: a symlink anywhere on the way is refused too.
    """
    chain = [path]
    here = path
    while here != anchor and anchor in here.parents:
        here = here.parent
        chain.append(here)
    owner = user_name(min(owners - {0}, default=0))
    for item in chain:
        try:
            st = os.lstat(item)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            return f"{item} is a symlink; replace it with the file or folder itself"
        if st.st_uid not in owners:
            return f"{item} is owned by {user_name(st.st_uid)}, not {owner}; fix with: chown {owner} {item}"
        if st.st_mode & 0o022:
            return (
                f"{item} is writable by {'its group' if st.st_mode & 0o020 else 'others'} "
                f"(mode {stat.S_IMODE(st.st_mode):04o}); fix with: chmod go-w {item}"
            )
    return None


def require_trusted(path: Path, anchor: Path, owners: frozenset[int], what: str) -> None:
    """Raise `Untrusted` naming `what` when `untrusted_because` finds a fault."""
    why = untrusted_because(path, anchor, owners)
    if why is not None:
        raise Untrusted(f"{path}: {what} that another user could have written is not trusted: {why}")
