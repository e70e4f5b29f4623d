"""The repository's own ruff settings, passed to a host that runs ruff (`tidy`).

A generator runs in a workspace holding only the job's files, so ruff there finds no
`pyproject.toml` or `ruff.toml` and falls back to its defaults (88 columns, double
quotes): a project formatted at 79 would come back at 88. A host's generator line may
hold `{ruff_settings}`; `load_config` replaces it with the settings of the repository's
root `ruff.toml`, `.ruff.toml` or `pyproject.toml` `[tool.ruff]` (the one ruff itself
would read there), one shell-quoted `--config 'KEY = VALUE'` per top-level setting, the
way ruff takes inline overrides. `extend` (another file) and `cache-dir` (a path on this
machine) mean nothing in the workspace and are left out; a file that is not TOML is a
BadInput naming it, and the host's runs fail with it (every other command still works).
"""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path
from typing import Any

from core.errors import BadInput
from core.model.canonical import read_bytes

TOKEN = "{ruff_settings}"
_FILES = ("ruff.toml", ".ruff.toml", "pyproject.toml")
_SKIPPED = ("extend", "cache-dir")
MAX_SETTINGS_BYTES = 1 << 20


def repository_ruff_settings(root: Path) -> dict[str, Any]:
    """The ruff settings ruff would read at `root`; empty when there are none."""
    for name in _FILES:
        path = root / name
        if not path.is_file() or path.is_symlink():
            continue
        try:
            data = tomllib.loads(read_bytes(path, MAX_SETTINGS_BYTES).decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise BadInput(f"{path}: not valid TOML ({exc}), so tidy cannot pass its ruff settings") from None
        if name != "pyproject.toml":
            return data
        ruff = data.get("tool", {}).get("ruff")
        if isinstance(ruff, dict):
            return ruff
    return {}


def ruff_config_args(settings: dict[str, Any]) -> str:
    """`--config 'KEY = VALUE'` for each setting, shell-quoted, in order."""
    return " ".join(
        f"--config {shlex.quote(f'{_key(k)} = {_inline(v)}')}"
        for k, v in settings.items()
        if k not in _SKIPPED
    )


def _key(key: str) -> str:
    return key if key.replace("-", "").replace("_", "").isalnum() else json.dumps(key)


def _inline(value: Any) -> str:
    """`value` as TOML, inline."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's
    if isinstance(value, list):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_inline(v)}" for k, v in value.items()) + "}"
    raise BadInput(f"a ruff setting of type {type(value).__name__} cannot be passed on: {value!r}")
