"""One writer: applies of one repository are serialized by `.gen/apply.lock`, across processes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from corekit import mint, receive, sha
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import BadInput
from core.review.writer_lock import WriterBusy, read_holder, writer
from core.store.layout import Layout

GENJOB = str(Path(sys.executable).parent / "genjob")
NEW_APP = b"def main():\n    return 2\n"

# Takes the writer lock in another process, says so, and holds it until told to stop.
HOLD = """
import sys
from pathlib import Path
from core.errors import BadInput
from core.review.writer_lock import writer
from core.store.layout import Layout
with writer(Layout(Path(sys.argv[1]))):
    print("held", flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def holder(repo: Layout) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the writer lock until its stdin gets a line."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(repo.root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def received(repo: Layout, signer: Ed25519PrivateKey) -> str:
    job = mint(repo, "Return two.")
    assert receive(repo, job.key, {"src/app.py": NEW_APP}, signer).won
    return job.key


def genjob(repo: Layout, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [GENJOB, "--root", str(repo.root), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_no_wait_names_the_process_that_holds_the_lock(
    repo: Layout, signer: Ed25519PrivateKey, holder: subprocess.Popen[str]
) -> None:
    key = received(repo, signer)
    _, err = genjob(repo, "apply", key, "--no-wait").communicate()
    assert f"pid {holder.pid}" in err and "apply.lock" in err and "another apply holds it" in err
    assert (repo.root / "src/app.py").read_bytes() != NEW_APP
    assert not repo.job_file("applied", key).exists()


def test_no_wait_exits_one(repo: Layout, signer: Ed25519PrivateKey, holder: subprocess.Popen[str]) -> None:
    key = received(repo, signer)
    proc = genjob(repo, "apply", key, "--no-wait")
    proc.communicate()
    assert proc.returncode == 1


def test_a_second_apply_waits_for_the_first(
    repo: Layout, signer: Ed25519PrivateKey, holder: subprocess.Popen[str]
) -> None:
    key = received(repo, signer)
    second = genjob(repo, "apply", key)
    assert second.stderr is not None
    line = second.stderr.readline()  # said once it has to wait: the apply has not run
    assert "waiting for the apply lock" in line and f"pid {holder.pid}" in line
    assert not repo.job_file("applied", key).exists()
    assert holder.stdin is not None
    holder.stdin.write("go\n")
    holder.stdin.flush()
    out, _ = second.communicate()
    assert second.returncode == 0 and f"applied {key}" in out
    assert sha((repo.root / "src/app.py").read_bytes()) == sha(NEW_APP)


def test_recover_waits_for_the_writer_too(repo: Layout, holder: subprocess.Popen[str]) -> None:
    proc = genjob(repo, "recover")
    assert proc.stderr is not None
    assert "waiting for the apply lock" in proc.stderr.readline()
    assert holder.stdin is not None
    holder.stdin.write("go\n")
    holder.stdin.flush()
    proc.communicate()
    assert proc.returncode == 0


def test_a_killed_holder_frees_the_lock(repo: Layout, holder: subprocess.Popen[str]) -> None:
    with pytest.raises(WriterBusy), writer(repo, wait=False):
        pass
    holder.kill()
    holder.wait()
    with writer(repo, wait=False):
        assert read_holder(repo).pid is not None


def test_the_lock_is_reentrant_within_a_process(repo: Layout) -> None:
    with writer(repo, wait=False), writer(repo, wait=False):
        pass
    with writer(repo, wait=False):
        pass


def test_a_symlinked_lock_file_is_refused(repo: Layout, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("x")
    repo.apply_lock.unlink()
    repo.apply_lock.symlink_to(target)
    with pytest.raises(BadInput, match=r"apply\.lock: a symlink"), writer(repo):
        pass
    assert target.read_text() == "x"
