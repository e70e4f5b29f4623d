"""The lifecycle as a pure function of one snapshot, and a model-checked walk through it."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from corekit import dead_pid, make_repo, sha, stage_outputs
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from core.errors import NothingToClaim, VerificationFailed, WrongState
from core.model.freshness import LeaseState
from core.model.lifecycle import (
    ACTIONS,
    STATE_ORDER,
    Facts,
    State,
    allowed,
    derive_state,
    inconsistency_rule,
)
from core.plan.mint import build_job
from core.read.snapshot import refresh, take_snapshot
from core.review.apply_job import apply_job
from core.store.job_state import read_job_file
from core.store.layout import Layout
from core.store.queue import Claimer, enqueue, reject, requeue
from core.store.receipts import commit_receipt, make_receipt
from core.store.signing import trust_repository

FOLDERS = ("queue", "running", "applied", "rejected")
FACTS: dict[str, st.SearchStrategy[object]] = {
    "folders": st.frozensets(st.sampled_from(FOLDERS)),
    "lease": st.sampled_from([None, *LeaseState]),
    "receipt": st.sampled_from([None, "ok", "rejected", "aborted", "invalid"]),
    "base_fresh": st.sampled_from([None, True, False]),
    "invalid": st.sampled_from([None, "queue/x.json: malformed JSON"]),
}
facts = st.builds(Facts, **FACTS)
# Drawn as they are, not filtered out of `facts` (most draws would be thrown away).
parsed_facts = st.builds(Facts, **{**FACTS, "invalid": st.none()})
one_folder = st.sampled_from(FOLDERS).map(lambda f: frozenset({f}))
one_folder_facts = st.builds(Facts, **{**FACTS, "invalid": st.none(), "folders": one_folder})


@given(facts)
def test_derive_state_is_total_and_gives_one_known_state(f: Facts) -> None:
    state = derive_state(f)
    assert isinstance(state, State)
    assert state in STATE_ORDER
    assert derive_state(f) is state


@given(facts)
def test_an_unparseable_job_file_is_invalid(f: Facts) -> None:
    assert (derive_state(f) is State.INVALID) == (f.invalid is not None or _invalid_receipt_on_running(f))


@given(
    st.builds(
        Facts,
        folders=st.sampled_from([frozenset({"running"}), frozenset({"queue"})]),
        lease=st.sampled_from([None, *LeaseState]),
        receipt=st.sampled_from([None, "ok", "aborted"]),
        base_fresh=st.just(None),
        candidates=st.sampled_from(["ok", "failed"]),
    )
)
def test_candidates_without_a_lease_are_a_closed_batch(f: Facts) -> None:
    """Best-of-N: the last candidate in removes the lease, so a running job with candidates
    and no lease file is RECEIVED (one came back ok) or FAILED (none did); a live lease is
    a batch still running, a stale one an orphan; once a receipt is chosen it decides."""
    state = derive_state(f)
    if f.folders == {"queue"}:
        assert state is (State.QUEUED if f.receipt is None else State.INCONSISTENT)
    elif f.receipt is not None:
        assert state is derive_state(Facts(f.folders, f.lease, f.receipt))
    elif f.lease in (LeaseState.MISSING, LeaseState.CLAIMING):
        assert state is (State.RECEIVED if f.candidates == "ok" else State.FAILED)
    else:
        assert state is (State.RUNNING if f.lease is LeaseState.FRESH else State.ORPHANED)


def _invalid_receipt_on_running(f: Facts) -> bool:
    return f.folders == {"running"} and f.receipt == "invalid"


@given(parsed_facts)
def test_inconsistent_iff_the_folders_disagree(f: Facts) -> None:
    disagree = len(f.folders) > 1 or not f.folders or (f.folders == {"queue"} and f.receipt is not None)
    assert (derive_state(f) is State.INCONSISTENT) == disagree
    if len(f.folders) > 1:
        rule_text = inconsistency_rule(f.folders, f.receipt is not None)
        assert rule_text.startswith(
            "R2" if "applied" in f.folders else "R3" if "rejected" in f.folders else "R4"
        )


@given(one_folder_facts)
def test_one_folder_decides(f: Facts) -> None:
    state = derive_state(f)
    [folder] = f.folders
    if folder == "applied":
        assert state is State.APPLIED
    elif folder == "rejected":
        assert state is State.REJECTED
    elif folder == "queue" and f.receipt is not None:
        assert state is State.INCONSISTENT
    elif folder == "queue":
        assert state is (State.STALE if f.base_fresh is False else State.QUEUED)
    elif f.receipt is None:
        live = f.lease in (LeaseState.FRESH, LeaseState.CLAIMING)
        assert state is (State.RUNNING if live else State.ORPHANED)
    elif f.receipt == "ok":
        assert state is (State.STALE if f.base_fresh is False else State.RECEIVED)
    elif f.receipt == "invalid":
        assert state is State.INVALID
    else:
        assert state is State.FAILED


@given(facts)
def test_derived_states_only_come_from_running_or_bad_files(f: Facts) -> None:
    state = derive_state(f)
    if state in (State.ORPHANED, State.RECEIVED, State.FAILED, State.RUNNING):
        assert f.folders == {"running"}
    if state is State.STALE:  # a queued job or an ok receipt whose inputs moved
        assert f.folders in ({"running"}, {"queue"}) and f.base_fresh is False


@given(one_folder_facts)
def test_a_queued_job_whose_inputs_moved_is_never_shipped_and_may_be_replayed(f: Facts) -> None:
    state = derive_state(Facts(frozenset({"queue"}), None, None, False, f.invalid))
    assert state is (State.INVALID if f.invalid is not None else State.STALE)
    assert not allowed("ship", state) and not allowed("claim", state)
    assert f.invalid is not None or allowed("replay", state)


def test_actions_name_real_states() -> None:
    assert set(ACTIONS) >= {"claim", "requeue", "apply", "reject", "replay", "cancel"}
    assert allowed("apply", State.RECEIVED) and not allowed("apply", State.STALE)
    assert not any(allowed(a, State.INCONSISTENT) or allowed(a, State.INVALID) for a in ACTIONS)
    assert inconsistency_rule(frozenset({"queue"}), True).startswith("a receipt exists for a queued job")
    assert inconsistency_rule(frozenset(), True).startswith("a receipt with no job")


DEAD_PID = dead_pid()
PATHS = ("src/app.py", "src/util.py")


@dataclass
class ModelJob:
    path: str
    input_hash: str
    folder: str  # queue, running, applied, rejected
    alive: bool = False
    token: int = 0
    worker: str = ""
    receipt: str | None = None


class Lifecycle(RuleBasedStateMachine):
    """Drive the core operations on a real repository and compare every state with a model."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="genjob-lifecycle-"))
        self.layout: Layout = make_repo(self.tmp / "repo", {p: f"{p} v0\n".encode() for p in PATHS})
        self.files = {p: f"{p} v0\n".encode() for p in PATHS}
        self.jobs: dict[str, ModelJob] = {}
        self.key = Ed25519PrivateKey.generate()
        pub = self.tmp / "worker.pub"
        pub.write_bytes(
            self.key.public_key().public_bytes(
                serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
            )
        )
        trust_repository(self.layout, pub)
        self.edits = 0
        self.claims = 0

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def state_of(self, job: ModelJob) -> State:
        fresh = sha(self.files[job.path]) == job.input_hash
        if job.folder == "queue":
            return State.QUEUED if fresh else State.STALE
        if job.folder == "applied":
            return State.APPLIED
        if job.folder == "rejected":
            return State.REJECTED
        if job.receipt is None:
            return State.RUNNING if job.alive else State.ORPHANED
        if job.receipt != "ok":
            return State.FAILED
        return State.RECEIVED if fresh else State.STALE

    def keys(self) -> list[str]:
        return sorted(self.jobs)

    def some_key(self, likely: State) -> st.SearchStrategy[str]:
        """Any key, but most often one in the state where the rule does something."""
        wanted = [k for k in self.keys() if self.state_of(self.jobs[k]) is likely]
        anyone = st.sampled_from(self.keys())
        return st.one_of(st.sampled_from(wanted), st.sampled_from(wanted), anyone) if wanted else anyone

    # -- rules -------------------------------------------------------------------------
    @initialize()
    def two_jobs(self) -> None:
        self.mint(0, PATHS[0])
        self.mint(1, PATHS[1])

    @rule(n=st.integers(0, 3), path=st.sampled_from(PATHS))
    def mint(self, n: int, path: str) -> None:
        job = build_job(self.layout, f"Job number {n}.", [path])
        res = enqueue(self.layout, job)
        assert res.created == (job.key not in self.jobs)
        if res.created:
            self.jobs[job.key] = ModelJob(path, sha(self.files[path]), "queue")

    @rule(alive=st.booleans(), data=st.data())
    def claim(self, alive: bool, data: st.DataObject) -> None:
        self.claims += 1
        worker = f"w{self.claims}"
        claimer = Claimer(self.layout, worker, pid=os.getpid() if alive else DEAD_PID)
        queued = sorted(k for k, j in self.jobs.items() if j.folder == "queue")
        fresh = [k for k in queued if self.state_of(self.jobs[k]) is State.QUEUED]
        if not fresh:
            with pytest.raises(NothingToClaim):
                claimer.claim()
            assert set(claimer.skipped) == set(queued)  # each STALE one left, and said why
            return
        key = data.draw(st.sampled_from(queued))
        if key not in fresh:  # its inputs moved: refused before an attempt is spent on it
            with pytest.raises(WrongState, match="is STALE: its inputs changed"):
                claimer.claim(key)
            assert not self.layout.attempts_file(key).exists() or self.jobs[key].token
            return
        c = claimer.claim(key)
        job = self.jobs[c.key]
        job.folder, job.alive, job.token, job.worker = "running", alive, c.lease.token, worker

    @precondition(lambda self: self.jobs)
    @rule(data=st.data(), force=st.booleans())
    def requeue(self, data: st.DataObject, force: bool) -> None:
        key = data.draw(self.some_key(State.ORPHANED))
        job = self.jobs[key]
        state = self.state_of(job)
        if state is State.ORPHANED or (state is State.RUNNING and force):
            requeue(self.layout, key, force)
            job.folder, job.alive = "queue", False
        else:
            with pytest.raises(WrongState):
                requeue(self.layout, key, force)

    @precondition(lambda self: any(j.folder == "running" and j.receipt is None for j in self.jobs.values()))
    @rule(data=st.data(), status=st.sampled_from(["ok", "ok", "rejected", "aborted"]))
    def finish(self, data: st.DataObject, status: str) -> None:
        key = data.draw(
            st.sampled_from(
                [k for k in self.keys() if self.jobs[k].folder == "running" and self.jobs[k].receipt is None]
            )
        )
        job = self.jobs[key]
        doc = self.layout.job_file("running", key)
        loaded, _ = read_job_file(doc, "running")
        outputs = {job.path: f"output of {key}\n".encode()} if status == "ok" else {}
        rec = make_receipt(loaded, status, {p: sha(b) for p, b in outputs.items()}, job.worker)
        staged = stage_outputs(self.layout, outputs) if outputs else None
        res = commit_receipt(self.layout, loaded, rec, job.token, job.worker, staged, self.key)
        assert res.won
        job.receipt = status

    @rule(path=st.sampled_from(PATHS))
    def edit(self, path: str) -> None:
        self.edits += 1
        data = f"{path} edit {self.edits}\n".encode()
        (self.layout.root / path).write_bytes(data)
        self.files[path] = data

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def apply(self, data: st.DataObject) -> None:
        key = data.draw(self.some_key(State.RECEIVED))
        job = self.jobs[key]
        state = self.state_of(job)
        if state is State.RECEIVED:
            res = apply_job(self.layout, key)
            assert res.changed == [job.path]
            job.folder = "applied"
            self.files[job.path] = f"output of {key}\n".encode()
        elif state is State.APPLIED:
            assert apply_job(self.layout, key).already
        elif state in (State.QUEUED, State.REJECTED) or job.folder == "queue":
            with pytest.raises(WrongState, match="only a job with a receipt can be applied"):
                apply_job(self.layout, key)
        else:
            with pytest.raises(VerificationFailed):
                apply_job(self.layout, key)

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def reject(self, data: st.DataObject) -> None:
        key = data.draw(self.some_key(State.FAILED))
        job = self.jobs[key]
        state = self.state_of(job)
        if allowed("reject", state):
            reject(self.layout, key, "not wanted")
            job.folder = "rejected"
        else:
            with pytest.raises(WrongState):
                reject(self.layout, key, "not wanted")

    # -- invariants ----------------------------------------------------------------------
    @invariant()
    def every_state_matches_the_model(self) -> None:
        expected = {k: self.state_of(j) for k, j in self.jobs.items()}
        for snap in (take_snapshot(self.layout), take_snapshot(self.layout, disk_cache=False)):
            assert {k: r.state for k, r in snap.rows.items()} == expected
        rows = refresh(self.layout, expected)  # as the board reads the keys that events name
        assert {k: r.state for k, r in rows.items() if r is not None} == expected

    @invariant()
    def every_job_is_in_exactly_one_folder(self) -> None:
        for key, job in self.jobs.items():
            present = [f for f in FOLDERS if self.layout.job_file(f, key).exists()]
            assert present == [job.folder]

    @invariant()
    def the_tree_holds_what_the_model_says(self) -> None:
        for path, data in self.files.items():
            assert (self.layout.root / path).read_bytes() == data


Lifecycle.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
TestLifecycle = Lifecycle.TestCase
