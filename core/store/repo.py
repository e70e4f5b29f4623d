"""Creating a repository's `.gen/` layout."""

from __future__ import annotations

import subprocess
from pathlib import Path

from core.store.config import DEFAULT_CONFIG, read_repository_config, runs_digest
from core.store.durable import atomic_write
from core.store.layout import GEN, Layout, require_own_root
from core.store.pins import pin_config


def init_repo(root: Path) -> tuple[Layout, list[str]]:
    """Create `.gen/` under `root` (idempotent); returns the layout and what was made.

    The config it writes is genjob's own, so what it runs is allowed at once; a config
    that was there already (it may have come with the repository) stays as it waits.
    """
    layout = Layout(root.resolve())
    require_own_root(layout)
    made = []
    for folder in [layout.gen, *layout.all_dirs()]:
        if not folder.is_dir():
            # 0755 whatever the umask: a folder others can write is not trusted (core.store.ownership).
            folder.mkdir(mode=0o755, parents=True, exist_ok=True)
            made.append(str(folder.relative_to(layout.root)) + "/")
    if not layout.config.exists():
        atomic_write(layout.config, DEFAULT_CONFIG.encode())
        made.append(f"{GEN}/config.toml")
        digest = runs_digest(read_repository_config(layout.config))
        if digest is not None:
            pin_config(layout.root, digest)
    # Made here so that no later command, even a refused one, adds a file to `.gen/`.
    layout.lock.touch(mode=0o644, exist_ok=True)
    layout.apply_lock.touch(mode=0o644, exist_ok=True)
    if _ignore_in_git(layout.root):
        made.append(".git/info/exclude: .gen/")
    return layout, made


def _ignore_in_git(root: Path) -> bool:
    """Make git ignore `.gen/` through `.git/info/exclude` (local, never committed)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--git-path", "info/exclude"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return False
    exclude = Path(out) if Path(out).is_absolute() else root / out
    lines = exclude.read_text().splitlines() if exclude.exists() else []
    if f"/{GEN}/" in lines:
        return False
    exclude.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(exclude, "\n".join([*lines, f"/{GEN}/"]).encode() + b"\n")
    return True


def is_git_work_tree(root: Path) -> bool:
    """Whether `root` is inside a git work tree (where an apply can also be committed)."""
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and out.stdout.strip() == "true"
