"""Replay (`core.plan.replay`): a finished-but-unusable job minted again over the tree as it is
now: a v2 job as a v2 job that records which job it replays, a v1 job as the seed's v1."""

from __future__ import annotations

import json

import pytest
from corekit import mint, receive, sha
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import BadInput, SecretFound, WrongState
from core.model.lifecycle import State
from core.model.models import V1, JobV1
from core.plan.replay import replay
from core.read.snapshot import take_snapshot
from core.review.apply_job import apply_job
from core.store.events import job_events
from core.store.layout import Layout
from core.store.queue import Claimer, locate, reject


def state(layout: Layout, key: str) -> State:
    return take_snapshot(layout, disk_cache=False).rows[key].state


def rejected_job(layout: Layout, paths: tuple[str, ...] = ("src/app.py",), new: tuple[str, ...] = ()) -> str:
    job = mint(layout, "Make it better.", paths, new)
    reject(layout, job.key, "not like that")
    return job.key


def test_a_rejected_job_is_minted_again_with_its_instruction_and_paths(repo: Layout) -> None:
    key = rejected_job(repo, ("src/app.py", "src/util.py"))
    res = replay(repo, key)
    assert res.created and res.folder == "queue" and res.key != key
    new = locate(repo, res.key).job
    assert new.instruction == "Make it better."
    assert sorted(new.allowed_paths) == ["src/app.py", "src/util.py"]
    assert getattr(new, "replay_of", None) == key
    assert json.loads(res.path.read_bytes())["replay_of"] == key
    assert state(repo, res.key) is State.QUEUED
    assert state(repo, key) is State.REJECTED  # the replayed job stays where it was


def test_present_paths_are_inputs_at_their_current_hash(repo: Layout) -> None:
    key = rejected_job(repo)
    (repo.root / "src/app.py").write_bytes(b"changed since\n")
    new = locate(repo, replay(repo, key).key).job
    assert new.input_digest("src/app.py") == sha(b"changed since\n")


def test_paths_that_are_gone_become_new_files_and_new_files_that_exist_become_inputs(repo: Layout) -> None:
    key = rejected_job(repo, ("src/app.py",), ("src/made.py",))
    (repo.root / "src/app.py").unlink()
    (repo.root / "src/made.py").write_bytes(b"made meanwhile\n")
    new = locate(repo, replay(repo, key).key).job
    assert new.input_digest("src/app.py") is None
    assert new.input_digest("src/made.py") == sha(b"made meanwhile\n")


def test_replaying_twice_over_the_same_tree_gives_the_same_job_and_one_event(repo: Layout) -> None:
    key = rejected_job(repo)
    first = replay(repo, key)
    second = replay(repo, key)
    assert second.key == first.key and not second.created
    assert [e["as_key"] for e in job_events(repo, key) if e["event"] == "replayed"] == [first.key]


def test_replaying_over_a_changed_tree_gives_another_job(repo: Layout) -> None:
    key = rejected_job(repo)
    first = replay(repo, key)
    (repo.root / "src/app.py").write_bytes(b"moved on\n")
    second = replay(repo, key)
    assert second.created and second.key != first.key


def test_a_failed_job_can_be_replayed(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo)
    receive(repo, job.key, {}, signer, status="rejected")
    assert state(repo, job.key) is State.FAILED
    assert replay(repo, job.key).created


def test_a_stale_job_can_be_replayed(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"new\n"}, signer)
    (repo.root / "src/app.py").write_bytes(b"edited by hand\n")
    assert state(repo, job.key) is State.STALE
    new = locate(repo, replay(repo, job.key).key).job
    assert new.input_digest("src/app.py") == sha(b"edited by hand\n")


def test_a_v1_job_is_replayed_as_v1_with_a_new_job_id_and_the_next_attempt(repo: Layout) -> None:
    job = mint(repo, schema=V1)
    reject(repo, job.key, "old")
    (repo.root / "src/app.py").write_bytes(b"moved on\n")
    res = replay(repo, job.key)
    doc = json.loads(res.path.read_bytes())
    assert doc["schema"] == V1 and "replay_of" not in doc
    assert isinstance(job, JobV1) and doc["attempt"] == job.attempt + 1 and doc["job_id"] != job.job_id
    assert replay(repo, job.key).key == res.key and not replay(repo, job.key).created
    assert [e["as_key"] for e in job_events(repo, job.key) if e["event"] == "replayed"] == [res.key]


def test_a_v1_replay_that_would_reuse_the_key_is_refused_saying_why(repo: Layout) -> None:
    job = mint(repo, schema=V1)
    reject(repo, job.key, "old")
    queued = sorted(repo.queue.iterdir())
    with pytest.raises(BadInput, match=rf"{job.key}: cannot be replayed as genjob.v1 over this tree.*reuse"):
        replay(repo, job.key)
    assert sorted(repo.queue.iterdir()) == queued
    assert state(repo, job.key) is State.REJECTED


def test_a_v1_replay_whose_file_is_gone_is_refused_since_v1_cannot_create_files(repo: Layout) -> None:
    job = mint(repo, schema=V1)
    reject(repo, job.key, "old")
    (repo.root / "src/app.py").unlink()
    with pytest.raises(BadInput, match=r"src/app\.py no longer exist.*v1 job cannot create files"):
        replay(repo, job.key)
    assert not list(repo.queue.iterdir())


def test_replay_refuses_a_job_in_any_other_state_naming_the_states_it_is_for(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    queued = mint(repo, "queued")
    running = mint(repo, "running", ["src/util.py"])
    Claimer(repo, "w1").claim(running.key)
    received = mint(repo, "received", ["README.md"])
    receive(repo, received.key, {"README.md": b"# new\n"}, signer)
    applied = mint(repo, "applied", ["docs/guide.md"])
    receive(repo, applied.key, {"docs/guide.md": b"new\n"}, signer)
    apply_job(repo, applied.key)
    cases = {queued.key: "QUEUED", running.key: "RUNNING", received.key: "RECEIVED", applied.key: "APPLIED"}
    for key, name in cases.items():
        with pytest.raises(WrongState) as err:
            replay(repo, key)
        assert str(err.value) == f"{key}: is {name}; replay is for FAILED, REJECTED, STALE"
    missing = "0" * 32
    with pytest.raises(WrongState, match=f"{missing}: is missing; replay is for"):
        replay(repo, missing)
    assert not any(e["event"] == "replayed" for key in cases for e in job_events(repo, key))


def test_replay_scans_for_secrets_like_a_mint(repo: Layout) -> None:
    key = rejected_job(repo)
    (repo.root / "src/app.py").write_bytes(b"token = 'AKIAABCDEFGHIJKLMNOP'\n")
    queued = sorted(p.name for p in repo.queue.iterdir())
    with pytest.raises(SecretFound, match=r"src/app\.py"):
        replay(repo, key)
    assert sorted(p.name for p in repo.queue.iterdir()) == queued
    assert replay(repo, key, allow_secrets=True).created


def test_a_queued_job_whose_inputs_moved_is_replayed_in_its_place(repo: Layout) -> None:
    job = mint(repo, "x", ["src/app.py"])
    (repo.root / "src/app.py").write_text("moved on\n")
    assert state(repo, job.key) is State.STALE
    res = replay(repo, job.key)
    assert state(repo, res.key) is State.QUEUED and state(repo, job.key) is State.REJECTED
    assert locate(repo, res.key).job.inputs == {"src/app.py": sha(b"moved on\n")}
    assert Claimer(repo, "w1").claim().key == res.key  # nothing STALE left to skip
