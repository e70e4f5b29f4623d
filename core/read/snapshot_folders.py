"""Listing the state folders under `.gen/`: which keys have which files, by identity.

A key's row depends on `<key>.json` in the first five folders of `LISTED`, `<key>.lease`
in running/, `<key>.jsonl` in attempts/ and the folder `<key>/` in candidates/. Job
documents, receipts and records are never rewritten in place (each is a complete file
renamed or linked into place), so such a file is known by its inode as the listing gives
it, without a stat. Attempts files grow, so theirs is (inode, size, mtime), and so does a
key's candidates folder (a candidate is renamed into it whole). Only the presence of a
lease is listed: leases are read on every scan.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from core.read.snapshot_files import racy_after
from core.read.snapshot_records import FileId, Listing

# Listed in this order; the first five hold `<key>.json` files.
LISTED = ("receipts", "running", "queue", "applied", "rejected", "attempts", "candidates")
JSON_FOLDERS = LISTED[:5]
# Folders whose entries change without the folder itself changing: listed on every scan.
GROWING = ("attempts", "candidates")


def _entries(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except FileNotFoundError:
        return []


def _list_growing(path: str, suffix: str) -> dict[str, FileId]:
    """`<key><suffix>` by key with its (inode, size, mtime); stat'ed relative to the folder,
    which spares the kernel a walk of the whole path for each file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return {}
    out: dict[str, FileId] = {}
    cut = len(suffix)
    try:
        with os.scandir(fd) as it:
            for e in it:
                n = e.name
                if n.endswith(suffix) and n[0] != ".":
                    try:
                        st = e.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    out[n[: len(n) - cut]] = (st.st_ino, st.st_size, st.st_mtime_ns)
    finally:
        os.close(fd)
    return out


def _list_folder(folder: str, path: str) -> tuple[dict[str, FileId], dict[str, None] | None]:
    """The key files of one folder by key with their identities, and for running/ the
    keys with a lease."""
    if folder == "attempts":
        return _list_growing(path, ".jsonl"), None
    if folder == "candidates":
        return _list_growing(path, ""), None
    entries = _entries(path)
    if folder == "running":
        jobs: dict[str, FileId] = {}
        leases: dict[str, None] = {}
        for e in entries:
            n = e.name
            if n[0] == ".":
                continue
            if n.endswith(".json"):
                jobs[n[:-5]] = e.inode()
            elif n.endswith(".lease"):
                leases[n[:-6]] = None
        return jobs, leases
    return {n[:-5]: e.inode() for e in entries if (n := e.name).endswith(".json") and n[0] != "."}, None


def file_identity(path: str, growing: bool) -> FileId | None:
    """What a listing records for one file, or None when there is none."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns) if growing else st.st_ino


def list_growing(gen: str, folder: str) -> dict[str, FileId]:
    """The entries of a folder in `GROWING`, by key with their (inode, size, mtime)."""
    return _list_growing(f"{gen}/{folder}", ".jsonl" if folder == "attempts" else "")


def list_folders(
    gen: str,
    old: dict[str, Listing] | None,
    only: Iterable[str] = LISTED,
    taken: Mapping[str, Mapping[str, FileId]] | None = None,
) -> tuple[dict[str, Listing], set[str] | None]:
    """The folders now (those of `only`), and the keys with a file that differs from the
    `old` listing (None: no listing to compare with). The files of a folder of `GROWING`
    in `taken` were listed just now, elsewhere: it is not listed again.

    A folder whose own identity (inode, mtime, ctime) is the one recorded, and had
    settled then, holds the same entries: adding, removing or renaming one changes it.
    Such a folder is not listed again, except attempts/ and candidates/, whose entries
    grow in place.
    """
    racy = racy_after()
    listed: dict[str, Listing] = {}
    changed: set[str] | None = None if old is None else set()
    for folder in only:
        path = f"{gen}/{folder}"
        try:
            st = os.stat(path)
        except FileNotFoundError:
            here = None
        else:
            here = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        before = None if old is None else old[folder]
        if here is not None and before is not None and before.settled == here and folder not in GROWING:
            listed[folder] = before
            continue
        files: Mapping[str, FileId]
        if taken is not None and folder in taken:
            files, leases = taken[folder], None
        else:
            files, leases = _list_folder(folder, path)
        settled = here if here is not None and max(here[1:]) < racy else None
        if (
            before is not None
            and (files is before.files or before.files == files)
            and before.leases == leases
        ):
            listed[folder] = before if before.settled == settled else before._replace(settled=settled)
            continue
        listed[folder] = Listing(settled, files, leases)
        if changed is not None and before is not None:
            changed.update(k for k, _ in files.items() ^ before.files.items())
            if leases is not None and before.leases is not None:
                changed.update(leases.keys() ^ before.leases.keys())
    return listed, changed
