"""The messages the board's invisible widgets (`tui.services`) post to the screen.

Each is one fact the screen acts on: what the feed read of `.gen/`, how a check run goes,
what an action did. Widgets that only talk to their own screen (the job table, a dialog)
keep their messages as nested classes, as Textual's own widgets do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message
from textual.notifications import SeverityLevel

if TYPE_CHECKING:
    from core.model.standing import Standing
    from core.read.board_view import BoardListing
    from core.read.inspect_job import JobDetail
    from core.read.plane_view import PlaneView
    from core.read.snapshot import JobRow
    from core.store.queue import Claim
    from core.work.ship import ShipResult


# -- what the feed read ------------------------------------------------------------------------
@dataclass
class NamesListed(Message):
    """Every job by name, from a listing of the state folders: the board starts again from it."""

    listing: BoardListing


@dataclass
class StampsRead(Message):
    """The mtime (ns) of each queued job's file, read after the first frame: the queue's order."""

    stamps: dict[str, int]


@dataclass
class RowsChanged(Message):
    """Jobs that appeared or changed (a row), or left (None)."""

    changed: Mapping[str, JobRow | None]


@dataclass
class SearchFound(Message):
    """A search for `needle` read `done` of `total` jobs; `rows` matched in the last stretch."""

    needle: str
    rows: list[JobRow]
    done: int
    total: int


@dataclass
class FeedStatus(Message):
    """Whether a full scan is under way, and how `.gen/` is being followed."""

    scanning: bool
    watching: str


@dataclass
class PolicyRead(Message):
    """What `config.toml` and `trusted_keys/` say, read with the last full scan."""

    signature_required: bool
    config_error: str | None
    trusted_keys: int
    config_held: str | None = None  # what the config would run and may not yet
    protected: tuple[str, ...] = ()  # `policy.protected_paths`


@dataclass
class VerdictsFound(Message):
    """Whether each received job's receipt verifies now (None: cannot tell)."""

    verdicts: dict[str, bool | None]


@dataclass
class PlaneRead(Message):
    """The apply plane as read now: the ready jobs in the order a pass takes them, and the
    overlaps of the jobs in flight (`core.read.plane_view`)."""

    plane: PlaneView | None  # None: it could not be read (the config)


@dataclass
class ChecksFound(Message):
    """Where each judged job's receipt and checks stand (with checks configured)."""

    standings: dict[str, Standing]


@dataclass
class ChecksConfigured(Message):
    """The checks `config.toml` defines, which policy requires, and how the board runs them."""

    names: tuple[str, ...]
    unsandboxed: tuple[str, ...]
    on_receipt: bool
    concurrency: int


@dataclass
class DetailLoaded(Message):
    """One job's detail, or the one-line reason it cannot be read."""

    key: str
    detail: JobDetail | str


@dataclass
class Trouble(Message):
    """Reading `.gen/` failed; the feed carries on (rescanning, or polling)."""

    text: str
    severity: SeverityLevel = "warning"


# -- how the checks the board runs go ----------------------------------------------------------
@dataclass
class CheckStarted(Message):
    key: str
    name: str


@dataclass
class CheckOutput(Message):
    """The output of `key`'s running checks moved on."""

    key: str


@dataclass
class CheckEnded(Message):
    """A check ended: passed (True), failed (False), or stopped or refused (None)."""

    key: str
    name: str
    passed: bool | None
    text: str
    manual: bool


# -- what an action did ---------------------------------------------------------------------------
@dataclass
class ActionDone(Message):
    """An action ran: one line per job done or failed; `keys` changed on disk."""

    verb: str
    done: list[str]
    failed: list[str]
    keys: list[str]
    select: str | None = None


@dataclass
class RunEnded(Message):
    """A ship of the board's ended (a job's, or a batch's: `key` its first), with the
    result of each of its runs (none when it ended before a run did)."""

    key: str
    results: tuple[ShipResult, ...]


@dataclass
class Say(Message):
    """A line for the operator (a refusal, a note), shown literally."""

    text: str
    severity: SeverityLevel = "information"
    title: str = ""


@dataclass
class ChecksWanted(Message):
    """Run these checks of `key` in the board's check runner (asked from a thread)."""

    key: str
    names: list[str]


@dataclass
class Held(Message):
    """The board holds `claim` (it claimed the job, or heartbeated its lease at `claim.lease.heartbeat`)."""

    claim: Claim


@dataclass
class Released(Message):
    """The board no longer holds `key` (its receipt is in, or its lease was taken back)."""

    key: str
