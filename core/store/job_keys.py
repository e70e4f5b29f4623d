"""A job named on a command line: its full key, or a unique prefix of one."""

from __future__ import annotations

import os
from pathlib import Path

from core.errors import GenjobError, NotFound
from core.model.contract import KEY_RE
from core.store.layout import JOB_FOLDERS, Layout


def resolve_key(layout: Layout, given: str) -> str:
    """A full key, or a unique prefix of one (like a git commit id)."""
    if KEY_RE.fullmatch(given):
        if _job_file_named(layout, given) is None and not os.path.lexists(layout.receipt(given)):
            raise NotFound(f"{given}: no job has this key; `genjob ls` lists the jobs")
        return given
    if not given or not all(c in "0123456789abcdef" for c in given):
        plain_name = given and "/" not in given and not given.startswith(".")
        stray = _job_file_named(layout, given) if plain_name else None
        if stray is not None:
            raise GenjobError(
                f"{stray}: not named by a job key, so genjob did not write it; "
                "move it out of .gen/ to keep it, or delete it"
            )
        raise GenjobError(f"{given!r}: not a job key; `genjob ls` lists the jobs")
    found: set[str] = set()
    for folder in JOB_FOLDERS:
        try:
            names = os.listdir(layout.gen / folder)
        except FileNotFoundError:  # a folder a clone dropped holds no job
            continue
        found.update(n[:32] for n in names if n.startswith(given) and n.endswith(".json"))
    if not found:
        raise NotFound(f"{given}: no job key starts with this; `genjob ls` lists the jobs")
    if len(found) > 1:
        raise GenjobError(f"{given}: ambiguous, matches {len(found)} jobs; type more of the key")
    return found.pop()


def _job_file_named(layout: Layout, name: str) -> Path | None:
    """`<name>.json` in the first state folder that has one (a link counts: it is there)."""
    return next((p for f in JOB_FOLDERS if os.path.lexists(p := layout.job_file(f, name))), None)
