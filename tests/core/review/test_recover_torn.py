"""`recover` never leaves a torn tree: an apply killed between two swaps, whose receipt
then stops verifying, is rolled back from the originals it kept, each checked against the
job's input hash; an original missing or changed is never written, and the journal stays.

Each tree here is left by a real kill (SIGKILL in a forked apply, `crashkit`) of a job
with two changed files and a new one; then the receipt is made to fail in each of the
ways it can, and `genjob recover` runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from corekit import FILES, cli, sha, tree_files
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from tornkit import KILLS, NEW, PATHS, killed_apply, untrust_the_key

import core.review.apply
from core.model.lifecycle import State
from core.model.models import Job
from core.read.snapshot import take_snapshot
from core.store.durable import flocked
from core.store.layout import Layout

GENJOB = str(Path(sys.executable).parent / "genjob")


def require_signatures(layout: Layout, job: Job) -> str:
    layout.config.write_text(
        layout.config.read_text().replace("require_signature = false", "require_signature = true")
    )
    return f"signature: {job.key}.sig: unsigned receipt"


def remove_the_outputs(layout: Layout, job: Job) -> str:
    shutil.rmtree(layout.out_dir(job.digest))
    return "present: missing"


def change_an_output(layout: Layout, job: Job) -> str:
    (layout.out_dir(job.digest) / "src/util.py").write_bytes(b"not what was signed\n")
    return "hashes: artifact drift at src/util.py"


CAUSES: dict[str, Callable[[Layout, Job], str]] = {
    "a-key-no-longer-trusted": untrust_the_key,
    "require-signature-turned-on": require_signatures,
    "outputs-removed": remove_the_outputs,
    "an-output-changed": change_an_output,
}


def torn(layout: Layout) -> dict[str, bytes]:
    """The tree's files but the temp copies a killed apply leaves beside its targets."""
    return {p: b for p, b in tree_files(layout.root).items() if ".genjob-" not in p}


def state_of(layout: Layout, key: str) -> State:
    return take_snapshot(layout, disk_cache=False).rows[key].state


@pytest.mark.parametrize("kill", sorted(KILLS))
@pytest.mark.parametrize("cause", sorted(CAUSES))
def test_recover_rolls_back_a_torn_tree_whose_receipt_no_longer_verifies(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, cause: str, kill: str
) -> None:
    layout, job = killed_apply(repo, tmp_path, kill, signed=cause != "require-signature-turned-on")
    before = torn(layout)
    assert before != FILES and any(before.get(p) == NEW[p] for p in PATHS), "the kill tore the tree"
    failing = CAUSES[cause](layout, job)
    res = cli("recover", root=layout.root)
    assert res.exit_code == 0, res.output
    [line] = res.stdout.splitlines()
    assert line.startswith(f"R1 {job.key}: rolled back the interrupted apply: {job.key}: ")
    assert f"the receipt does not verify now ({failing}" in line
    restored = [p for p in ("src/app.py", "src/util.py") if before[p] == NEW[p]]
    removed = ["src/pkg/mod.py"] if before.get("src/pkg/mod.py") == NEW["src/pkg/mod.py"] else []
    assert f"restored {', '.join(restored) or 'none'}; removed {', '.join(removed) or 'none'}." in line
    assert tree_files(layout.root) == FILES, "the tree is as the job found it, every temp copy gone"
    assert not (layout.root / "src/pkg").exists()
    assert os.listdir(layout.journal) == []
    [kept] = [p for p in layout.log_dir(job.key).iterdir() if p.name.startswith("rolled-back-")]
    assert json.loads((kept / "journal.json").read_bytes())["key"] == job.key
    assert {(kept / p.name).read_bytes() for p in kept.glob("*.after")} == {
        NEW[p] for p in [*restored, *removed]
    }
    assert f"is kept at {kept.relative_to(layout.root)}" in line
    assert state_of(layout, job.key) in (State.RECEIVED, State.FAILED)
    assert cli("recover", root=layout.root).stdout == "nothing to recover\n"


