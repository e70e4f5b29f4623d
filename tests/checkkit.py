"""Helpers the check tests share: a small project with a real test suite, configs, process scans."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest
from corekit import make_repo, mint, receive
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.model.models import Job
from core.review.checks import CheckRun, run_checks
from core.review.consent import allow_as_written
from core.store import procfs
from core.store.layout import Layout

CALC = b"def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
CALC_BROKEN = b"def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
CALC_BETTER = b'def add(a, b):\n    """The sum."""\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n'
TESTS = (
    b"from calc import add, mul\n\n\n"
    b"def test_add():\n    assert add(2, 3) == 5\n\n\n"
    b"def test_mul():\n    assert mul(2, 3) == 6\n"
)
PROJECT: dict[str, bytes] = {
    "calc.py": CALC,
    "tests/test_calc.py": TESTS,
    "tests/conftest.py": (
        b"import pathlib, sys\n\nsys.path.insert(0, str(pathlib.Path(__file__).parents[1]))\n"
    ),
    "README.md": b"# calc\n",
}
PYTEST = "python3 -m pytest -q -p no:cacheprovider tests"


def project(root: Path, files: dict[str, bytes] = PROJECT) -> Layout:
    """A git repository holding a small project with a real pytest suite."""
    return make_repo(root, files)


def configure(layout: Layout, checks: dict[str, str], extra: str = "", require: Sequence[str] = ()) -> None:
    """Write config.toml with these checks (name -> TOML body lines) and policy."""
    lines = ["[policy]", "require_signature = true", f"require_checks = {list(require)!r}".replace("'", '"')]
    for name, body in checks.items():
        lines += [f"[checks.{name}]", body]
    layout.config.write_text("\n".join(lines) + "\n" + extra)
    allow_as_written(layout)


def received(
    layout: Layout,
    signer: Ed25519PrivateKey,
    outputs: dict[str, bytes],
    paths: Sequence[str] | None = None,
    new: Sequence[str] = (),
) -> Job:
    """A job over `paths` (default: the outputs' paths) and `new` paths, with a signed
    receipt for `outputs`."""
    if paths is None:
        paths = [p for p in outputs if p not in new]
    job = mint(layout, f"Change {secrets.token_hex(4)}", paths=list(paths), new=list(new))
    assert receive(layout, job.key, outputs, signer).won
    return job


def check(layout: Layout, key: str, *names: str) -> list[CheckRun]:
    return asyncio.run(run_checks(layout, key, names))


def processes_with(marker: str) -> list[int]:
    """Pids of live (not zombie) processes whose command line holds `marker`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and procfs.alive(name):
            found.append(int(name))
    return found


def processes_left(marker: str, grace: float = 10.0) -> list[int]:
    """`processes_with(marker)` once none are left, or after `grace` seconds: a process
    sent SIGKILL is gone a moment later, not at once. The grace only bounds how long a
    failing test waits."""
    deadline = time.monotonic() + grace
    while (left := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


def hard_links(root: Path) -> dict[str, tuple[int, int]]:
    """(inode, link count) of every file under `root` but `.gen/`."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not (dirpath == str(root) and d == ".gen")]
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), root)] = (st.st_ino, st.st_nlink)
    return out


def unique_sleep() -> str:
    """A `sleep` argument no other process has: its marker in /proc."""
    return f"{900 + secrets.randbelow(99)}.{secrets.randbelow(10**6):06d}"


def lines(text: str) -> Iterable[str]:
    return (line.strip() for line in text.splitlines() if line.strip())


def refuse_git(root: Path, how: str) -> None:
    """Make git refuse to list `root`'s files: `.git` owned by another user ("dubious
    ownership", what git says of a clone another account made), or `.git` a file naming
    a repository that is not there."""
    if how == "dubious":
        if os.geteuid() != 0:
            pytest.skip("giving .git to another user takes root")
        os.chown(root / ".git", 4242, 4242)
    else:
        shutil.rmtree(root / ".git")
        (root / ".git").write_text("gitdir: /nonexistent/repository.git\n")
