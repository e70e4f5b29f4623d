"""The board's notifications: what its feed, its checks and its runs saw, told to the
channels the operator chose (`core.store.notify`); renders nothing.

The operator's `[notify]` is read in a thread once the board is up (`load`, after its
first rows are painted: pydantic and the config model load then, and would hold that
paint back); until then nothing is told. What the board finds on disk as it starts is
not news: a receipt is told when a job the board saw without one gets one. The bell
rings on the board's own terminal (`App.bell`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from textual import work
from textual.widget import Widget

from core.model.lifecycle import State
from core.store.layout import Layout
from tui.messages import Say

if TYPE_CHECKING:
    from core.read.rows import JobRow
    from core.store.notify import Event, Notifier
    from core.work.ship import ShipResult

# A job in one of these has no receipt; in one of the others it has one.
WITHOUT_RECEIPT = frozenset({State.QUEUED, State.RUNNING, State.ORPHANED})
WITH_RECEIPT = frozenset({State.RECEIVED, State.FAILED, State.STALE})


class Notices(Widget):
    DEFAULT_CSS = "Notices { display: none; }"

    def __init__(self, repo: Layout, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.repo = repo
        self.notifier: Notifier | None = None

    @work(thread=True, exclusive=True, exit_on_error=False)
    def load(self) -> None:
        """Read the operator's channels; until then nothing is told."""
        from core.store.notify import Notifier

        self.notifier = Notifier.of_operator(self.repo.root, "board", bell=self._bell, said=self._said)

    def _bell(self) -> None:
        """Rung from the notifier's thread: the app's bell, on the app's loop."""
        self.app.call_from_thread(self.app.bell)

    def _said(self, text: str) -> None:
        self.post_message(Say(text, "warning", title="notify"))

    def _send(self, events: Iterable[Event]) -> None:
        if self.notifier is not None:
            for event in events:
                self.notifier.send(event)

    def rows_changed(self, before: Mapping[str, State | None], changed: Mapping[str, JobRow | None]) -> None:
        """Rows the feed read, and the states the board had for them before: a receipt
        that arrived, and a job it made RECEIVED, which waits for the operator's approval."""
        wanted = self.notifier is not None and (
            self.notifier.wanted("receipt") or self.notifier.wanted("approval")
        )
        if not wanted:
            return
        from core.store.notify import receipt_arrived, waiting_for_approval

        for key, row in changed.items():
            if row is None or row.state not in WITH_RECEIPT or before.get(key) not in WITHOUT_RECEIPT:
                continue
            self._send([receipt_arrived(key, row.receipt_status, row.state.value)])
            if row.state is State.RECEIVED:
                self._send([waiting_for_approval(key, "its receipt is in; a shows what apply would do")])

    def check_ended(self, key: str, name: str, passed: bool | None, text: str) -> None:
        if passed is False and self.notifier is not None:
            from core.store.notify import check_failed

            self._send([check_failed(key, name, text)])

    def runs_ended(self, results: Iterable[ShipResult]) -> None:
        """A ship of the board's ended: each run a host failed is told (its receipt comes
        through the feed, as anyone's does)."""
        if self.notifier is None:
            return
        from core.store.notify import host_failed

        self._send(
            host_failed(r.key, r.host, r.attempt, r.reason)
            for r in results
            if r.won and r.status == "rejected"
        )

    def on_unmount(self) -> None:
        if self.notifier is not None:
            self.notifier.close(0)
