"""Submitting a new job from an interface: the files it may name, and mint-then-enqueue."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

from core.layout import Layout
from core.mint import build_job
from core.paths import RESERVED_TOP
from core.queue import Enqueued, enqueue


def submit_job(
    layout: Layout, instruction: str, paths: Iterable[str], new_paths: Iterable[str] = ()
) -> Enqueued:
    """Mint a v2 job over the tree as it is now and queue it (the secret check included)."""
    return enqueue(layout, build_job(layout, instruction, list(paths), list(new_paths)))


def repo_files(root: Path, limit: int = 20000) -> list[str]:
    """The repository's files a job may name: git's tracked and untracked-but-not-ignored
    files when it is a git work tree, else a walk that skips `.git/` and `.gen/`."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
            timeout=20,
        ).stdout
        names = sorted({n for n in out.decode("utf-8", "surrogateescape").split("\0") if n})
    except (OSError, subprocess.SubprocessError):
        names = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in RESERVED_TOP)
            rel_dir = os.path.relpath(dirpath, root)
            for name in sorted(filenames):
                names.append(name if rel_dir == "." else f"{rel_dir}/{name}")
            if len(names) >= limit:
                break
    return [n for n in names if not n.startswith((".gen/", ".git/"))][:limit]
