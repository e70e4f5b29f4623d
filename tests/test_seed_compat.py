"""`genjob.v1` is the seed's contract: its own two files, run as written, interoperate with core.

The seed's `genjob.py` and `receipt.py` are taken from the article at test time
(`../shared/seed/` next to the repository) and imported from a temp folder.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from corekit import cli, sha, stage_outputs
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.model.lifecycle import State
from core.model.models import V1, JobV1, job_bytes
from core.plan.mint import build_job
from core.read.snapshot import take_snapshot
from core.review.apply_job import apply_job
from core.review.verify import verify
from core.store.config import load_config
from core.store.layout import Layout
from core.store.queue import claim, enqueue, locate
from core.store.receipts import commit_receipt, make_receipt

ARTICLE = Path(__file__).resolve().parents[2] / "shared" / "seed" / "replay-the-job-not-the-chat.md"


def code_block(text: str, marker: str) -> str:
    """The Python that follows `marker` in the article: the longest run of lines that parses."""
    lines = text.splitlines()
    start = lines.index(marker)
    best = None
    for end in range(start + 1, len(lines) + 1):
        if end < len(lines) and lines[end].strip():
            continue
        candidate = "\n".join(lines[start:end]) + "\n"
        try:
            ast.parse(candidate)
        except SyntaxError:
            continue
        best = candidate
    assert best is not None, f"no Python after {marker!r}"
    return best


@dataclass
class Seed:
    genjob: ModuleType
    receipt: ModuleType


@pytest.fixture
def seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Seed:
    if not ARTICLE.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{ARTICLE}: the seed article is missing (CI must check out shared/ beside the repo)")
        pytest.skip(f"{ARTICLE} not present")
    text = ARTICLE.read_text()
    folder = tmp_path / "seed"
    folder.mkdir()
    (folder / "genjob.py").write_text(code_block(text, "# genjob.py"))
    (folder / "receipt.py").write_text(code_block(text, "# receipt.py"))
    monkeypatch.syspath_prepend(str(folder))
    for name in ("genjob", "receipt"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import genjob  # type: ignore[import-not-found]
    import receipt  # type: ignore[import-not-found]

    for name in ("genjob", "receipt"):
        monkeypatch.setitem(sys.modules, name, sys.modules[name])
    assert genjob.SCHEMA == V1
    return Seed(genjob, receipt)


def seed_job_from(path: Path, seed: Seed) -> Any:
    """What the seed's own flow does with a job file: drop `digest`, build the dataclass."""
    raw = json.loads(path.read_text())
    stored = raw.pop("digest")
    job = seed.genjob.GenerationJob(**raw)
    assert job.digest() == stored
    return job


def test_the_extracted_blocks_are_the_seeds_two_files(seed: Seed) -> None:
    assert {"sha256_bytes", "sha256_file", "canonical", "GenerationJob", "mint_job"} <= set(vars(seed.genjob))
    assert {"Receipt", "verify_receipt", "ALLOWED_STATUS"} <= set(vars(seed.receipt))


def test_a_seed_job_goes_through_the_whole_lifecycle(
    repo: Layout, signer: Ed25519PrivateKey, seed: Seed
) -> None:
    minted = seed.genjob.mint_job(repo.root, "Return two.", ["src/util.py", "src/app.py"])
    path = minted.write(repo.queue)
    assert path == repo.queue / f"{minted.idempotency_key}.json"
    loc = locate(repo, minted.idempotency_key)
    assert isinstance(loc.job, JobV1) and loc.folder == "queue"
    assert loc.job.digest == minted.digest() and loc.job.key == minted.idempotency_key
    assert job_bytes(loc.job) == path.read_bytes(), "core lays the file out exactly as the seed does"
    assert take_snapshot(repo).rows[minted.idempotency_key].state is State.QUEUED
    c = claim(repo, "w1")
    assert c.key == minted.idempotency_key
    outputs = {"src/app.py": b"def main():\n    return 2\n"}
    rec = make_receipt(c.job, "ok", {p: sha(b) for p, b in outputs.items()}, "w1")
    staged = stage_outputs(repo, outputs)
    assert commit_receipt(repo, c.job, rec, c.lease.token, "w1", staged, signer).won
    assert verify(repo, c.job, load_config(repo.config)).ok
    apply_job(repo, c.key)
    assert (repo.root / "src/app.py").read_bytes() == outputs["src/app.py"]
    assert locate(repo, c.key).folder == "applied"


