"""Creating a repository's `.gen/` layout."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from core.errors import BadInput
from core.model.presets import (
    DEFAULT_MAX_BUDGET_USD,
    DEFAULT_MAX_TURNS,
    KEY_ENV,
    PresetSettings,
    preset_problem,
)
from core.store.config import DEFAULT_CONFIG, read_repository_config, runs_digest
from core.store.durable import atomic_write
from core.store.layout import GEN, Layout, require_own_root
from core.store.pins import pin_config


def init_repo(root: Path, preset: PresetSettings | None = None) -> tuple[Layout, list[str]]:
    """Create `.gen/` under `root` (idempotent); returns the layout and what was made.

    The config it writes is genjob's own, so what it runs is allowed at once; a config
    that was there already (it may have come with the repository) stays as it waits.
    `preset`: the config also gets a host that runs that coding agent unattended, named
    for it (`core.model.presets`).
    """
    layout = Layout(root.resolve())
    if preset is not None and (problem := preset_problem(preset)) is not None:
        raise BadInput(f"--generator {preset.preset}: {problem.replace(' = ', ' ')}")
    if preset is not None and layout.config.exists():
        raise BadInput(f"{layout.config}: exists already; add the {preset.preset} host to it by hand")
    require_own_root(layout)
    made = []
    for folder in [layout.gen, *layout.all_dirs()]:
        if not folder.is_dir():
            # 0755 whatever the umask: a folder others can write is not trusted (core.store.ownership).
            folder.mkdir(mode=0o755, parents=True, exist_ok=True)
            made.append(str(folder.relative_to(layout.root)) + "/")
    if not layout.config.exists():
        atomic_write(layout.config, (DEFAULT_CONFIG + preset_host(preset)).encode())
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


def preset_host(preset: PresetSettings | None) -> str:
    """The `[hosts.NAME]` table `init --generator NAME` adds; "" for none."""
    if preset is None:
        return ""
    key = preset.key_env or KEY_ENV[preset.preset]
    lines = [
        "",
        f"[hosts.{preset.preset}]",
        f"# {preset.preset} run unattended in the job's workspace, with its own limits and genjob's",
        "# timeout; what each run cost is kept with its attempts (`genjob help hosts`, Presets).",
        'transport = "local"',
        f'preset = "{preset.preset}"',
    ]
    lines += [f"model = {json.dumps(preset.model)}"] if preset.model else ['# model = "..."']
    if preset.env_file:
        lines.append(f"env_file = {json.dumps(preset.env_file)}   # holds {key}=...")
    else:
        lines.append(f'# env_file = "/home/you/.config/genjob/{preset.preset}.env"   # holds {key}=...')
    if preset.preset == "claude":
        lines.append(f"max_turns = {preset.max_turns or DEFAULT_MAX_TURNS}")
        lines.append(f"max_budget_usd = {float(preset.max_budget_usd or DEFAULT_MAX_BUDGET_USD)}")
    lines += ["timeout = 600", "concurrency = 1", ""]
    return "\n".join(lines)
