"""Best-of-N: candidates of one job run in parallel over several hosts, each with its own
signed receipt; one is chosen and applied byte for byte, the others stay as evidence.

Real repositories, real generators (a local subprocess and bwrap through the command
transport), real kills.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
from pathlib import Path

import pytest
from corekit import cli, mint, set_config
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import (
    PY,
    CommandHost,
    alive,
    genjob,
    host_block,
    script,
    start_genjob,
    stop_process,
    wait_for,
    write_config,
)

from core.errors import BadInput, NotFound, VerificationFailed, WrongState
from core.read.candidate_view import views
from core.review.candidates import apply_choice, choose
from core.review.recover import recover
from core.review.verify import verify_candidate
from core.store.candidate_store import chosen, load, load_all, numbers
from core.store.config import load_config
from core.store.layout import Layout
from core.store.queue import locate, requeue
from core.store.signing import sign
from core.work.ship_candidates import CandidateRequest, candidate_hosts, ship_candidates
from core.work.worker import run_worker

pytestmark = pytest.mark.timeout(180)


def says(tmp: Path, name: str, text: str, fail_after_first: bool = False) -> str:
    """A generator writing `text` to src/app.py; with `fail_after_first`, every run after the
    host's first exits 3 (a counter file beside the script tells them apart)."""
    counter = tmp / f"{name}.runs"
    code = "import os, sys\n"
    if fail_after_first:
        code += (
            f"try:\n    os.close(os.open({str(counter)!r}, os.O_CREAT | os.O_EXCL | os.O_WRONLY))\n"
            "except FileExistsError:\n    print('second run: failing', flush=True)\n    sys.exit(3)\n"
        )
    code += f"open('src/app.py', 'w').write({text!r})\n"
    return script(tmp, name, code)


def two_hosts(repo: Layout, tmp: Path) -> None:
    """`a`: a local host, one run at a time, whose second run fails; `b`: bwrap through
    the command transport."""
    write_config(
        repo,
        host_block("a", None, says(tmp, "a", "from a\n", fail_after_first=True), concurrency=1),
        host_block("b", CommandHost(None), says(tmp, "b", "from b\n"), concurrency=2),
    )


def job_state(repo: Layout, key: str) -> str:
    rows = json.loads(cli("ls", "--json", root=repo.root).output)
    return next(r["state"] for r in rows if r["key"] == key)


