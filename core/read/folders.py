"""The state folders by name: which keys have which files, and what the names alone say.

Job documents, receipts and records are never rewritten in place (each is a whole file
renamed or linked there), so each is known by the inode its folder's listing gives. A
key's names give it a provisional state (its files' if they parse and its lease is fresh:
queue/ alone is QUEUED, two folders INCONSISTENT), and a folder the states its jobs may turn out in.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable
from typing import NamedTuple

from core.model.contract import KEY_RE
from core.model.freshness import LeaseState
from core.model.lifecycle import Facts, State, derive_state
from core.store.layout import JOB_FOLDERS


def folder_keys(path: str, suffix: str = ".json") -> list[str]:
    """The keys of a folder's `<key><suffix>` entries (none when it is missing)."""
    try:
        names = os.listdir(path)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [n.removesuffix(suffix) for n in names if n.endswith(suffix) and n[0] != "."]


def _inodes(path: str) -> dict[str, int]:
    try:
        with os.scandir(path) as it:
            return {e.name[:-5]: e.inode() for e in it if e.name.endswith(".json") and e.name[0] != "."}
    except (FileNotFoundError, NotADirectoryError):
        return {}


class Names(NamedTuple):
    files: dict[str, dict[str, int]]  # job folder or receipts -> key -> inode of `<key>.json`
    where: dict[str, tuple[str, ...]]  # key -> the job folders holding `<key>.json`, in order
    leases: set[str]  # the keys with a `<key>.lease` in running/
    candidates: set[str]  # the keys with a folder in candidates/


def list_names(gen: str) -> Names:
    """Each state folder listed once, each file known by its inode."""
    files = {folder: _inodes(f"{gen}/{folder}") for folder in (*JOB_FOLDERS, "receipts")}
    where: dict[str, tuple[str, ...]] = {}
    for folder in JOB_FOLDERS:  # one tuple for each folder, a new one only for a key in several
        again = {key: where[key] + (folder,) for key in where.keys() & files[folder].keys()}
        where.update(dict.fromkeys(files[folder], (folder,)))
        where.update(again)
    leases, candidates = folder_keys(f"{gen}/running", ".lease"), folder_keys(f"{gen}/candidates", "")
    return Names(files, where, set(leases), set(candidates))


def provisional_state(key: str, folders: Iterable[str], *, receipt: bool) -> State:
    """The state a key's names give it: its files' if they parse, its lease fresh."""
    where = frozenset(folders)
    lease = LeaseState.FRESH if "running" in where else None
    invalid = None if KEY_RE.fullmatch(key) else key
    return derive_state(Facts(where, lease, "ok" if receipt else None, None, invalid))


@functools.cache
def may_turn_out(folder: str) -> frozenset[State]:
    """Every state a job named in `folder` alone (no receipt, no candidates) may turn out in
    once its files are read: `derive_state` over every value of what is not read yet."""
    return frozenset(
        derive_state(Facts(frozenset({folder}), lease, None, fresh, invalid))
        for lease in (None, *LeaseState)
        for fresh in (None, True, False)
        for invalid in (None, "a file that does not parse")
    )
