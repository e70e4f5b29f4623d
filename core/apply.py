"""The apply plane: the only code that writes the repository's tree.

Apply runs under `.gen/state.lock`:
 1. a job already in `applied/` is a no-op; an open journal is finished first;
 2. the receipt must verify (every check in `core.verify`, signature by policy);
 3. a journal names every target with its before and after hash;
 4. each output is copied next to its target under a temp name and fsynced;
 5. each temp file is renamed over its target, and each folder fsynced;
 6. the job and an apply record go to `applied/`; the journal is removed.
A crash anywhere after step 3 is finished by the next `apply` or `recover`, which rolls
forward: a target already at its after hash is done, one at its before hash is written
again, and anything else stops with `ApplyConflict`, leaving the journal for a human.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.canonical import canonical, loads_strict, read_bytes, sha256_file
from core.config import Config, load_config
from core.durable import atomic_write, create_exclusive, flocked, fsync_dir, fsync_fd
from core.errors import ApplyConflict, BadInput, DurabilityError, GenjobError, VerificationFailed
from core.events import actor, record_event
from core.layout import Layout
from core.models import Job
from core.paths import lstat_inside
from core.queue import locate
from core.verify import Verification, verify

_COPY_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Applied:
    key: str
    changed: list[str]
    already: bool
    record: Path
    verification: Verification | None
    commit: str | None = None


def _tmp_name(target: Path, key: str) -> Path:
    return target.with_name(f".{target.name}.genjob-{key[:12]}.tmp")


def apply_job(layout: Layout, key: str, commit: bool = False) -> Applied:
    """Verify and apply one job's outputs to the tree; idempotent and crash-safe."""
    config = load_config(layout.config)
    with flocked(layout.lock):
        loc = locate(layout, key)
        if loc.folder == "applied":
            if layout.journal_file(key).exists():
                # Killed after the apply record was made: only the cleanup was left to do.
                _close(layout, key)
            return Applied(key, [], True, loc.path, None)
        if layout.journal_file(key).exists():
            changed = _finish(layout, loc.job, config, _read_journal(layout, key))
            return Applied(key, changed, False, layout.job_file("applied", key), None)
        if loc.folder != "running":
            raise VerificationFailed(f"{key}: is {loc.folder}; only a job with a receipt can be applied")
        v = verify(layout, loc.job, config)
        if not v.ok:
            lines = "; ".join(f"{c.name}: {c.detail}" for c in v.failures) or "incomplete checks"
            raise VerificationFailed(f"{layout.receipt(key)}: does not verify; {lines}")
        _same_filesystem(layout)
        assert v.receipt is not None
        targets = [
            {"path": rel, "before": loc.job.input_digest(rel), "after": digest}
            for rel, digest in sorted(v.receipt.outputs.items())
        ]
        journal = {
            "key": key,
            "digest": loc.job.digest,
            "targets": targets,
            "started_at": time.time(),
            "by": actor(),
            "signer": v.signer,
            "signature_required": v.signature_required,
        }
        atomic_write(layout.journal_file(key), canonical(journal))
        changed = _finish(layout, loc.job, config, journal)
    applied = Applied(key, changed, False, layout.job_file("applied", key), v)
    if commit and changed:
        return Applied(key, changed, False, applied.record, v, git_commit(layout, loc.job, changed))
    return applied


def _same_filesystem(layout: Layout) -> None:
    if os.stat(layout.gen).st_dev != os.stat(layout.root).st_dev:
        raise GenjobError(f"{layout.gen}: on another filesystem than {layout.root}; apply needs one")


def _read_journal(layout: Layout, key: str) -> dict[str, Any]:
    path = layout.journal_file(key)
    obj = loads_strict(read_bytes(path), str(path))
    if not isinstance(obj, dict) or obj.get("key") != key or not isinstance(obj.get("targets"), list):
        raise BadInput(f"{path}: not an apply journal for {key}")
    return obj


