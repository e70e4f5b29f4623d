"""An applied job's change stays viewable: from its apply record's hashes and the bytes
still kept (out/, the tree, the kept originals, the input blobs), each checked."""

from __future__ import annotations

import io
import shutil

import pytest
from corekit import FILES, cli, mint, receive
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from rich.console import Console

from core.model.canonical import canonical, loads_strict
from core.model.models import Job
from core.read.inspect_job import job_detail
from core.review.apply_job import apply_job
from core.review.diff import DiffStatus, FileDiff
from core.store.blobs import blobs_dir
from core.store.layout import Layout
from tui.render import diffs_text


def plain_text(renderable: object) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


NEW_APP = b"def main():\n    return 2\n"
NEW_MOD = b"VALUE = 3\n"


@pytest.fixture
def applied(repo: Layout, signer: Ed25519PrivateKey) -> Job:
    job = mint(repo, "Return two.", paths=["src/app.py"], new=["src/pkg/mod.py"])
    assert receive(repo, job.key, {"src/app.py": NEW_APP, "src/pkg/mod.py": NEW_MOD}, signer).won
    apply_job(repo, job.key)
    return job


def by_path(repo: Layout, job: Job) -> dict[str, FileDiff]:
    return {d.path: d for d in job_detail(repo, job.key).diffs}


def test_an_applied_jobs_diff_shows_the_change_it_made(repo: Layout, applied: Job) -> None:
    diffs = by_path(repo, applied)
    app, mod = diffs["src/app.py"], diffs["src/pkg/mod.py"]
    assert (app.status, app.added, app.removed, app.note) == (DiffStatus.MODIFIED, 1, 1, None)
    assert "-    return 1\n+    return 2\n" in app.text
    assert (mod.status, mod.added, mod.note) == (DiffStatus.NEW, 1, None)
    shown = cli("show", applied.key, root=repo.root)
    assert shown.exit_code == 0 and "--- src/app.py: modified +1 -1" in shown.output
    assert "+    return 2" in shown.output
    board = plain_text(diffs_text(job_detail(repo, applied.key).diffs, applied=True))
    assert "the change it made" in board and "+ VALUE = 3" in board
    assert "the outputs are in the tree" not in board


def test_a_tree_that_moved_on_is_said_and_the_change_still_shown(repo: Layout, applied: Job) -> None:
    (repo.root / "src/app.py").write_bytes(b"edited by hand since\n")
    (repo.root / "src/pkg/mod.py").unlink()
    diffs = by_path(repo, applied)
    app, mod = diffs["src/app.py"], diffs["src/pkg/mod.py"]
    assert "+    return 2\n" in app.text and "holds other bytes now" in (app.note or "")
    assert "the tree has moved on since" in (app.note or "")
    assert "+VALUE = 3\n" in mod.text and "src/pkg/mod.py is gone now" in (mod.note or "")
    assert "the tree has moved on since" in cli("show", applied.key, root=repo.root).output


def test_the_outputs_gone_from_out_are_read_from_the_tree_while_it_holds_them(
    repo: Layout, applied: Job
) -> None:
    shutil.rmtree(repo.out_dir(applied.digest))
    app = by_path(repo, applied)["src/app.py"]
    assert "+    return 2\n" in app.text and app.note is None
    (repo.root / "src/app.py").write_bytes(b"moved on\n")
    gone = by_path(repo, applied)["src/app.py"]
    assert gone.status == DiffStatus.MISSING and "the bytes it wrote are no longer kept" in gone.note


def test_the_bytes_replaced_come_from_the_input_blobs_and_are_checked(repo: Layout, applied: Job) -> None:
    digest = applied.input_digest("src/app.py")
    assert digest is not None
    blob = blobs_dir(repo) / digest
    assert blob.read_bytes() == FILES["src/app.py"]
    blob.chmod(0o600)
    blob.write_bytes(b"not the bytes it names\n")
    app = by_path(repo, applied)["src/app.py"]
    assert app.status == DiffStatus.MISSING and "the bytes it replaced are no longer kept" in app.note
    blob.unlink()
    assert by_path(repo, applied)["src/app.py"].status == DiffStatus.MISSING


def test_an_apply_record_naming_other_paths_or_hashes_shows_nothing_of_them(
    repo: Layout, applied: Job
) -> None:
    """The apply record is a claim: a target that is not the job's path at the job's input
    hash is not shown (it could make the view read any file)."""
    path = repo.job_file("applied", applied.key)
    record = loads_strict(path.read_bytes(), str(path))
    targets = record["apply"]["targets"]
    targets.append({"path": "../../etc/passwd", "before": None, "after": "0" * 64})
    targets[0]["before"] = "f" * 64
    path.chmod(0o600)
    path.write_bytes(canonical(record))
    assert set(by_path(repo, applied)) == {t["path"] for t in targets[1:2]}


def test_the_originals_an_apply_kept_are_read_before_the_blobs(repo: Layout, applied: Job) -> None:
    """Killed after its record was made, an apply leaves its originals in the journal until
    the next apply or recover closes it: those hold the bytes replaced, checked as blobs are."""
    digest = applied.input_digest("src/app.py")
    assert digest is not None
    (blobs_dir(repo) / digest).unlink()
    kept = repo.journal / applied.key
    kept.mkdir(parents=True)
    (kept / "0").write_bytes(FILES["src/app.py"])
    app = by_path(repo, applied)["src/app.py"]
    assert "-    return 1\n+    return 2\n" in app.text and app.note is None
    (kept / "0").write_bytes(b"another original\n")
    assert by_path(repo, applied)["src/app.py"].status == DiffStatus.MISSING
