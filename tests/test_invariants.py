"""One test per invariant of DESIGN.md ("Invariants (each one a test)")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from corekit import cli, mint, receive, set_config, sha, tree_files, tree_state, write_jobs, write_receipt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import BadInput, KeyConflict, NothingToClaim, VerificationFailed, WrongState
from core.model.models import V1, Job, job_bytes
from core.plan.mint import build_job
from core.read.snapshot import take_snapshot
from core.review.apply_job import apply_job
from core.store.layout import Layout
from core.store.queue import Claimer, claim, enqueue, locate, requeue

HERE = Path(__file__).resolve().parent
FOLDERS = ("queue", "running", "applied", "rejected")


def folders(layout: Layout, key: str) -> list[str]:
    return [f for f in FOLDERS if layout.job_file(f, key).exists()]


# 1. A job document never changes after enqueue. Same work, same key; a key reused with
#    other content is an error naming both.
def test_1_a_job_document_never_changes_after_enqueue(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo, "Never changes.", ["src/app.py"])
    original = (repo.queue / f"{job.key}.json").read_bytes()
    claim(repo, "w1")
    assert (repo.running / f"{job.key}.json").read_bytes() == original
    requeue(repo, job.key, force=True)
    assert (repo.queue / f"{job.key}.json").read_bytes() == original
    assert enqueue(repo, build_job(repo, "Never changes.", ["src/app.py"])).created is False
    assert (repo.queue / f"{job.key}.json").read_bytes() == original
    receive(repo, job.key, {"src/app.py": b"new\n"}, signer)
    assert (repo.running / f"{job.key}.json").read_bytes() == original
    apply_job(repo, job.key)
    record = json.loads(repo.job_file("applied", job.key).read_bytes())
    assert record["job"] == json.loads(original)


def test_1_a_key_reused_with_other_content_names_both(repo: Layout) -> None:
    first = build_job(repo, "Reused.", ["src/app.py", "src/util.py"], schema=V1)
    path = enqueue(repo, first).path
    other = build_job(repo, "Reused.", ["src/util.py", "src/app.py"], schema=V1)
    with pytest.raises(KeyConflict) as err:
        enqueue(repo, other)
    message = str(err.value)
    assert str(path) in message
    assert first.digest[:16] in message and other.digest[:16] in message
    assert path.read_bytes() == job_bytes(first)


# 2. A job is never lost: after a crash at any instruction, every job is in exactly one
#    state folder, or in an INCONSISTENT pair that a documented rule resolves.
KILLED_CLI = """
import os, signal, sys
from crashkit import mutates
from tui.cli import main

n, seen = int(sys.argv[1]), 0


def hook(event, args):
    global seen
    if mutates(event, args):
        seen += 1
        if seen == n:
            os.kill(os.getpid(), signal.SIGKILL)


