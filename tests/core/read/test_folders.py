"""core.read.folders: the state folders by name, and the states names alone allow."""

from __future__ import annotations

import itertools
import os

from corekit import write_jobs

from core.model.freshness import LeaseState
from core.model.lifecycle import Facts, State, derive_state
from core.read.folders import list_names, may_turn_out, provisional_state
from core.store.layout import JOB_FOLDERS, Layout
from core.store.queue import claim


def test_each_folder_lists_its_keys_by_file_identity(repo: Layout) -> None:
    queued, running = write_jobs(repo, 2)
    claim(repo, "w1", running)
    (repo.queue / ".hidden.json").write_bytes(b"{}")
    (repo.queue / "notes.txt").write_bytes(b"x")
    names = list_names(str(repo.gen))
    assert set(names.files) == {*JOB_FOLDERS, "receipts"}
    assert names.files["queue"] == {queued: os.lstat(repo.queue / f"{queued}.json").st_ino}
    assert names.files["running"] == {running: os.lstat(repo.running / f"{running}.json").st_ino}
    assert names.leases == {running} and names.candidates == set()
    assert names.where == {queued: ("queue",), running: ("running",)}


def test_a_key_in_two_folders_is_named_in_both(repo: Layout) -> None:
    key = write_jobs(repo, 1)[0]
    os.link(repo.queue / f"{key}.json", repo.applied / f"{key}.json")
    names = list_names(str(repo.gen))
    assert names.where[key] == ("applied", "queue")
    assert provisional_state(key, names.where[key], receipt=False) is State.INCONSISTENT


def test_missing_folders_list_as_empty(repo: Layout) -> None:
    for folder in ("queue", "receipts", "candidates"):
        os.rmdir(repo.gen / folder)
    names = list_names(str(repo.gen))
    assert names.files["queue"] == {} and names.where == {} and names.candidates == set()


def test_provisional_states_follow_the_names() -> None:
    key = "a" * 32
    assert provisional_state(key, ["queue"], receipt=False) is State.QUEUED
    assert provisional_state(key, ["applied"], receipt=False) is State.APPLIED
    assert provisional_state(key, ["running"], receipt=False) is State.RUNNING
    assert provisional_state(key, ["running"], receipt=True) is State.RECEIVED
    assert provisional_state(key, [], receipt=True) is State.INCONSISTENT
    assert provisional_state("not-a-key", ["queue"], receipt=False) is State.INVALID


def test_a_folder_may_turn_out_in_every_state_its_jobs_files_may_give() -> None:
    """Whatever a job named in one folder alone turns out to say, its state is one the folder
    allowed: the promise `genjob ls --state` rests on when it lists only those folders (and
    the receipts and candidates, read whatever the folder)."""
    for folder in JOB_FOLDERS:
        allowed = may_turn_out(folder)
        for lease, fresh, invalid in itertools.product(
            (None, *LeaseState), (None, True, False), (None, "bad")
        ):
            got = derive_state(Facts(frozenset({folder}), lease, None, fresh, invalid))
            assert got in allowed, (folder, lease, fresh, invalid)
    assert State.RECEIVED not in may_turn_out("queue") and State.QUEUED not in may_turn_out("applied")
