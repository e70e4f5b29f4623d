"""core.read.snapshot_folders: listing the state folders, and telling which keys changed."""

from __future__ import annotations

import os

import pytest
from corekit import write_jobs

from core.read import snapshot_files
from core.read.snapshot_folders import LISTED, file_identity, list_folders
from core.read.snapshot_records import Listing
from core.store.layout import Layout
from core.store.queue import claim


def listing(
    layout: Layout, old: dict[str, Listing] | None = None
) -> tuple[dict[str, Listing], set[str] | None]:
    return list_folders(str(layout.gen), old)


def test_each_folder_lists_its_keys_by_file_identity(repo: Layout) -> None:
    queued, running = write_jobs(repo, 2)
    claim(repo, "w1", running)
    (repo.queue / ".hidden.json").write_bytes(b"{}")
    (repo.queue / "notes.txt").write_bytes(b"x")
    listed, changed = listing(repo)
    assert changed is None, "nothing to compare with"
    assert set(listed) == set(LISTED)
    assert listed["queue"].files == {queued: os.lstat(repo.queue / f"{queued}.json").st_ino}
    assert listed["running"].files == {running: os.lstat(repo.running / f"{running}.json").st_ino}
    assert listed["running"].leases == {running: None}
    st = os.lstat(repo.attempts / f"{running}.jsonl")
    assert listed["attempts"].files == {running: (st.st_ino, st.st_size, st.st_mtime_ns)}
    assert listed["queue"].leases is None


def test_changed_keys_are_those_whose_files_differ(repo: Layout) -> None:
    a, b, c = write_jobs(repo, 3)
    first, _ = listing(repo)
    again, changed = listing(repo, first)
    assert changed == set()
    claim(repo, "w1", a)  # a moves, gains a lease and an attempts file
    (repo.queue / f"{b}.json").unlink()
    _, changed = listing(repo, again)
    assert changed == {a, b}
    assert c not in changed


def test_a_settled_folder_is_not_listed_again(repo: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot_files, "RACY_NS", 0)  # everything has settled at once
    write_jobs(repo, 2)
    first, _ = listing(repo)
    assert first["queue"].settled is not None
    again, _ = listing(repo, first)
    assert again["queue"] is first["queue"], "an unchanged folder is taken as it was"
    write_jobs(repo, 1, prefix="later")
    third, changed = listing(repo, again)
    assert third["queue"] is not first["queue"] and changed is not None and len(changed) == 1


def test_an_attempts_file_that_grows_is_a_change(repo: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot_files, "RACY_NS", 0)
    key = write_jobs(repo, 1)[0]
    claim(repo, "w1", key)
    first, _ = listing(repo)
    with open(repo.attempts / f"{key}.jsonl", "ab") as fh:
        fh.write(b'{"event":"note"}\n')
    _, changed = listing(repo, first)
    assert changed == {key}


def test_file_identity(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    path = str(repo.queue / f"{key}.json")
    assert file_identity(path, False) == os.lstat(path).st_ino
    st = os.lstat(path)
    assert file_identity(path, True) == (st.st_ino, st.st_size, st.st_mtime_ns)
    assert file_identity(path + ".gone", False) is None
