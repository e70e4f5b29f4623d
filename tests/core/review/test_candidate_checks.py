"""Checks on best-of-N candidates: each candidate's records in its own place, bound to its
own outputs, side by side before a choice; a chosen candidate's fresh records stand for
the job's receipt, so apply goes through `require_checks` without running them again."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from corekit import cli, mint, set_config
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import CommandHost, host_block, script, write_config

from core.errors import VerificationFailed
from core.model.standing import CheckState, CheckStatus
from core.read.candidate_view import views
from core.review.candidates import apply_choice, choose
from core.review.check_status import ChecksRequired, check_statuses
from core.review.checks import run_checks
from core.review.verify import verify
from core.store.candidate_store import chosen
from core.store.check_records import read_record, write_record
from core.store.config import load_config
from core.store.layout import Layout
from core.store.queue import locate
from core.work.ship_candidates import CandidateRequest, ship_candidates

pytestmark = pytest.mark.timeout(180)

# Passes only on the bytes host b writes.
WANTS_B = "python3 -c \"import sys; sys.exit(open('src/app.py').read() != 'from b\\\\n')\""


async def two_candidates(repo: Layout, tmp: Path, require: bool = True) -> str:
    """A job with candidate 1 from host a ("from a") and candidate 2 from host b ("from b"),
    and a check `tests` that passes on b's bytes only (required when `require`)."""
    write_config(
        repo,
        host_block("a", None, script(tmp, "a", "open('src/app.py', 'w').write('from a\\n')\n")),
        host_block("b", CommandHost(None), script(tmp, "b", "open('src/app.py', 'w').write('from b\\n')\n")),
    )
    text = repo.config.read_text()
    if require:
        text = text.replace("[policy]\n", '[policy]\nrequire_checks = ["tests"]\n', 1)
    set_config(repo, text + f'\n[checks.tests]\nrun = {json.dumps(WANTS_B)}\nsandbox = "none"\n')
    job = mint(repo)
    results = await ship_candidates(repo, CandidateRequest(job.key, ["a", "b"], 2), worker_id="tester")
    assert [r.status for r in results] == ["ok", "ok"]
    return job.key


def checks_of(repo: Layout, key: str) -> dict[int, tuple[CheckStatus, ...]]:
    """Each candidate's checks, as the side-by-side view judges them."""
    return {v.number: v.checks for v in views(repo, key)}


def states(repo: Layout, key: str) -> dict[int, dict[str, CheckState]]:
    return {n: {s.name: s.state for s in got} for n, got in checks_of(repo, key).items()}


