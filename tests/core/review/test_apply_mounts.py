"""A target that is a mount point, for real: a bind mount in a private mount namespace.

`apply` runs in a subprocess under `unshare -m`, so the mount is gone with it. A target
that is a mount point cannot be swapped (EBUSY), nor one in a folder that is a mount
point moved into `.gen/journal/` (EXDEV): apply says so in one line naming the path,
rolls back what it had written, and ends without a traceback.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from corekit import FILES, mint, receive, tree_files
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.model.lifecycle import State
from core.read.snapshot import take_snapshot
from core.store.layout import Layout

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a bind mount in a private mount namespace needs root and unshare",
)

GENJOB = str(Path(sys.executable).parent / "genjob")
# The genjob command with apply's atomic exchange turned off, as on a filesystem without it.
WITHOUT_EXCHANGE = [
    sys.executable,
    "-c",
    "import sys, core.review.apply, tui.cli; core.review.apply.exchange = lambda *a: False; "
    "sys.argv[0] = 'genjob'; tui.cli.run()",
]


def changed(text: bytes) -> bytes:
    return text + b"# changed\n"


def apply_under_mount(layout: Layout, key: str, source: Path, target: Path, exchange: bool) -> str:
    """`genjob apply KEY` with `source` bind-mounted on `target`; its stderr (exit 2)."""
    command = [GENJOB] if exchange else WITHOUT_EXCHANGE
    argv = [*command, "--root", str(layout.root), "apply", key]
    script = f"mount --bind {shlex.quote(str(source))} {shlex.quote(str(target))} && exec {shlex.join(argv)}"
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], cwd=layout.root, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    return proc.stderr


def state_of(layout: Layout, key: str) -> State:
    return take_snapshot(layout, disk_cache=False).rows[key].state


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "link-and-rename"])
def test_a_target_that_is_a_mount_point_is_refused_and_the_rest_rolled_back(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, exchange: bool
) -> None:
    job = mint(repo, "Three outputs.", ["src/app.py", "src/util.py"], ["src/pkg/mod.py"])
    outputs = {"src/app.py": b"new app\n", "src/pkg/mod.py": b"VALUE = 1\n", "src/util.py": b"new util\n"}
    receive(repo, job.key, outputs, signer)
    twin = tmp_path / "util-twin.py"
    twin.write_bytes(FILES["src/util.py"])  # the same bytes: the base still holds
    before = tree_files(repo.root)
    said = apply_under_mount(repo, job.key, twin, repo.root / "src/util.py", exchange)
    [line] = said.splitlines()
    fault = "a mount point" if exchange else "it or its folder is a mount point"
    assert line == (
        f"genjob: {job.key}: apply stopped: src/util.py: {fault}; apply cannot replace it. "
        "Written, then rolled back: src/app.py, src/pkg/mod.py. Never written: src/util.py. "
        "Nothing of the job is in the tree: unmount it, or mint the job without that path"
    )
    assert tree_files(repo.root) == before
    assert twin.read_bytes() == FILES["src/util.py"]
    assert not (repo.root / "src/pkg").exists()
    assert os.listdir(repo.journal) == []
    assert state_of(repo, job.key) is State.RECEIVED


def test_a_target_in_a_folder_that_is_a_mount_point_is_refused_and_the_rest_rolled_back(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """`src/` a bind mount: the swap inside it works, but its original cannot move into
    `.gen/journal/` (EXDEV); the swap is put back before apply says so."""
    paths = ["README.md", "docs/guide.md", "src/util.py"]  # the order apply writes them in
    job = mint(repo, "Three files.", paths)
    receive(repo, job.key, {p: changed(FILES[p]) for p in paths}, signer)
    twin = tmp_path / "src-twin"
    shutil.copytree(repo.root / "src", twin)
    before, inside = tree_files(repo.root), tree_files(twin)
    said = apply_under_mount(repo, job.key, twin, repo.root / "src", exchange=True)
    [line] = said.splitlines()
    assert line.startswith(
        f"genjob: {job.key}: apply stopped: src/util.py: it or its folder is a mount point; "
        "apply cannot replace it. Written, then rolled back: README.md, docs/guide.md. "
        "Never written: src/util.py."
    )
    assert tree_files(repo.root) == before
    assert tree_files(twin) == inside, "the mounted folder holds what it held, and no temp copy"
    assert os.listdir(repo.journal) == []
    assert state_of(repo, job.key) is State.RECEIVED
