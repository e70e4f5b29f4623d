"""SIGKILL before every filesystem mutation of committing a candidate and of choosing one.

After each kill every candidate is either whole (its receipt, signature and outputs
verify) or not there at all, so the job is replayable; the v1 receipt is either absent
(nothing chosen) or exactly the chosen candidate's; `recover` leaves no staging folder
or temp file behind, and running the operation again finishes it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from corekit import dead_pid, mint, sha
from crashkit import every_crash
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from test_crash import temp_files

from core.review.candidates import apply_choice
from core.review.recover import recover
from core.review.verify import verify_candidate
from core.store.candidate_store import OUT, Holder, chosen, commit_candidate, load, numbers, staging
from core.store.config import load_config
from core.store.layout import Layout
from core.store.queue import Claim, Claimer
from core.store.receipts import make_receipt

WORKER = "w1"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return tmp_path / "work"


def stage(layout: Layout, claim: Claim, number: int, text: bytes) -> Path:
    """Candidate `number`'s outputs, received into its staging folder as a worker leaves them."""
    folder = staging(layout, claim.key, claim.lease.token, number)
    (folder / OUT / "src").mkdir(parents=True)
    (folder / OUT / "src/app.py").write_bytes(text)
    return folder


def commit(
    layout: Layout, claim: Claim, number: int, batch: list[int], text: bytes, signer: Ed25519PrivateKey
) -> None:
    receipt = make_receipt(claim.job, "ok", {"src/app.py": sha(text)}, WORKER)
    commit_candidate(
        layout,
        claim.job,
        number,
        batch,
        receipt,
        {"host": "gen", "attempt": claim.lease.token},
        Holder(WORKER, claim.lease.token, signer),
    )


def claimed(repo: Layout) -> Claim:
    """A claimed job whose holder is gone (a dead pid), as after a worker's crash."""
    job = mint(repo, "Pick the best.")
    return Claimer(repo, WORKER, pid=dead_pid()).claim(job.key)


def whole(layout: Layout, claim: Claim, number: int, text: bytes) -> None:
    candidate = load(layout, claim.key, number)
    v = verify_candidate(layout, claim.job, load_config(layout.config), candidate)
    assert v.ok, v.failures
    assert (candidate.files.out / "src/app.py").read_bytes() == text


def test_committing_the_last_candidate_killed_anywhere(
    repo: Layout, signer: Ed25519PrivateKey, work: Path
) -> None:
    claim = claimed(repo)
    stage(repo, claim, 1, b"one\n")
    commit(repo, claim, 1, [1, 2], b"one\n", signer)
    stage(repo, claim, 2, b"two\n")
    runs = 0
    for root, killed in every_crash(
        repo.root, work, lambda r: commit(Layout(r), claim, 2, [1, 2], b"two\n", signer)
    ):
        runs += 1
        layout = Layout(root)
        have = numbers(layout, claim.key)
        assert have in ([1], [1, 2]), have
        whole(layout, claim, 1, b"one\n")
        if have == [1, 2]:
            whole(layout, claim, 2, b"two\n")
        assert not layout.receipt(claim.key).exists(), "a candidate never writes the v1 receipt"
        if not killed:
            assert not layout.lease(claim.key).exists(), "the last candidate closed the batch"
        recover(layout)
        assert temp_files(layout.gen) == []
        assert list(layout.out.iterdir()) == [], "the staging folder of the crashed attempt is swept"
        assert numbers(layout, claim.key) == have, "recover never drops a committed candidate"
    assert runs > 5


def test_choosing_and_applying_killed_anywhere(repo: Layout, signer: Ed25519PrivateKey, work: Path) -> None:
    claim = claimed(repo)
    for number, text in ((1, b"one\n"), (2, b"two\n")):
        stage(repo, claim, number, text)
        commit(repo, claim, number, [1, 2], text, signer)
    original = (repo.root / "src/app.py").read_bytes()
    second = (repo.candidate(claim.key, 2) / "receipt.json").read_bytes()
    runs = 0
    for root, killed in every_crash(repo.root, work, lambda r: apply_choice(Layout(r), claim.key, 2)):
        runs += 1
        layout = Layout(root)
        receipt = layout.receipt(claim.key)
        assert not receipt.exists() or receipt.read_bytes() == second, "never half-chosen"
        assert (layout.root / "src/app.py").read_bytes() in (original, b"two\n")
        for number, text in ((1, b"one\n"), (2, b"two\n")):
            kept = load(layout, claim.key, number)
            assert (kept.files.out / "src/app.py").read_bytes() == text, "candidates stay whole"
        recover(layout)
        applied = apply_choice(layout, claim.key, 2)
        assert applied.already or killed, "run to the end, it applied; a second run is a no-op"
        assert (layout.root / "src/app.py").read_bytes() == b"two\n"
        assert receipt.read_bytes() == second and chosen(layout, claim.key) == 2
        assert temp_files(layout.gen) == []
        assert [p.name for p in layout.out.iterdir()] == [claim.job.digest]
    assert runs > 5
