"""Submitting a new job from an interface: the files it may name, and mint-then-enqueue."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from core.model.paths import RESERVED_TOP
from core.plan.mint import build_job
from core.review.scratch import git_files
from core.store.layout import Layout
from core.store.queue import Enqueued, enqueue


def submit_job(
    layout: Layout, instruction: str, paths: Iterable[str], new_paths: Iterable[str] = ()
) -> Enqueued:
    """Mint a v2 job over the tree as it is now and queue it (the secret check included)."""
    return enqueue(layout, build_job(layout, instruction, list(paths), list(new_paths)))


def repo_files(root: Path, limit: int = 20000) -> list[str]:
    """The repository's files a job may name: git's tracked and untracked-but-not-ignored
    files when it is a git work tree, else a walk that skips `.git/` and `.gen/`.

    GenjobError, with git's words, when git fails in a work tree: a walk instead would
    offer the files git ignores (`.env`).
    """
    names = git_files(
        root,
        ["--cached", "--others", "--exclude-standard"],
        "no file is listed, as a listing of every file would offer those git ignores (.env)",
    )
    if names is None:
        names = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in RESERVED_TOP)
            rel_dir = os.path.relpath(dirpath, root)
            for name in sorted(filenames):
                names.append(name if rel_dir == "." else f"{rel_dir}/{name}")
            if len(names) >= limit:
                break
    else:
        names = sorted(set(names))
    return [n for n in names if not n.startswith((".gen/", ".git/"))][:limit]