def _finish(layout: Layout, job: Job, config: Config, journal: dict[str, Any]) -> list[str]:
    """Roll the journal forward to the end; returns the paths whose bytes changed."""
    out = layout.out_dir(job.digest)
    pending = []
    for t in journal["targets"]:
        rel, before, after = t["path"], t["before"], t["after"]
        target = layout.root / rel
        st = lstat_inside(layout.root, rel)
        now = sha256_file(target) if st is not None and stat.S_ISREG(st.st_mode) else None
        if st is not None and now is None:
            raise ApplyConflict(f"{rel}: is no longer a regular file; apply of {job.key} stopped")
        if now == after:
            continue
        if now != before:
            raise ApplyConflict(
                f"{rel}: changed during the apply of {job.key} (now {str(now)[:12]}, "
                f"expected {str(before)[:12]} or {after[:12]}); journal kept at "
                f"{layout.journal_file(job.key)}"
            )
        pending.append((rel, after))
    staged = []
    try:
        for rel, after in pending:
            staged.append(_stage(layout.root, out / rel, rel, after, job.key))
        for rel, tmp in staged:
            os.replace(tmp, layout.root / rel)
        for folder in sorted({(layout.root / rel).parent for rel, _ in staged}):
            fsync_dir(folder)
    finally:
        for _, tmp in staged:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
    changed = [t["path"] for t in journal["targets"] if t["before"] != t["after"]]
    record = {
        "job": job.document(),
        "apply": {
            "at": time.time(),
            "by": journal.get("by"),
            "signer": journal.get("signer"),
            "signature_required": journal.get("signature_required"),
            "targets": journal["targets"],
            "changed": changed,
        },
    }
    applied = layout.job_file("applied", job.key)
    create_exclusive(applied, canonical(record))
    _close(layout, job.key)
    record_event(layout, "applied", job.key, changed=changed, signer=journal.get("signer"))
    return changed


def _close(layout: Layout, key: str) -> None:
    """With the apply record made: remove the job's other copies, its lease and the journal."""
    for path in (
        layout.job_file("running", key),
        layout.lease(key),
        layout.job_file("queue", key),
    ):
        path.unlink(missing_ok=True)
    fsync_dir(layout.running)
    layout.journal_file(key).unlink()
    fsync_dir(layout.journal)


def _stage(root: Path, src: Path, rel: str, after: str, key: str) -> tuple[str, Path]:
    """Copy an output next to its target under a temp name, fsynced; check its hash."""
    target = root / rel
    st = lstat_inside(root, rel)  # refuses a symlinked parent
    parent = target.parent
    if not parent.exists():
        parent.mkdir(parents=True)
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o644
    tmp = _tmp_name(target, key)
    tmp.unlink(missing_ok=True)
    fd_in = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    fd_out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    h = hashlib.sha256()
    try:
        while chunk := os.read(fd_in, _COPY_CHUNK):
            h.update(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd_out, view) :]
        fsync_fd(fd_out, tmp)
    except BaseException:
        os.close(fd_out)
        tmp.unlink(missing_ok=True)
        raise
    finally:
        os.close(fd_in)
    os.close(fd_out)
    if h.hexdigest() != after:
        tmp.unlink(missing_ok=True)
        raise DurabilityError(f"{src}: changed while being applied; nothing was written to {rel}")
    return rel, tmp


def git_commit(layout: Layout, job: Job, paths: list[str]) -> str:
    """Commit exactly the applied paths, with a `Genjob-Key:` trailer; returns the commit id."""
    first = job.instruction.strip().splitlines()[0][:72]
    message = (
        f"{first}\n\nApplied by genjob from a verified receipt.\n\n"
        f"Genjob-Key: {job.key}\nGenjob-Digest: {job.digest}\n"
    )

    def git(*args: str) -> str:
        proc = subprocess.run(["git", "-C", str(layout.root), *args], capture_output=True, text=True)
        if proc.returncode != 0:
            why = proc.stderr.strip() or proc.stdout.strip()
            raise GenjobError(f"git {args[0]}: {why} (the apply itself stands)")
        return proc.stdout.strip()

    git("add", "--", *paths)
    git("commit", "-q", "-m", message, "--", *paths)
    sha = git("rev-parse", "HEAD")
    record_event(layout, "committed", job.key, commit=sha)
    return sha