@pytest.mark.parametrize("fault", ["missing", "changed"])
def test_an_original_missing_or_changed_is_never_written_and_the_journal_stays(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, fault: str
) -> None:
    layout, job = killed_apply(repo, tmp_path, "after-the-last-swap")
    untrust_the_key(layout, job)
    original = layout.journal / job.key / "2"  # src/util.py's
    if fault == "missing":
        original.unlink()
    else:
        original.write_bytes(b"someone else's bytes\n")
    before, kept = torn(layout), sorted(os.listdir(layout.journal / job.key))
    res = cli("recover", root=layout.root)
    assert res.exit_code == 1
    [line] = res.stdout.splitlines()
    what = "is missing" if fault == "missing" else "does not hold the bytes the job was minted on"
    assert line.startswith(
        f"R1 {job.key}: cannot finish: {layout.journal_file(job.key)}: the interrupted apply "
    )
    assert f"the original of src/util.py, .gen/journal/{job.key}/2, {what}" in line
    assert f"(sha256 {sha(FILES['src/util.py'])[:12]}…): put a copy of those bytes there" in line
    assert "Nothing more was written; the journal stays where it is" in line
    assert torn(layout) == before, "nothing written: not even the originals that are right"
    assert sorted(os.listdir(layout.journal / job.key)) == kept and layout.journal_file(job.key).exists()
    # What the message says to do, done: the rollback goes through.
    original.write_bytes(FILES["src/util.py"])
    again = cli("recover", root=layout.root)
    assert again.exit_code == 0 and "restored src/app.py, src/util.py; removed src/pkg/mod.py" in again.stdout
    assert tree_files(layout.root) == FILES


def wait_until_blocked_on(lock: Path, pid: int) -> None:
    """Until process `pid` waits for the flock on `lock` (a `->` line of /proc/locks)."""
    inode = os.stat(lock).st_ino
    done = threading.Event()
    while not done.is_set():
        for row in Path("/proc/locks").read_text().splitlines():
            fields = row.split()
            if "->" in fields and str(pid) in fields and fields[-3].endswith(f":{inode}"):
                return
        done.wait(0.01)


