"""A merge's required checks run on the merged bytes, not on the receipt's outputs."""

from __future__ import annotations

import asyncio
import json

import pytest
from corekit import cli, git, receive, set_config, sha
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.model.check_record import CheckResult
from core.plan.mint import build_job
from core.review.apply_job import apply_job
from core.review.check_status import ChecksRequired
from core.review.checks import run_checks
from core.review.merge import apply_merged
from core.review.ready import pull
from core.store.check_records import read_record
from core.store.config import DEFAULT_CONFIG
from core.store.layout import Layout
from core.store.queue import enqueue, locate

LINES = b"".join(f"line {i}\n".encode() for i in range(1, 11))
TOP = LINES.replace(b"line 1\n", b"line one\n")
BOTTOM = LINES.replace(b"line 10\n", b"line ten\n")
BOTH = TOP.replace(b"line 10\n", b"line ten\n")
# Passes on each receipt's outputs (TOP, BOTTOM), fails on the two merged (BOTH).
NOT_BOTH = "! { grep -q 'line one' src/lines.py && grep -q 'line ten' src/lines.py; }"


def configure(layout: Layout, run: str, *policy: str) -> None:
    text = DEFAULT_CONFIG.replace("[policy]\n", '[policy]\nrequire_checks = ["tests"]\n' + "".join(policy), 1)
    set_config(layout, text + f'\n[checks.tests]\nrun = "{run}"\nsandbox = "none"\n')


@pytest.fixture
def lines(repo: Layout) -> Layout:
    (repo.root / "src/lines.py").write_bytes(LINES)
    git(repo.root, "add", "src/lines.py")
    git(repo.root, "commit", "-q", "-m", "lines")
    return repo


def checked_stale_pair(layout: Layout, signer: Ed25519PrivateKey) -> tuple[str, str]:
    """Two jobs over one file, both checked (passed) while fresh; the first applied, so the
    second's receipt is STALE with its check passed on its own outputs."""
    keys = []
    for said, out in (("Top.", TOP), ("Bottom.", BOTTOM)):
        job = build_job(layout, said, ["src/lines.py"])
        enqueue(layout, job)
        assert receive(layout, job.key, {"src/lines.py": out}, signer).won
        keys.append(job.key)
    for key in keys:
        runs = asyncio.run(run_checks(layout, key))
        assert [r.passed for r in runs] == [True]
    apply_job(layout, keys[0])
    return keys[0], keys[1]


def test_a_check_that_fails_on_the_merged_bytes_refuses_the_merge(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    configure(lines, NOT_BOTH)
    _, other = checked_stale_pair(lines, signer)
    receipt = lines.receipt(other).read_bytes()
    with pytest.raises(ChecksRequired, match=r"did not pass on the merged bytes: tests failed"):
        apply_merged(lines, other)
    assert (lines.root / "src/lines.py").read_bytes() == TOP
    assert locate(lines, other).folder == "running" and lines.receipt(other).read_bytes() == receipt
    assert not (lines.gen / "merges" / other).exists()
    receipt_record = read_record(lines, other, "tests")
    assert receipt_record is not None and receipt_record.result is CheckResult.PASSED  # kept apart


def test_a_check_on_the_merged_bytes_is_kept_apart_bound_to_them(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    configure(lines, "grep -q 'line 5' src/lines.py")
    _, other = checked_stale_pair(lines, signer)
    res = apply_merged(lines, other)
    assert res.changed == ["src/lines.py"] and (lines.root / "src/lines.py").read_bytes() == BOTH
    folders = sorted(p.name for p in lines.check_dir(other).iterdir() if p.is_dir())
    assert len(folders) == 1 and folders[0].startswith("merged-")
    record = json.loads((lines.check_dir(other) / folders[0] / "tests.json").read_bytes())
    assert record["result"] == "passed"
    assert record["outputs"] == {"src/lines.py": sha(BOTH)} and record["base"] == {"src/lines.py": sha(TOP)}


def test_a_failed_check_on_merged_bytes_is_not_run_again_on_the_same_bytes(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    configure(lines, NOT_BOTH)
    _, other = checked_stale_pair(lines, signer)
    for _ in range(2):
        with pytest.raises(ChecksRequired):
            apply_merged(lines, other)
    ran = [e for e in events(lines) if e["event"] == "checked" and "merged" in e]
    assert len(ran) == 1 and ran[0]["result"] == "failed"


def test_a_merge_with_no_required_check_runs_none(lines: Layout, signer: Ed25519PrivateKey) -> None:
    set_config(lines, DEFAULT_CONFIG + '\n[checks.tests]\nrun = "false"\nsandbox = "none"\n')
    job_keys = []
    for said, out in (("Top.", TOP), ("Bottom.", BOTTOM)):
        job = build_job(lines, said, ["src/lines.py"])
        enqueue(lines, job)
        assert receive(lines, job.key, {"src/lines.py": out}, signer).won
        job_keys.append(job.key)
    apply_job(lines, job_keys[0])
    assert apply_merged(lines, job_keys[1]).changed == ["src/lines.py"]
    assert not [e for e in events(lines) if e["event"] == "checked"]


def events(layout: Layout) -> list[dict[str, object]]:
    return [json.loads(line) for line in layout.events.read_text().splitlines()]


def test_the_cli_merge_names_the_check_that_failed_on_the_merge(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    configure(lines, NOT_BOTH)
    _, other = checked_stale_pair(lines, signer)
    res = cli("apply", other, "--merge", root=lines.root)
    assert res.exit_code != 0
    assert "tests failed" in res.stderr and "on the merged bytes" in res.stderr
    assert (lines.root / "src/lines.py").read_bytes() == TOP


@pytest.mark.parametrize("how", ["--merge", "auto_merge"])
def test_ready_merges_only_when_its_checks_pass_on_the_merged_bytes(
    lines: Layout, signer: Ed25519PrivateKey, how: str
) -> None:
    configure(lines, NOT_BOTH, *(["auto_merge = true\n"] if how == "auto_merge" else []))
    _, other = checked_stale_pair(lines, signer)
    done = {p.key: p for p in pull(lines, merge=how == "--merge")}
    assert done[other].done == "left" and "tests failed" in done[other].why
    assert (lines.root / "src/lines.py").read_bytes() == TOP
    assert locate(lines, other).folder == "running"