async def test_three_candidates_over_two_hosts_one_failing_choose_the_second(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    two_hosts(repo, tmp_path)
    job = mint(repo, "Say where you ran.")
    original = (repo.root / "src/app.py").read_bytes()
    results = await ship_candidates(repo, CandidateRequest(job.key, ["a", "b"], 3), worker_id="tester")
    assert [(r.candidate, r.host, r.status, r.won) for r in results] == [
        (1, "a", "ok", True),
        (2, "b", "ok", True),
        (3, "a", "rejected", True),
    ]
    assert results[2].reason == "the generator exited with status 3"
    # The v1 layout is untouched until a choice: a seed-compatible reader sees no receipt.
    assert not repo.receipt(job.key).exists() and not repo.out_dir(job.digest).exists()
    assert not repo.lease(job.key).exists(), "the last candidate in closed the batch"
    assert numbers(repo, job.key) == [1, 2, 3]
    config = load_config(repo.config)
    verdicts = [verify_candidate(repo, job, config, load(repo, job.key, n)) for n in (1, 2, 3)]
    assert [v.ok for v in verdicts] == [True, True, False]
    assert [c.name for c in verdicts[2].failures] == ["status"]
    assert all(v.check("signature").passed for v in verdicts), "each candidate carries its own signature"
    shown = views(repo, job.key)
    assert [(c.number, c.host, c.status, c.ok, c.files, c.added, c.removed) for c in shown] == [
        (1, "a", "ok", True, 1, 1, 2),
        (2, "b", "ok", True, 1, 1, 2),
        (3, "a", "rejected", False, 0, 0, 0),
    ]
    assert (repo.root / "src/app.py").read_bytes() == original, "nothing touched the tree yet"

    applied = apply_choice(repo, job.key, 2)
    assert applied.changed == ["src/app.py"]
    second = repo.candidate(job.key, 2)
    assert (repo.root / "src/app.py").read_bytes() == (second / "out/src/app.py").read_bytes() == b"from b\n"
    assert repo.receipt(job.key).read_bytes() == (second / "receipt.json").read_bytes()
    assert repo.signature(job.key).read_bytes() == (second / "receipt.sig").read_bytes()
    assert chosen(repo, job.key) == 2
    # The others stay as evidence, whole: their outputs still hash to their receipts.
    first = load(repo, job.key, 1)
    assert (first.files.out / "src/app.py").read_bytes() == b"from a\n"
    kept = verify_candidate(repo, job, config, first)
    assert [c.name for c in kept.failures] == ["base"], "only the tree moved on"
    assert load(repo, job.key, 3).status == "rejected"
    assert job_state(repo, job.key) == "APPLIED"
    listed = cli("candidates", job.key, root=repo.root)
    assert "candidates of" in listed.output and "candidate 2 chosen" in listed.output


async def test_apply_without_a_choice_names_the_way_on(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    two_hosts(repo, tmp_path)
    job = mint(repo)
    await ship_candidates(repo, CandidateRequest(job.key, ["b"], 2), worker_id="tester")
    with pytest.raises(WrongState, match=r"has 2 candidate\(s\) and none is chosen"):
        apply_choice(repo, job.key, None)
    refused = cli("apply", job.key, root=repo.root)
    assert refused.exit_code == 2 and f"genjob apply {job.key} --candidate N" in refused.stderr
    with pytest.raises(NotFound, match=r"no candidate 7 \(candidates: 1, 2\)"):
        choose(repo, job.key, 7)
    done = cli("apply", job.key, "--candidate", "1", root=repo.root)
    assert done.exit_code == 0, done.output
    assert (repo.root / "src/app.py").read_bytes() == b"from b\n"
    again = cli("apply", job.key, "--candidate", "1", root=repo.root)
    assert again.exit_code == 0 and "applied already" in again.output
    other = cli("apply", job.key, "--candidate", "2", root=repo.root)
    assert other.exit_code == 2 and "is APPLIED" in other.stderr


async def test_required_checks_run_on_the_chosen_candidate_before_it_is_applied(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """Checks run on the job's chosen receipt: `apply --candidate N` chooses, stops at the
    required check and says how to go on; the check runs on that candidate's bytes."""
    two_hosts(repo, tmp_path)
    wants_b = "python3 -c \"import sys; sys.exit(open('src/app.py').read() != 'from b\\\\n')\""
    text = repo.config.read_text().replace("[policy]\n", '[policy]\nrequire_checks = ["tests"]\n', 1)
    set_config(repo, text + f'\n[checks.tests]\nrun = {json.dumps(wants_b)}\nsandbox = "none"\n')
    job = mint(repo)
    original = (repo.root / "src/app.py").read_bytes()
    await ship_candidates(repo, CandidateRequest(job.key, ["b"], 2), worker_id="tester")
    stopped = cli("apply", job.key, "--candidate", "2", root=repo.root)
    assert stopped.exit_code != 0
    assert "chose candidate 2 as the job's receipt" in stopped.stderr
    assert f"genjob check {job.key} --name tests" in stopped.stderr
    assert chosen(repo, job.key) == 2 and (repo.root / "src/app.py").read_bytes() == original
    checked = await asyncio.to_thread(cli, "check", job.key, root=repo.root)
    assert checked.exit_code == 0, checked.output + checked.stderr
    done = cli("apply", job.key, root=repo.root)
    assert done.exit_code == 0, done.stderr
    assert (repo.root / "src/app.py").read_bytes() == b"from b\n"


async def test_a_candidate_is_checked_like_a_receipt_before_it_is_chosen(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    two_hosts(repo, tmp_path)
    job = mint(repo)
    await ship_candidates(repo, CandidateRequest(job.key, ["b"], 3), worker_id="tester")
    drifted, forged, unsigned = (load(repo, job.key, n) for n in (1, 2, 3))
    (drifted.files.out / "src/app.py").write_bytes(b"edited after signing\n")
    stranger = Ed25519PrivateKey.generate()
    forged.files.signature.write_bytes(sign(stranger, forged.files.receipt.read_bytes()))
    unsigned.files.signature.unlink()
    config = load_config(repo.config)
    checks = {
        n: [c.name for c in verify_candidate(repo, job, config, load(repo, job.key, n)).failures]
        for n in (1, 2, 3)
    }
    assert checks == {1: ["hashes"], 2: ["signature"], 3: ["signature"]}
    for n in (1, 2, 3):
        with pytest.raises(VerificationFailed, match=f"candidate {n} does not verify"):
            choose(repo, job.key, n)
    assert not repo.receipt(job.key).exists() and not repo.out_dir(job.digest).exists()
    assert not repo.signature(job.key).exists(), "nothing half-chosen"
    refused = cli("verify", job.key, "--candidate", "2", root=repo.root)
    assert refused.exit_code == 1 and "[FAIL] signature" in refused.output


def candidate_sleeper(folder: Path) -> str:
    """A generator shell that starts a child, records both pids and its workspace in a
    file of its own under `folder`, says "started", then waits."""
    folder.mkdir(exist_ok=True)
    return (
        f"{PY} -c 'import time; time.sleep(600)' & "
        f'echo "$$ $! $(pwd)" > {shlex.quote(str(folder))}/$$.txt; echo started; wait'
    )


def recorded(folder: Path, count: int) -> list[tuple[list[int], Path]]:
    def done() -> bool:
        files = list(folder.glob("*.txt"))
        return len(files) >= count and all(f.read_text().endswith("\n") for f in files)

    wait_for(done, f"{count} generators to start")
    found = []
    for f in sorted(folder.glob("*.txt")):
        pid, child, workdir = f.read_text().split()
        found.append(([int(pid), int(child)], Path(workdir)))
    return found


async def test_a_cancel_stops_every_candidate(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    reports = tmp_path / "reports"
    gen = candidate_sleeper(reports)
    write_config(
        repo,
        host_block("a", None, gen, concurrency=2),
        host_block("b", CommandHost(None), gen, concurrency=2),
    )
    job = mint(repo)
    running = asyncio.ensure_future(
        ship_candidates(repo, CandidateRequest(job.key, ["a", "b"], 3), worker_id="tester")
    )
    started = await asyncio.to_thread(recorded, reports, 3)
    assert cli("cancel", job.key, root=repo.root).exit_code == 0
    results = await running
    assert [(r.candidate, r.status, r.reason) for r in results] == [
        (n, "aborted", "cancelled by the operator (genjob cancel)") for n in (1, 2, 3)
    ]
    for pids, workdir in started:
        await asyncio.to_thread(wait_for, lambda p=pids: not any(alive(x) for x in p), f"{pids} to end")
        await asyncio.to_thread(wait_for, lambda w=workdir: not w.exists(), f"{workdir} removed")
    assert not repo.cancel_request(job.key).exists() and not repo.lease(job.key).exists()
    assert [load(repo, job.key, n).status for n in (1, 2, 3)] == ["aborted"] * 3
    assert job_state(repo, job.key) == "FAILED"


async def test_sigkilled_worker_mid_batch_keeps_what_it_committed_and_the_rest_replays(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    reports = tmp_path / "reports"
    write_config(
        repo,
        host_block("fast", None, says(tmp_path, "fast", "fast\n"), concurrency=2),
        host_block("slow", None, candidate_sleeper(reports)),
    )
    job = mint(repo)
    worker = start_genjob(
        "ship", job.key, "--candidates", "3", "--host", "fast", "--host", "slow",
        cwd=repo.root, log=tmp_path / "ship.log",
    )  # fmt: skip
    try:
        [(pids, workdir)] = await asyncio.to_thread(recorded, reports, 1)
        await asyncio.to_thread(wait_for, lambda: numbers(repo, job.key) == [1, 3], "the fast candidates")
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
    finally:
        stop_process(worker)
    # The runner saw its client go: the slow generator is stopped and its workspace gone.
    await asyncio.to_thread(wait_for, lambda: not any(alive(p) for p in pids), "the slow generator to end")
    await asyncio.to_thread(wait_for, lambda: not workdir.exists(), "its workspace to be removed")
    # What was committed is whole and verifies; what was not is not there at all.
    config = load_config(repo.config)
    assert numbers(repo, job.key) == [1, 3]
    assert all(verify_candidate(repo, job, config, load(repo, job.key, n)).ok for n in (1, 3))
    assert not repo.receipt(job.key).exists(), "never half-chosen"
    assert job_state(repo, job.key) == "ORPHANED"
    with pytest.raises(WrongState, match="is ORPHANED: its worker stopped before every candidate"):
        choose(repo, job.key, 1)
    staging = [p.name for p in repo.out.iterdir()]
    assert staging == [f".tmp-{job.key}-1-c2"]
    assert any("staging folder of attempt 1" in line for line in recover(repo).lines)
    assert list(repo.out.iterdir()) == []

    requeue(repo, job.key)
    assert job_state(repo, job.key) == "QUEUED"
    [again] = await ship_candidates(repo, CandidateRequest(job.key, ["fast"], 1), worker_id="tester")
    assert (again.candidate, again.attempt, again.status) == (4, 2, "ok")
    assert job_state(repo, job.key) == "RECEIVED"
    apply_choice(repo, job.key, 3)
    assert (repo.root / "src/app.py").read_bytes() == (
        load(repo, job.key, 3).files.out / "src/app.py"
    ).read_bytes()
    assert locate(repo, job.key).folder == "applied"


def test_spread_and_counts(repo: Layout) -> None:
    write_config(
        repo,
        host_block("a", None, "true"),
        host_block("b", None, "true"),
    )
    config = load_config(repo.config)
    assert candidate_hosts(config, ["a", "b"], 3) == ["a", "b", "a"]
    assert candidate_hosts(config, ["a"], None) == ["a"]
    with pytest.raises(BadInput, match="2 hosts for 1 candidate"):
        candidate_hosts(config, ["a", "b"], 1)
    with pytest.raises(BadInput, match="between 1 and 16, not 17"):
        candidate_hosts(config, ["a"], 17)
    set_config(repo, repo.config.read_text().replace("[hosts.b]", "[hosts.b]\ncandidates = 4"))
    config = load_config(repo.config)
    assert candidate_hosts(config, ["b"], None) == ["b"] * 4, "a host's own setting"
    assert candidate_hosts(config, ["a"], None) == ["a"], "the policy's, for a host without one"
    with pytest.raises(BadInput, match="2 hosts for 1 candidate"):
        candidate_hosts(config, ["a", "b"], None)


def test_ship_cli_spreads_candidates_and_lists_them(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    two_hosts(repo, tmp_path)
    job = mint(repo)
    done = genjob("ship", job.key, "--candidates", "3", "--host", "a", "--host", "b", cwd=repo.root)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    ended = sorted(line for line in lines if ": candidate " in line)
    assert ended == [
        f"{job.key}: candidate 1 ok on a",
        f"{job.key}: candidate 2 ok on b",
        f"{job.key}: candidate 3 rejected (the generator exited with status 3) on a",
    ]
    assert f"candidates of {job.key}: 3, 2 verify, none chosen" in done.stdout
    assert f"genjob apply {job.key} --candidate N" in done.stdout
    as_json = json.loads(cli("candidates", job.key, "--json", root=repo.root).output)
    assert [(c["number"], c["host"], c["status"], c["ok"]) for c in as_json] == [
        (1, "a", "ok", True),
        (2, "b", "ok", True),
        (3, "a", "rejected", False),
    ]
    one_vs_two = cli("candidates", job.key, "--diff", "2", "--against", "1", root=repo.root)
    assert "-from a" in one_vs_two.output and "+from b" in one_vs_two.output
    against_base = cli("candidates", job.key, "--diff", "1", root=repo.root)
    assert "+from a" in against_base.output and "-def main():" in against_base.output


async def test_the_worker_runs_each_job_as_the_policys_candidates_over_its_hosts(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    write_config(
        repo,
        host_block("a", None, says(tmp_path, "a", "from a\n"), concurrency=2),
        host_block("b", CommandHost(None), says(tmp_path, "b", "from b\n"), concurrency=2),
    )
    set_config(repo, repo.config.read_text().replace("[policy]", "[policy]\ncandidates = 2", 1))
    first, second = mint(repo, "first"), mint(repo, "second")
    lines: list[str] = []
    results = await run_worker(repo, once=True, report=lines.append, worker_id="w")
    # Both jobs are claimed for `a` (the first host, two slots): each spreads from there.
    assert sorted((r.key, r.candidate, r.host, r.status) for r in results) == sorted(
        (job.key, n, host, "ok") for job in (first, second) for n, host in ((1, "a"), (2, "b"))
    )
    for job in (first, second):
        assert [(c.number, c.host) for c in load_all(repo, job.key)] == [(1, "a"), (2, "b")]
        assert job_state(repo, job.key) == "RECEIVED"
    assert any(f"{first.key} a attempt 1 candidate " in line for line in lines)