def test_an_original_changed_while_recover_waits_for_the_lock_is_never_written(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    layout, job = killed_apply(repo, tmp_path, "after-the-last-swap")
    untrust_the_key(layout, job)
    before = torn(layout)
    with flocked(layout.lock):
        proc = subprocess.Popen(
            [GENJOB, "--root", str(layout.root), "recover"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        wait_until_blocked_on(layout.lock, proc.pid)
        (layout.journal / job.key / "0").write_bytes(b"changed while recover waited\n")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert b"the original of src/app.py" in out and b"does not hold the bytes the job was minted on" in out
    assert torn(layout) == before
    assert layout.journal_file(job.key).exists()


@pytest.mark.parametrize("call", [1, 2], ids=["at-the-first-swap", "after-two-were-undone"])
def test_an_original_changed_between_its_check_and_its_swap_undoes_the_rollback(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: int
) -> None:
    """The rollback swaps util.py (2) first, removes pkg/mod.py, then swaps app.py (0):
    an original changed just before its swap is caught right after it, and every step
    the rollback had taken is taken back."""
    layout, job = killed_apply(repo, tmp_path, "after-the-last-swap")
    untrust_the_key(layout, job)
    before = torn(layout)
    victim = layout.journal / job.key / ("2" if call == 1 else "0")
    real = core.review.apply.exchange
    seen = [0]

    def tampering(*args: Any) -> bool:
        seen[0] += 1
        if seen[0] == call:
            with victim.open("r+b") as handle:  # in place: the same file, other bytes
                handle.write(b"# tampered\n")
        return bool(real(*args))

    monkeypatch.setattr(core.review.apply, "exchange", tampering)
    res = cli("recover", root=layout.root)
    assert res.exit_code == 1
    assert "changed while it was rolled back" in res.stdout
    assert "What the rollback had done was undone; the journal stays where it is" in res.stdout
    assert torn(layout) == before
    assert layout.journal_file(job.key).exists()


def test_a_resumed_apply_that_meets_an_edit_keeps_the_journal_when_an_original_is_gone(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """The receipt verifies, but the user saved src/app.py after the kill: the apply rolls
    back; src/util.py's original is gone, so it leaves everything as it is and says so."""
    layout, job = killed_apply(repo, tmp_path, "after-the-last-swap")
    (layout.root / "src/app.py").write_bytes(b"# the user's edit\n")
    (layout.journal / job.key / "2").unlink()
    before = torn(layout)
    res = cli("recover", root=layout.root)
    assert res.exit_code == 1
    assert "src/app.py: changed" in res.stdout and "the original of src/util.py" in res.stdout
    assert torn(layout) == before
    assert layout.journal_file(job.key).exists()


def test_a_resumed_apply_that_meets_an_edit_rolls_back_and_keeps_the_edit(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    layout, job = killed_apply(repo, tmp_path, "after-the-last-swap")
    (layout.root / "src/app.py").write_bytes(b"# the user's edit\n")
    res = cli("recover", root=layout.root)
    assert res.exit_code == 0, res.output
    assert "restored src/util.py; removed src/pkg/mod.py." in res.stdout
    assert "Left as they are: src/app.py (neither the job's input nor its output)." in res.stdout
    assert f"genjob replay {job.key}" in res.stdout
    assert tree_files(layout.root) == {**FILES, "src/app.py": b"# the user's edit\n"}
    assert os.listdir(layout.journal) == []


def test_apply_and_recover_say_the_same(repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path) -> None:
    """`genjob apply` of a job left so rolls it back too, with the very words of recover."""
    layout, job = killed_apply(repo, tmp_path, "after-the-first-swap")
    untrust_the_key(layout, job)
    copy = tmp_path / "copy"
    shutil.copytree(layout.root, copy, symlinks=True)
    applied = cli("apply", job.key, root=layout.root)
    recovered = cli("recover", root=copy)
    assert applied.exit_code == 2 and recovered.exit_code == 0
    said = applied.stderr.removeprefix("genjob: ").strip()
    line = recovered.stdout.strip().replace(str(copy), str(layout.root))
    assert (
        line.split("rolled back the interrupted apply: ", 1)[1].split(" is kept at ")[0]
        == said.split(" is kept at ")[0]
    )
    assert tree_files(layout.root) == tree_files(copy) == FILES


def test_recover_rolls_back_without_an_atomic_exchange(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a filesystem without RENAME_EXCHANGE: what a target holds is linked aside and
    checked, then its original renamed over it and checked in turn."""
    layout, job = killed_apply(repo, tmp_path, "after-the-last-swap")
    untrust_the_key(layout, job)
    monkeypatch.setattr(core.review.apply, "exchange", lambda *a: False)
    res = cli("recover", root=layout.root)
    assert res.exit_code == 0, res.output
    assert "restored src/app.py, src/util.py; removed src/pkg/mod.py." in res.stdout
    assert tree_files(layout.root) == FILES
    assert os.listdir(layout.journal) == []


def test_without_an_exchange_an_original_changed_as_it_is_renamed_back_undoes_the_rollback(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout, job = killed_apply(repo, tmp_path, "after-the-last-swap")
    untrust_the_key(layout, job)
    before = torn(layout)
    monkeypatch.setattr(core.review.apply, "exchange", lambda *a: False)
    real = core.review.apply.rename_at

    def tampering(src_fd: int, src: str, dst_fd: int, dst: str) -> None:
        if (src, dst) == ("0", "app.py"):  # src/app.py's original, on its way back
            with open(src, "r+b", opener=lambda name, flags: os.open(name, flags, dir_fd=src_fd)) as handle:
                handle.write(b"# tampered\n")
        real(src_fd, src, dst_fd, dst)

    monkeypatch.setattr(core.review.apply, "rename_at", tampering)
    res = cli("recover", root=layout.root)
    assert res.exit_code == 1
    assert "src/app.py: its original changed while it was rolled back" in res.stdout
    assert torn(layout) == before, "util.py restored and pkg/mod.py removed are undone again"
    assert layout.journal_file(job.key).exists()