async def test_each_candidates_records_are_its_own(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    key = await two_candidates(repo, tmp_path)
    assert states(repo, key) == {1: {"tests": CheckState.NOT_RUN}, 2: {"tests": CheckState.NOT_RUN}}
    hint = checks_of(repo, key)[1][0].detail
    assert f"genjob check {key} --candidate 1 --name tests" in hint

    [ran] = await run_checks(repo, key, candidate=2)
    assert ran.passed and ran.record is not None
    assert repo.check_record(key, "tests", 2) == repo.checks / key / "candidate-2" / "tests.json"
    assert repo.check_record(key, "tests", 2).is_file()
    assert not repo.check_record(key, "tests").exists(), "nothing in the job's own place"
    assert states(repo, key) == {1: {"tests": CheckState.NOT_RUN}, 2: {"tests": CheckState.PASSED}}

    [failed] = await run_checks(repo, key, candidate=1)
    assert not failed.passed and failed.record is not None
    assert states(repo, key) == {1: {"tests": CheckState.FAILED}, 2: {"tests": CheckState.PASSED}}
    assert [[c.state for c in v.checks] for v in views(repo, key)] == [
        [CheckState.FAILED],
        [CheckState.PASSED],
    ]
    assert not repo.receipt(key).exists(), "checking a candidate chooses nothing"


async def test_a_candidates_passing_record_does_not_count_for_another(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    key = await two_candidates(repo, tmp_path)
    await run_checks(repo, key, candidate=2)
    # Candidate 2's passing record, copied where candidate 1's belongs, is sealed for 2's place.
    moved = repo.check_record(key, "tests", 1)
    moved.parent.mkdir(parents=True)
    moved.write_bytes(repo.check_record(key, "tests", 2).read_bytes())
    [one] = checks_of(repo, key)[1]
    assert one.state is CheckState.NOT_RUN and "not written by genjob on this machine" in one.detail
    # Written there by genjob itself, it is still bound to 2's bytes.
    record = read_record(repo, key, "tests", 2)
    assert record is not None
    write_record(repo, record, 1)
    [one] = checks_of(repo, key)[1]
    assert one.state is CheckState.STALE and "other outputs" in one.detail


async def test_a_chosen_candidate_whose_checks_passed_is_applied_without_running_them_again(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    key = await two_candidates(repo, tmp_path)
    await run_checks(repo, key, candidate=2)
    record = read_record(repo, key, "tests", 2)
    applied = await asyncio.to_thread(apply_choice, repo, key, 2)
    assert applied.changed and (repo.root / "src/app.py").read_bytes() == b"from b\n"
    assert read_record(repo, key, "tests") == record, "the candidate's record carried over"
    events = [json.loads(line) for line in (repo.gen / "events.jsonl").read_text().splitlines()]
    assert [e.get("candidate") for e in events if e["event"] == "checked"] == [2], "ran once"


async def test_a_chosen_candidate_whose_checks_failed_is_refused(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    key = await two_candidates(repo, tmp_path)
    await run_checks(repo, key, candidate=1)
    original = (repo.root / "src/app.py").read_bytes()
    with pytest.raises(ChecksRequired, match=r"chose candidate 1.*tests \(failed\)"):
        await asyncio.to_thread(apply_choice, repo, key, 1)
    assert chosen(repo, key) == 1 and (repo.root / "src/app.py").read_bytes() == original
    config = load_config(repo.config)
    job = locate(repo, key).job
    [status] = check_statuses(repo, job, config, verify(repo, job, config))
    assert status.state is CheckState.FAILED


async def test_a_stale_candidate_record_is_not_carried(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    key = await two_candidates(repo, tmp_path)
    await run_checks(repo, key, candidate=2)
    text = repo.config.read_text().replace(json.dumps(WANTS_B), json.dumps(WANTS_B + " && true"))
    set_config(repo, text)
    assert choose(repo, key, 2).carried == ()
    assert not repo.check_record(key, "tests").exists()


async def test_checks_refuse_a_candidate_that_does_not_verify(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    key = await two_candidates(repo, tmp_path)
    (repo.candidate(key, 1) / "out" / "src/app.py").write_bytes(b"edited after signing\n")
    with pytest.raises(VerificationFailed, match="candidate 1: does not verify"):
        await run_checks(repo, key, candidate=1)
    assert not repo.check_record(key, "tests", 1).exists()


async def test_cli_check_candidate_and_the_candidates_table(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    key = await two_candidates(repo, tmp_path, require=False)
    table = cli("candidates", key, root=repo.root)
    assert table.exit_code == 0, table.stderr
    assert f"not run: genjob check {key} --candidate 1" in table.output
    assert f"not run: genjob check {key} --candidate 2" in table.output

    ran = await asyncio.to_thread(cli, "check", key, "--candidate", "2", "--json", root=repo.root)
    assert ran.exit_code == 0, ran.output + ran.stderr
    [run] = json.loads(ran.output)
    assert run["passed"] and run["record"]["outputs"]
    failed = await asyncio.to_thread(cli, "check", key, "--candidate", "1", "--name", "tests", root=repo.root)
    assert failed.exit_code == 1 and "== check tests: failed" in failed.output

    table = cli("candidates", key, root=repo.root)
    shown = [line.strip() for line in table.output.splitlines() if "checks:" in line]
    assert shown == ["checks: tests FAIL", "checks: tests ok"]
    as_json = json.loads(cli("candidates", key, "--json", root=repo.root).output)
    assert [[c["state"] for c in v["checks"]] for v in as_json] == [["failed"], ["passed"]]
