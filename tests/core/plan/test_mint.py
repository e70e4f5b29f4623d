"""The planner plane: minting jobs and enqueueing them."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from corekit import FILES, receive, sha, tree_state

from core.errors import BadInput, KeyConflict, SecretFound
from core.model.canonical import sha256_bytes
from core.model.models import V1, V2, JobV1, JobV2, job_bytes, job_from_bytes
from core.plan.mint import build_job
from core.store.layout import Layout
from core.store.queue import enqueue

AWS_KEY = "AKIA" + "ABCDEFGHIJKLMNOP"


def test_mint_v2_hashes_inputs_and_writes_the_seed_layout(repo: Layout) -> None:
    job = build_job(repo, "Add logging.", ["src/util.py", "src/app.py"])
    assert isinstance(job, JobV2)
    assert job.inputs == {"src/app.py": sha(FILES["src/app.py"]), "src/util.py": sha(FILES["src/util.py"])}
    res = enqueue(repo, job)
    assert res.created and res.folder == "queue"
    assert res.path == repo.queue / f"{job.key}.json"
    assert res.path.read_bytes() == job_bytes(job)
    assert job_from_bytes(res.path.read_bytes(), "x") == job
    events = repo.events.read_text().splitlines()
    assert len(events) == 1 and '"event":"minted"' in events[0]


def test_mint_v1_is_the_seeds_document(repo: Layout) -> None:
    job = build_job(repo, "Add logging.", ["src/util.py", "src/app.py"], schema=V1)
    assert isinstance(job, JobV1)
    assert job.allowed_paths == ["src/util.py", "src/app.py"]
    assert job.attempt == 1
    assert job.key == job.derived_key()
    assert job.digest == job.compute_digest()


def test_the_same_work_twice_collapses_and_changes_nothing(repo: Layout) -> None:
    for schema in (V2, V1):
        first = enqueue(repo, build_job(repo, f"Same {schema}.", ["src/app.py"], schema=schema))
        before = tree_state(repo.root)
        again = enqueue(repo, build_job(repo, f"Same {schema}.", ["src/app.py"], schema=schema))
        assert first.created and not again.created
        assert again.key == first.key and again.path == first.path
        assert tree_state(repo.root) == before


def test_a_duplicate_submit_is_found_in_whatever_state_it_is(repo: Layout, signer: object) -> None:
    job = build_job(repo, "Once.", ["src/app.py"])
    enqueue(repo, job)
    receive(repo, job.key, {"src/app.py": b"new\n"})
    res = enqueue(repo, build_job(repo, "Once.", ["src/app.py"]))
    assert not res.created and res.folder == "running"
    assert not (repo.queue / f"{job.key}.json").exists()


def test_a_key_reused_with_other_content_names_both(repo: Layout) -> None:
    first = build_job(repo, "Order matters in v1.", ["src/app.py", "src/util.py"], schema=V1)
    enqueue(repo, first)
    other = build_job(repo, "Order matters in v1.", ["src/util.py", "src/app.py"], schema=V1)
    assert other.key == first.key and other.digest != first.digest
    before = tree_state(repo.root)
    with pytest.raises(KeyConflict) as err:
        enqueue(repo, other)
    msg = str(err.value)
    assert str(repo.queue / f"{first.key}.json") in msg
    assert first.digest[:16] in msg and other.digest[:16] in msg
    assert tree_state(repo.root) == before


def test_new_paths(repo: Layout) -> None:
    job = build_job(repo, "Split it.", ["src/app.py"], ["src/new/mod.py"])
    assert job.input_digest("src/new/mod.py") is None
    assert job.new_paths() == ["src/new/mod.py"]
    with pytest.raises(BadInput, match=r"src/app\.py: exists already"):
        build_job(repo, "x", [], ["src/app.py"])
    with pytest.raises(BadInput, match=r"genjob\.v1 jobs cannot create files"):
        build_job(repo, "x", ["src/app.py"], ["src/other.py"], schema=V1)


@pytest.mark.parametrize(
    ("paths", "new", "fault"),
    [
        ([], [], "a job needs at least one allowed path"),
        (["src/app.py", "src/app.py"], [], "'src/app.py' named twice"),
        (["src/app.py"], ["src/app.py"], "'src/app.py' named twice"),
        (["src/missing.py"], [], "src/missing.py: no such file"),
        (["../outside.py"], [], "'..' is not allowed"),
        (["/etc/passwd"], [], "absolute path"),
        (["a/../../b"], [], "'..' is not allowed"),
        ([".gen/config.toml"], [], "under .gen/"),
        ([".git/config"], [], "under .git/"),
        (["src"], [], "src: a folder, not a regular file"),
    ],
)
def test_bad_mints_are_refused(repo: Layout, paths: list[str], new: list[str], fault: str) -> None:
    with pytest.raises(BadInput) as err:
        build_job(repo, "Do it.", paths, new)
    assert fault in str(err.value)


def test_an_empty_instruction_is_refused(repo: Layout) -> None:
    with pytest.raises(BadInput, match="instruction: empty"):
        build_job(repo, "  \n", ["src/app.py"])


def test_unknown_schema_is_refused(repo: Layout) -> None:
    with pytest.raises(BadInput, match="unknown schema"):
        build_job(repo, "x", ["src/app.py"], schema="genjob.v9")


def test_symlinked_files_and_parents_are_refused(repo: Layout, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("nothing to see")
    (repo.root / "linked").symlink_to(outside)
    (repo.root / "src/link.py").symlink_to("app.py")
    with pytest.raises(BadInput, match="linked is a symlink, not a folder"):
        build_job(repo, "x", ["linked/secret.txt"])
    with pytest.raises(BadInput, match=r"src/link\.py: a symlink, not a regular file"):
        build_job(repo, "x", ["src/link.py"])
    with pytest.raises(BadInput, match="passes through the symlink"):
        build_job(repo, "x", ["src/app.py"], ["linked/new.py"])


def test_secrets_are_refused_unless_allowed(repo: Layout) -> None:
    with pytest.raises(SecretFound, match="instruction: looks like it holds a secret: AWS access key id"):
        build_job(repo, f"Use {AWS_KEY} to deploy.", ["src/app.py"])
    (repo.root / "src/conf.py").write_text(f'TOKEN = "x"\naws = "{AWS_KEY}"\n')
    with pytest.raises(SecretFound, match=r"src/conf.py: .*AWS access key id \(line 2\)"):
        build_job(repo, "Tidy.", ["src/conf.py"])
    job = build_job(repo, f"Use {AWS_KEY}.", ["src/conf.py"], allow_secrets=True)
    assert job.instruction.endswith(f"{AWS_KEY}.")


@pytest.mark.parametrize(
    "text",
    [
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "ghp_" + "a" * 36,
        "xoxb-" + "1234567890-abc",
        "sk-ant-" + "x" * 40,
        'password = "' + "hunter2hunter2" + '"',
    ],
)
def test_secret_patterns(repo: Layout, text: str) -> None:
    with pytest.raises(SecretFound):
        build_job(repo, f"Here:\n{text}\n", ["src/app.py"])


def test_minting_does_not_touch_the_tree(repo: Layout) -> None:
    before = {p: s for p, s in tree_state(repo.root).items() if not p.startswith(".gen")}
    enqueue(repo, build_job(repo, "Look only.", ["src/app.py"], ["src/new.py"]))
    after = {p: s for p, s in tree_state(repo.root).items() if not p.startswith(".gen")}
    assert after == before


def test_concurrent_enqueues_of_one_job_make_one_file(repo: Layout) -> None:
    job = build_job(repo, "Race me.", ["src/app.py"])
    results = []

    def go() -> None:
        results.append(enqueue(repo, job))

    threads = [threading.Thread(target=go) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(r.created for r in results) == 1
    assert {r.path for r in results} == {repo.queue / f"{job.key}.json"}
    assert [n for n in os.listdir(repo.queue)] == [f"{job.key}.json"]


def test_hash_of_a_large_input_streams(repo: Layout) -> None:
    data = os.urandom(9 * 1024 * 1024)
    (repo.root / "blob.bin").write_bytes(data)
    job = build_job(repo, "Big.", ["blob.bin"])
    assert job.input_digest("blob.bin") == sha256_bytes(data)
