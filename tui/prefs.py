"""What the board remembers for the operator between starts: the theme chosen in the palette.

Kept in the operator's own folder (`~/.config/genjob/board.json`), never in a repository:
a board is the operator's, whichever repository it shows. A file that is missing, not
regular or not this shape is the same as no choice.
"""

from __future__ import annotations

import contextlib

from core.errors import BadInput
from core.model.canonical import canonical, loads_strict, read_bytes
from core.store.durable import atomic_write
from core.store.layout import config_folder, user_config_dir

PREFS = "board.json"
MAX_PREFS_BYTES = 4096


def kept_theme() -> str | None:
    """The theme the operator chose last, if any."""
    path = user_config_dir() / PREFS
    try:
        prefs = loads_strict(read_bytes(path, MAX_PREFS_BYTES), str(path))
    except (BadInput, OSError):
        return None
    theme = prefs.get("theme") if isinstance(prefs, dict) else None
    return theme if isinstance(theme, str) else None


def keep_theme(name: str) -> None:
    """Remember `name` as the board's theme (a failure to write only loses the choice)."""
    with contextlib.suppress(OSError):
        atomic_write(config_folder() / PREFS, canonical({"theme": name}), durable=False)
