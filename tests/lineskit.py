"""A twelve-line file under git and jobs received over it: the apply plane's tests edit
one line each, so that two receipts merge clean or conflict as the test needs."""

from __future__ import annotations

import os

from corekit import git, receive
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.plan.mint import build_job
from core.store.layout import Layout
from core.store.queue import enqueue

LINES = b"".join(f"line {i}\n".encode() for i in range(1, 13))


def edit(line: int, to: str, base: bytes = LINES) -> bytes:
    return base.replace(f"line {line}\n".encode(), f"{to}\n".encode())


def commit_lines(repo: Layout) -> Layout:
    """`src/lines.py` written and committed in `repo`."""
    (repo.root / "src/lines.py").write_bytes(LINES)
    git(repo.root, "add", "src/lines.py")
    git(repo.root, "commit", "-q", "-m", "lines")
    return repo


def received(layout: Layout, signer: Ed25519PrivateKey, instruction: str, out: bytes, at: int) -> str:
    """A job over src/lines.py minted on the tree as it is, received with `out`, its receipt
    dated `at` (the queue's order)."""
    job = build_job(layout, instruction, ["src/lines.py"])
    enqueue(layout, job)
    assert receive(layout, job.key, {"src/lines.py": out}, signer).won
    os.utime(layout.receipt(job.key), (at, at))
    return job.key