def test_a_receipt_made_here_passes_the_seeds_verifier(
    repo: Layout, signer: Ed25519PrivateKey, seed: Seed
) -> None:
    job = build_job(repo, "Make it better.", ["src/app.py", "README.md"], schema=V1)
    enqueue(repo, job)
    c = claim(repo, "w1")
    outputs = {"src/app.py": b"better\n", "README.md": b"# better\n"}
    rec = make_receipt(c.job, "ok", {p: sha(b) for p, b in outputs.items()}, "w1")
    commit_receipt(repo, c.job, rec, c.lease.token, "w1", stage_outputs(repo, outputs), signer)
    seed_rec = seed.receipt.Receipt.load(repo.receipt(job.key))
    seed_job = seed_job_from(repo.running / f"{job.key}.json", seed)
    seed.receipt.verify_receipt(seed_job, seed_rec, repo.out_dir(job.digest))
    assert seed_rec.outputs == rec.outputs and seed_rec.worker_id == "w1"


def test_the_seeds_verifier_and_core_agree_on_drift(
    repo: Layout, signer: Ed25519PrivateKey, seed: Seed
) -> None:
    job = build_job(repo, "Make it better.", ["src/app.py"], schema=V1)
    enqueue(repo, job)
    c = claim(repo, "w1")
    rec = make_receipt(c.job, "ok", {"src/app.py": sha(b"better\n")}, "w1")
    commit_receipt(
        repo, c.job, rec, c.lease.token, "w1", stage_outputs(repo, {"src/app.py": b"better\n"}), signer
    )
    (repo.out_dir(job.digest) / "src/app.py").write_bytes(b"worse\n")
    with pytest.raises(ValueError, match=r"artifact drift at src/app\.py"):
        seed.receipt.verify_receipt(
            seed_job_from(repo.running / f"{job.key}.json", seed),
            seed.receipt.Receipt.load(repo.receipt(job.key)),
            repo.out_dir(job.digest),
        )
    assert [c.name for c in verify(repo, job, load_config(repo.config)).failures] == ["hashes"]


def test_a_core_v1_job_is_a_seed_job(repo: Layout, seed: Seed) -> None:
    job = build_job(repo, "Same bytes.", ["src/util.py", "docs/guide.md"], schema=V1)
    res = enqueue(repo, job)
    seed_job = seed_job_from(res.path, seed)
    assert seed_job.idempotency_key == job.key
    again = seed.genjob.mint_job(repo.root, "Same bytes.", ["src/util.py", "docs/guide.md"])
    assert again.idempotency_key == job.key, "the seed derives the same key from the same work"


def test_a_duplicate_seed_submit_collapses(repo: Layout, seed: Seed) -> None:
    first = seed.genjob.mint_job(repo.root, "Twice.", ["src/app.py"])
    path = first.write(repo.queue)
    original = path.read_bytes()
    second = seed.genjob.mint_job(repo.root, "Twice.", ["src/app.py"])
    assert second.digest() != first.digest(), "the seed's digest covers a fresh uuid and time"
    res = enqueue(repo, locate(repo, first.idempotency_key).job.model_copy())
    assert not res.created
    key = cli("mint", "--schema", "v1", "-m", "Twice.", str(repo.root / "src/app.py"), root=repo.root)
    assert key.exit_code == 0 and key.stdout.strip() == first.idempotency_key
    assert path.read_bytes() == original


def test_the_cli_lists_and_claims_a_seed_job(repo: Layout, seed: Seed) -> None:
    minted = seed.genjob.mint_job(repo.root, "Listed.", ["README.md"])
    minted.write(repo.queue)
    rows = json.loads(cli("ls", "--json", root=repo.root).stdout)
    assert [(r["key"], r["state"], r["schema"]) for r in rows] == [(minted.idempotency_key, "QUEUED", V1)]
    res = cli("claim", "--worker", "w1", root=repo.root)
    assert res.exit_code == 0 and res.stdout.strip() == minted.idempotency_key


def test_a_replayed_seed_job_is_a_seed_job_with_a_new_job_id_and_the_next_attempt(
    repo: Layout, seed: Seed
) -> None:
    minted = seed.genjob.mint_job(repo.root, "Replay me.", ["src/app.py"])
    minted.write(repo.queue)
    assert cli("reject", minted.idempotency_key, "--reason", "not this", root=repo.root).exit_code == 0
    (repo.root / "src/app.py").write_bytes(b"the base moved\n")
    res = cli("replay", minted.idempotency_key, root=repo.root)
    assert res.exit_code == 0, res.output
    new_key = res.stdout.split()[0]
    replayed = seed_job_from(locate(repo, new_key).path, seed)
    assert replayed.schema == V1 and replayed.attempt == minted.attempt + 1
    assert replayed.job_id != minted.job_id
    again = seed.genjob.mint_job(repo.root, "Replay me.", ["src/app.py"])
    assert replayed.idempotency_key == again.idempotency_key, "the seed derives the replay's key itself"
