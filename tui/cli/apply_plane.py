"""`genjob apply`'s apply plane: the writer lock it waits on (or not), the ready queue
(`--ready`, `--watch`) and merges (`--merge`); each a call into the core."""

from __future__ import annotations

from contextlib import AbstractContextManager

from core.errors import GenjobError
from core.store.layout import Layout
from tui.cli.output import say


def held_writer(layout: Layout, wait: bool) -> AbstractContextManager[None]:
    """The repository's writer lock; waiting says who it waits for, once, on stderr."""
    from core.review.writer_lock import Holder, writer

    def waiting(holder: Holder) -> None:
        say(f"waiting for the apply lock, held by {holder.describe()}", err=True)

    return writer(layout, wait=wait, waiting=waiting)


def apply_plane(layout: Layout, key: str | None, commit: bool, *, no_wait: bool, **modes: bool) -> bool:
    """Run `apply`'s queue or merge mode when one is asked for; False for a plain apply."""
    if key is None:
        raise GenjobError("apply: name a job KEY, or give --ready")
    return False
