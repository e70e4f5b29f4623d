"""Helpers the core tests share: repositories, tree snapshots, workers, the CLI."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import secrets
import stat
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from click.testing import CliRunner, Result
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import GenjobError
from core.model.models import V2, Job, job_bytes, job_from_obj
from core.plan.mint import build_job
from core.review.consent import allow_as_written
from core.store.layout import Layout
from core.store.pins import read_pins, update_pins
from core.store.queue import Claimer, enqueue
from core.store.receipts import Committed, commit_receipt, make_receipt
from core.store.repo import init_repo
from core.store.signing import sign
from tui.cli import main

FILES: dict[str, bytes] = {
    "src/app.py": b"def main():\n    return 1\n",
    "src/util.py": b"def helper(x):\n    return x * 2\n",
    "README.md": b"# demo\n",
    "docs/guide.md": b"Read me.\n",
}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def git(root: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True)
    return proc.stdout


def make_repo(root: Path, files: Mapping[str, bytes] = FILES, commit: bool = True) -> Layout:
    """A git repository holding `files` (committed), with `.gen/` initialised."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "tests@genjob.invalid")
    git(root, "config", "user.name", "genjob tests")
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if commit and files:
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "initial")
    layout, _ = init_repo(root)
    return layout


def set_config(layout: Layout, text: str) -> None:
    """Write `.gen/config.toml` as its operator would, and allow what it runs (as the
    operator would after `genjob allow`); a config that does not parse is written as is."""
    layout.config.write_text(text)
    with contextlib.suppress(GenjobError):
        allow_as_written(layout)


def carry_pins(src: Path, dst: Path) -> None:
    """Pin for `dst`, a copy of the repository at `src` a test made, what the operator
    pinned for `src` (a copy at another path is another repository to the operator)."""
    pins = read_pins(src)
    update_pins(dst, lambda p: dataclasses.replace(p, config=pins.config, keys=pins.keys))


def tree_state(root: Path) -> dict[str, str]:
    """Every entry under `root`: files by hash and mode, folders, links by target."""
    state: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                state[rel] = f"link:{os.readlink(full)}"
            elif stat.S_ISDIR(st.st_mode):
                state[rel] = "dir"
            elif stat.S_ISREG(st.st_mode):
                with open(full, "rb") as fh:
                    state[rel] = f"file:{oct(st.st_mode & 0o777)}:{sha(fh.read())}"
            else:
                state[rel] = f"other:{st.st_mode}"
    return state


def tree_files(root: Path) -> dict[str, bytes]:
    """The bytes of every file in the working tree (outside `.gen/` and `.git/`)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not (dirpath == str(root) and d in (".gen", ".git"))]
        for name in filenames:
            full = os.path.join(dirpath, name)
            out[os.path.relpath(full, root)] = Path(full).read_bytes()
    return out


def mint(
    layout: Layout,
    instruction: str = "Make it better.",
    paths: Sequence[str] = ("src/app.py",),
    new: Sequence[str] = (),
    schema: str = V2,
) -> Job:
    """Mint a job with the core (no CLI) and enqueue it."""
    job = build_job(layout, instruction, list(paths), list(new), schema)
    enqueue(layout, job)
    return job


def stage_outputs(layout: Layout, outputs: Mapping[str, bytes]) -> Path:
    """A staging folder inside `.gen/out/` holding `outputs`, as a worker leaves it."""
    stage = layout.out / f".stage-{secrets.token_hex(4)}"
    for rel, data in outputs.items():
        path = stage / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    stage.mkdir(parents=True, exist_ok=True)
    return stage


def receive(
    layout: Layout,
    key: str,
    outputs: Mapping[str, bytes],
    signer: Ed25519PrivateKey | None = None,
    status: str = "ok",
    worker: str = "w1",
) -> Committed:
    """Claim `key` (held by this process) and commit a receipt for `outputs`."""
    claim = Claimer(layout, worker).claim(key)
    receipt = make_receipt(claim.job, status, {rel: sha(data) for rel, data in outputs.items()}, worker)
    staged = stage_outputs(layout, outputs) if outputs else None
    return commit_receipt(layout, claim.job, receipt, claim.lease.token, worker, staged, signer)


def cli(*args: str, root: Path | None = None, input: str | None = None) -> Result:
    """Run `genjob ARGS` in this process; stdout and stderr are kept apart."""
    argv = (["--root", str(root)] if root is not None else []) + list(args)
    return CliRunner().invoke(main, argv, input=input, catch_exceptions=False)


def v2_job(instruction: str, inputs: Mapping[str, str | None], created_at: int = 1_767_225_600) -> Job:
    """A v2 job document built from its meaning, without touching a repository."""
    meaning = {
        "schema": V2,
        "instruction": instruction,
        "allowed_paths": sorted(inputs),
        "inputs": dict(inputs),
    }
    digest = sha(json.dumps(meaning, sort_keys=True, separators=(",", ":")).encode())
    doc = {**meaning, "idempotency_key": digest[:32], "created_at": created_at, "digest": digest}
    return job_from_obj(doc, "test job")


def write_jobs(layout: Layout, count: int, folder: str = "queue", prefix: str = "job") -> list[str]:
    """`count` distinct v2 jobs written straight into `folder` (fast: no fsync); their keys.
    Each edits src/app.py as `FILES` holds it (a repository with other bytes there has
    them STALE)."""
    keys = []
    for i in range(count):
        job = v2_job(f"{prefix} {i}", {"src/app.py": sha(FILES["src/app.py"])})
        (layout.gen / folder / f"{job.key}.json").write_bytes(job_bytes(job))
        keys.append(job.key)
    return keys


def write_receipt(
    layout: Layout,
    key: str,
    doc: Mapping[str, object],
    signer: Ed25519PrivateKey | None = None,
) -> Path:
    """Store a receipt document as given (valid or not), signed over its canonical bytes."""
    path = layout.receipt(key)
    body = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    path.write_bytes(body)
    if signer is not None:
        layout.signature(key).write_bytes(sign(signer, body))
    return path


def dead_pid() -> int:
    """A pid no process can have (one past the kernel's pid_max), so a lease naming it is dead.

    A pid of a process that has exited could be reused by the time it is checked.
    """
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