sys.addaudithook(hook)
main(sys.argv[2:])
"""


def test_2_no_job_is_lost_when_genjob_is_killed_anywhere(repo: Layout, tmp_path: Path) -> None:
    keys = write_jobs(repo, 3)
    work = tmp_path / "work"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)])}
    n, outcomes = 0, []
    while not outcomes or outcomes[-1] != 0:
        n += 1
        if work.exists():
            shutil.rmtree(work)
        shutil.copytree(repo.root, work, symlinks=True)
        args = [sys.executable, "-c", KILLED_CLI, str(n), "--root", str(work), "claim", "--worker", "w1"]
        proc = subprocess.run(args, env=env, capture_output=True, text=True)
        assert proc.returncode in (0, -9), proc.stderr
        outcomes.append(proc.returncode)
        layout = Layout(work)
        rows = take_snapshot(layout, disk_cache=False).rows
        for key in keys:
            where = folders(layout, key)
            assert where, f"{key} was lost after a kill before mutation {n}"
            assert len(where) == 1 or rows[key].problems[-1].startswith("R4")
        assert cli("recover", root=work).exit_code == 0
        assert all(len(folders(layout, key)) == 1 for key in keys)
        running = sum(folders(layout, k) == ["running"] for k in keys)
        assert running == 1 if proc.returncode == 0 else running <= 1
    assert outcomes.count(-9) >= 3


# 3. Exactly one claimer wins a job, however many race.
def test_3_exactly_one_claimer_wins(repo: Layout) -> None:
    keys = write_jobs(repo, 10)
    for key in keys:
        ready_r, ready_w = os.pipe()
        children = []
        for i in range(8):
            pid = os.fork()
            if pid == 0:
                os.close(ready_w)
                os.read(ready_r, 1)
                try:
                    Claimer(repo, f"racer-{i}").claim(key)
                    os._exit(0)
                except WrongState:
                    os._exit(1)
                except BaseException:
                    os._exit(2)
            children.append(pid)
        os.close(ready_r)
        os.close(ready_w)
        codes = sorted(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children)
        assert codes == [0] + [1] * 7, codes
        assert folders(repo, key) == ["running"]
    with pytest.raises(NothingToClaim):
        claim(repo, "late")


# 4. Nothing is written into the tree without: a receipt that verifies, a trusted
#    signature (by policy), and every target path still at the job's input hash.
def _no_receipt(layout: Layout, job: Job, signer: Ed25519PrivateKey) -> None:
    claim(layout, "w1", job.key)


def _bad_receipt(layout: Layout, job: Job, signer: Ed25519PrivateKey) -> None:
    receive(layout, job.key, {"src/app.py": b"new\n"}, signer)
    doc = json.loads(layout.receipt(job.key).read_bytes())
    doc["outputs"]["src/app.py"] = sha(b"something else")
    write_receipt(layout, job.key, doc, signer)


def _unsigned(layout: Layout, job: Job, signer: Ed25519PrivateKey) -> None:
    receive(layout, job.key, {"src/app.py": b"new\n"}, None)


def _untrusted(layout: Layout, job: Job, signer: Ed25519PrivateKey) -> None:
    receive(layout, job.key, {"src/app.py": b"new\n"}, Ed25519PrivateKey.generate())


def _moved_base(layout: Layout, job: Job, signer: Ed25519PrivateKey) -> None:
    receive(layout, job.key, {"src/app.py": b"new\n"}, signer)
    (layout.root / "src/app.py").write_text("edited by a human\n")


@pytest.mark.parametrize(
    "missing", [_no_receipt, _bad_receipt, _unsigned, _untrusted, _moved_base], ids=lambda f: f.__name__[1:]
)
def test_4_nothing_is_written_without_every_condition(
    repo: Layout, signer: Ed25519PrivateKey, missing: object
) -> None:
    job = mint(repo, "Guarded.", ["src/app.py"])
    missing(repo, job, signer)  # type: ignore[operator]
    before = tree_state(repo.root)
    with pytest.raises(VerificationFailed):
        apply_job(repo, job.key)
    assert tree_state(repo.root) == before


def test_4_the_signature_policy_can_be_turned_off_and_says_so(repo: Layout) -> None:
    set_config(repo, repo.config.read_text().replace("require_signature = true", "require_signature = false"))
    job = mint(repo, "Unsigned.", ["src/app.py"])
    receive(repo, job.key, {"src/app.py": b"new\n"}, None)
    res = apply_job(repo, job.key)
    assert res.verification is not None and not res.verification.signature_required
    assert (repo.root / "src/app.py").read_bytes() == b"new\n"
    assert json.loads(repo.job_file("applied", job.key).read_bytes())["apply"]["signature_required"] is False


# 5. Apply is all-or-nothing from the user's view and idempotent: run it again after a
#    crash and it finishes; run it twice and the second is a no-op.
def test_5_apply_is_all_or_nothing_and_idempotent(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo, "Three files.", ["src/app.py", "src/util.py", "README.md"])
    new = {"README.md": b"# new\n", "src/app.py": b"app = 2\n", "src/util.py": b"util = 2\n"}
    receive(repo, job.key, new, signer)
    old_tree = tree_files(repo.root)
    blocker = repo.root / "src" / f".genjob-{job.key[:16]}-2.tmp"  # the copy of src/util.py
    blocker.mkdir()
    (blocker / "keep").write_text("in the way")
    with pytest.raises(BadInput, match=r"src/util\.py: a folder \.genjob-.*-2\.tmp beside it"):
        apply_job(repo, job.key)
    assert {p: b for p, b in tree_files(repo.root).items() if ".genjob-" not in p} == old_tree
    assert (blocker / "keep").read_text() == "in the way"
    shutil.rmtree(blocker)
    res = apply_job(repo, job.key)
    assert sorted(res.changed) == sorted(new)
    assert tree_files(repo.root) == {**old_tree, **new}
    before = tree_state(repo.root)
    assert apply_job(repo, job.key).already
    assert tree_state(repo.root) == before


# 6. Outputs never escape .gen/out/<digest>/ or the allowed paths: no "..", no absolute
#    paths, no links, no devices, no unbounded sizes.
def _escape(layout: Layout, job: Job, outside: Path, signer: Ed25519PrivateKey) -> None:
    receive(layout, job.key, {"src/app.py": b"new\n"}, signer)
    doc = json.loads(layout.receipt(job.key).read_bytes())
    doc["outputs"] = {"../outside/victim.txt": sha(b"pwned")}
    write_receipt(layout, job.key, doc, signer)


def _absolute(layout: Layout, job: Job, outside: Path, signer: Ed25519PrivateKey) -> None:
    receive(layout, job.key, {"src/app.py": b"new\n"}, signer)
    doc = json.loads(layout.receipt(job.key).read_bytes())
    doc["outputs"] = {str(outside / "victim.txt"): sha(b"pwned")}
    write_receipt(layout, job.key, doc, signer)


def _linked_output(layout: Layout, job: Job, outside: Path, signer: Ed25519PrivateKey) -> None:
    receive(layout, job.key, {"src/app.py": b"new\n"}, signer)
    out = layout.out_dir(job.digest) / "src/app.py"
    out.unlink()
    out.symlink_to(outside / "victim.txt")


def _linked_out_folder(layout: Layout, job: Job, outside: Path, signer: Ed25519PrivateKey) -> None:
    receive(layout, job.key, {"src/app.py": b"new\n"}, signer)
    out = layout.out_dir(job.digest) / "src"
    shutil.rmtree(out)
    (outside / "app.py").write_bytes(b"new\n")
    out.symlink_to(outside)


def _linked_tree_folder(layout: Layout, job: Job, outside: Path, signer: Ed25519PrivateKey) -> None:
    receive(layout, job.key, {"src/app.py": b"new\n"}, signer)
    shutil.copytree(layout.root / "src", outside / "src")
    shutil.rmtree(layout.root / "src")
    (layout.root / "src").symlink_to(outside / "src")


def _device(layout: Layout, job: Job, outside: Path, signer: Ed25519PrivateKey) -> None:
    receive(layout, job.key, {"src/app.py": b"new\n"}, signer)
    out = layout.out_dir(job.digest) / "src/app.py"
    out.unlink()
    os.mkfifo(out)


def _oversize(layout: Layout, job: Job, outside: Path, signer: Ed25519PrivateKey) -> None:
    receive(layout, job.key, {"src/app.py": b"x" * 4096}, signer)
    text = layout.config.read_text().replace("max_file_bytes = 67108864", "max_file_bytes = 1024")
    set_config(layout, text)


@pytest.mark.parametrize(
    "attack",
    [_escape, _absolute, _linked_output, _linked_out_folder, _linked_tree_folder, _device, _oversize],
    ids=lambda f: f.__name__[1:],
)
def test_6_outputs_never_escape(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, attack: object
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_bytes(b"precious\n")
    job = mint(repo, "Stay inside.", ["src/app.py"])
    attack(repo, job, outside, signer)  # type: ignore[operator]
    before_repo, before_outside = tree_state(repo.root), tree_state(outside)
    with pytest.raises(VerificationFailed):
        apply_job(repo, job.key)
    assert tree_state(repo.root) == before_repo
    assert tree_state(outside) == before_outside
    assert (outside / "victim.txt").read_bytes() == b"precious\n"


# 7. The generator gets the instruction as data, never as shell text. (Running the
#    generator is the runner's; here: the instruction is stored and shown byte for byte.)
def test_7_the_instruction_is_data(in_repo: Layout) -> None:
    instruction = "Fix it; touch pwned && echo $(id) `whoami` '\"' $HOME\n\tand a second line \\n"
    res = cli("mint", "-f", "-", "src/app.py", input=instruction)
    assert res.exit_code == 0
    key = res.stdout.strip()
    assert locate(in_repo, key).job.instruction == instruction
    [row] = json.loads(cli("ls", "--json").stdout)
    assert row["instruction"] == instruction
    assert not (in_repo.root / "pwned").exists()


# 8. A bad input gets one clear message naming the file and the fault; nothing half-done.
#    (Every kind of bad input: tests/test_bad_inputs.py.)
def test_8_a_bad_input_gets_one_clear_message_and_changes_nothing(repo: Layout) -> None:
    [key] = write_jobs(repo, 1)
    path = repo.queue / f"{key}.json"
    path.write_bytes(path.read_bytes().replace(b'"created_at": 1767225600', b'"created_at": NaN'))
    before = tree_state(repo.root)
    for args in (["verify", key], ["apply", key], ["claim", key, "--worker", "w1"]):
        res = cli(*args, root=repo.root)
        assert res.exit_code == 2
        assert res.stderr == f"genjob: {path}: refused JSON (NaN is not JSON)\n"
        assert tree_state(repo.root) == before
