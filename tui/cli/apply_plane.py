"""`genjob apply`'s apply plane: the writer lock it waits on (or not), the ready queue
(`--ready`, `--watch`) and merges (`--merge`); each a call into the core."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from core.errors import GenjobError
from core.model.terminal import visible
from core.store.job_keys import resolve_key
from core.store.layout import Layout
from tui.cli.output import notifying, say, say_on_stderr

if TYPE_CHECKING:
    from core.review.ready import Pulled
    from core.store.notify import Event


def held_writer(layout: Layout, wait: bool) -> AbstractContextManager[None]:
    """The repository's writer lock; waiting says who it waits for, once, on stderr."""
    from core.review.writer_lock import Holder, writer

    def waiting(holder: Holder) -> None:
        say(f"waiting for the apply lock, held by {holder.describe()}", err=True)

    return writer(layout, wait=wait, waiting=waiting)


def apply_plane(
    layout: Layout,
    key: str | None,
    commit: bool,
    *,
    protected: bool,
    sign: bool | None,
    no_wait: bool,
    ready: bool,
    watch: bool,
    merge: bool,
) -> bool:
    """Run `apply`'s queue or merge mode when one is asked for; False for a plain apply."""
    if watch and not ready:
        raise GenjobError("apply --watch: give --ready too (the queue it watches)")
    if ready and key is not None:
        raise GenjobError(f"apply --ready: applies every ready job; name no KEY ({visible(key)})")
    if ready and watch:
        _watch(layout, merge, commit, wait=not no_wait)
        return True
    if ready:
        with held_writer(layout, wait=not no_wait):
            _pull(layout, merge, commit)
        return True
    if key is None:
        raise GenjobError("apply: name a job KEY, or give --ready")
    if merge:
        with held_writer(layout, wait=not no_wait):
            _merge(layout, key, commit, protected, sign)
        return True
    return False


def _say_pulled(pulled: Pulled) -> None:
    say(visible(pulled.line()))


def _pull(layout: Layout, merge: bool, commit: bool) -> None:
    from core.plan.replay import replay_unmergeable
    from core.review.ready import pull

    done = pull(layout, merge=merge, commit=commit, replay=replay_unmergeable)
    for pulled in done:
        _say_pulled(pulled)
    if not done:
        say("no job has a receipt; nothing to apply")


def _watch(layout: Layout, merge: bool, commit: bool, wait: bool) -> None:
    """Until SIGTERM or SIGINT: the ready queue, pulled as receipts and checks arrive. The
    writer lock is taken for each pass, so that an apply by hand gets in between them."""
    from core.plan.replay import replay_unmergeable
    from core.review.ready import receipt_order, watch
    from core.store.config import load_config

    with held_writer(layout, wait):
        pass  # another apply plane (or an apply) now: waited for, or named with --no-wait

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if load_config(layout.config).policy.auto_apply == "never":
        say('policy.auto_apply = "never": listing what is ready, applying nothing', err=True)
    with notifying(layout.root, "apply", said=say_on_stderr) as notifier:
        news = PulledNews(set(receipt_order(layout)), notifier.send)

        def report(pulled: Pulled) -> None:
            _say_pulled(pulled)
            news(pulled)

        watch(layout, report, merge=merge, commit=commit, stop=stop, replay=replay_unmergeable)


class PulledNews:
    """What the apply plane's reports are worth telling: a receipt that arrived since the
    watch began, and a job that turned ready (verifies, its required checks passed) and,
    under `policy.auto_apply = "never"`, waits for the operator. What was there when the
    watch began is not news."""

    def __init__(self, there: set[str], send: Callable[[Event], None]) -> None:
        self.there = there
        self.send = send
        self.last: dict[str, str] = {}

    def __call__(self, pulled: Pulled) -> None:
        from core.store.notify import receipt_arrived, waiting_for_approval

        before = self.last.get(pulled.key)
        self.last[pulled.key] = pulled.done
        new = pulled.key not in self.there
        if new and before is None:
            self.send(receipt_arrived(pulled.key, None))
        if pulled.done == "ready" and before != "ready" and (new or before is not None):
            self.send(waiting_for_approval(pulled.key, pulled.why))


def _merge(layout: Layout, key: str, commit: bool, protected: bool, sign: bool | None) -> None:
    from core.review.merge import MergeConflict, apply_merged

    full = resolve_key(layout, key)
    try:
        res = apply_merged(layout, full, commit, protected=protected, sign=sign)
    except MergeConflict as exc:
        for path, lines in sorted(exc.hunks.items()):
            say(f"--- {visible(path)}: conflicts", err=True)
            for line in lines:
                say(f"  {visible(line)}", err=True)
        raise
    if res.already:
        say(f"{res.key}: applied already; nothing to do")
        return
    say(f"merged and applied {res.key}: {len(res.changed)} file(s) changed")
    for p in res.changed:
        say(f"  {visible(p)}")
    if res.commit:
        say(f"committed {res.commit}")
