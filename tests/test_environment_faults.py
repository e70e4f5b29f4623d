"""Faults of the machine (a full disk, a read-only mount, no permission, a quota) at every
filesystem mutation of mint, claim, requeue, reject, apply, recover and ship.

The fault is injected with an audit hook at the n-th mutation, for every n until the
operation runs to its end; after each: one line on stderr naming the fault, no
traceback, exit 2 (ship's own verdict, exit 1, when the fault ends the run in a receipt);
then `recover` leaves every key in exactly one folder, the tree untouched or fully
applied, and the operation runs again to its end. A real full tmpfs backs one case.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from corekit import FILES, carry_pins, cli, make_repo, mint, receive, tree_files, write_jobs
from crashkit import disarm, fail_at
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import DEMO, host_block, write_config

from core.model.canonical import canonical
from core.model.lifecycle import State
from core.read.snapshot import take_snapshot
from core.review.apply import plan
from core.store.layout import Layout
from core.store.receipts import load_receipt

FAULTS = [errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EDQUOT]
WORDS = {
    errno.ENOSPC: "no space left on the device",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EDQUOT: "disk quota exceeded",
}
FOLDERS = ("queue", "running", "applied", "rejected")
NEW_APP = b"def main():\n    return 2\n"


def one_folder_each(layout: Layout) -> dict[str, State]:
    """After recover: every key in exactly one state folder, nothing inconsistent."""
    rows = take_snapshot(layout, disk_cache=False).rows
    for key in rows:
        where = [f for f in FOLDERS if layout.job_file(f, key).exists()]
        assert len(where) == 1, (key, where)
    states = {k: r.state for k, r in rows.items()}
    assert State.INCONSISTENT not in states.values(), states
    return states


def under_faults(
    template: Path,
    work: Path,
    args: Callable[[Layout], list[str]],
    ship_verdict: bool = False,
    recovering: bool = False,
) -> int:
    """Run `genjob ARGS` with a fault at each mutation in turn; returns how many were hit."""
    n = 0
    while True:
        n += 1
        if work.exists():
            shutil.rmtree(work)
        shutil.copytree(template, work, symlinks=True)
        carry_pins(template, work)
        layout = Layout(work)
        err = FAULTS[n % len(FAULTS)]
        fail_at(n, err)
        try:
            res = cli(*args(layout), root=work)
        finally:
            fired = disarm()
        if not fired:
            assert res.exit_code == 0, res.stderr
            return n - 1
        lines = res.stderr.strip().splitlines()
        assert "Traceback" not in res.stderr
        if ship_verdict and res.exit_code in (0, 1):
            # The fault ended the run in a receipt (exit 1), or hit only the evidence kept
            # beside it, which never stops the receipt (exit 0); or it kept this machine, the
            # local host, from starting the run, which puts the job back in the queue (exit 1).
            verdict = res.stdout.splitlines()[0].split(": ", 1)[1]
            assert verdict.split()[0] in ("ok", "aborted", "rejected") or " did not start: " in verdict
        elif recovering and res.exit_code == 1:
            assert lines == ["genjob: 1 thing(s) left to recover; see the lines above"]
            assert any(word in res.stdout for word in WORDS.values())
        else:
            assert res.exit_code == 2, (n, res.stdout, res.stderr)
            assert len(lines) == 1 and lines[0].startswith("genjob: "), (n, lines)
        report = cli("recover", root=work)
        assert "Traceback" not in report.stderr
        one_folder_each(layout)
        tree = {p: b for p, b in tree_files(work).items() if ".genjob-" not in p}
        assert tree in ({**FILES}, {**FILES, "src/app.py": NEW_APP}), f"torn tree after a fault at {n}"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return tmp_path / "work"


def test_mint_under_faults(repo: Layout, work: Path) -> None:
    write_jobs(repo, 1)
    assert (
        under_faults(repo.root, work, lambda w: ["mint", "-m", "Under faults.", str(w.root / "src/app.py")])
        > 3
    )


def test_claim_and_requeue_under_faults(repo: Layout, work: Path) -> None:
    key = mint(repo, "Claimed under faults.", ["src/app.py"]).key
    assert under_faults(repo.root, work, lambda _: ["claim", key, "--worker", "w1"]) > 3
    cli("claim", key, "--worker", "w1", root=repo.root)
    assert under_faults(repo.root, work, lambda _: ["requeue", key, "--force"]) > 3


def test_reject_under_faults(repo: Layout, work: Path) -> None:
    key = mint(repo, "Rejected under faults.", ["src/app.py"]).key
    assert under_faults(repo.root, work, lambda _: ["reject", key, "--reason", "no"]) > 3


def test_apply_under_faults(repo: Layout, work: Path, signer: Ed25519PrivateKey) -> None:
    key = mint(repo, "Applied under faults.", ["src/app.py"]).key
    receive(repo, key, {"src/app.py": NEW_APP}, signer)
    assert under_faults(repo.root, work, lambda _: ["apply", key]) > 10


def test_recover_under_faults(repo: Layout, work: Path, signer: Ed25519PrivateKey) -> None:
    """An interrupted apply (its journal, as a kill leaves it), a temp file and a stray lease."""
    job = mint(repo, "Recovered under faults.", ["src/app.py"])
    receive(repo, job.key, {"src/app.py": NEW_APP}, signer)
    targets = plan(job, load_receipt(repo, job.key))
    journal = {"key": job.key, "digest": job.digest, "targets": [t.to_dict() for t in targets]}
    repo.journal_file(job.key).write_bytes(canonical(journal))
    (repo.queue / ".tmp-0123456789abcdef").write_bytes(b"half")
    (repo.running / f"{'e' * 32}.lease").write_text("{}")
    assert under_faults(repo.root, work, lambda _: ["recover"], recovering=True) > 5


def test_ship_under_faults(repo: Layout, work: Path, signer: Ed25519PrivateKey) -> None:
    write_config(repo, host_block("local", None, DEMO))
    key = mint(repo, "Shipped under faults.", ["src/app.py"]).key
    assert under_faults(repo.root, work, lambda _: ["ship", key, "-q"], ship_verdict=True) > 10


def test_mint_on_a_full_disk(tmp_path: Path) -> None:
    """A real tmpfs, filled: mint says so in one line and leaves no temp file behind."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(disk)]).returncode != 0:
        pytest.skip("mounting a tmpfs needs privileges this machine does not give")
    try:
        layout = make_repo(disk / "repo", commit=False)
        _fill(disk)
        res = cli("mint", "-m", "No room.", str(layout.root / "src/app.py"), root=layout.root)
        assert res.exit_code == 2
        assert res.stderr.startswith("genjob: ") and WORDS[errno.ENOSPC] in res.stderr
        assert [n for n in (layout.queue).iterdir()] == []
    finally:
        subprocess.run(["umount", "-l", str(disk)])


def _fill(disk: Path) -> None:
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
