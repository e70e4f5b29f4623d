"""Where a receipt stands: the outcome of each verification step and each check.

These are the words a list of many jobs speaks in, so they live apart from the code that
produces them (`core.review.verify`, `core.review.checks`) and import nothing but the standard
library: the board shows its first frame from them before pydantic, the config model or
cryptography are loaded (`board_first_frame` in tests/bench).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.model.check_record import CheckRecord

# The outcome of one verification step.
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


class CheckState(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    NOT_RUN = "not run"
    STALE = "stale"
    RUNNING = "running"


@dataclass(frozen=True)
class CheckStatus:
    """One configured check of one job, as it stands now."""

    name: str
    state: CheckState
    required: bool
    detail: str
    sandboxed: bool
    record: CheckRecord | None = None

    @property
    def satisfied(self) -> bool:
        return self.state is CheckState.PASSED

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state.value,
            "required": self.required,
            "sandboxed": self.sandboxed,
            "detail": self.detail,
            "record": self.record.document() if self.record else None,
        }


@dataclass(frozen=True)
class Standing:
    """Where a job's receipt stands, for a list of many jobs: whether it verifies now,
    each check's state, and which outputs that is about (a digest of the receipt's
    output hashes; None without a receipt)."""

    verdict: bool | None
    checks: tuple[CheckStatus, ...]
    outputs: str | None
    protected: bool = False  # it writes a path `policy.protected_paths` covers

    @property
    def approvable(self) -> bool:
        """The receipt verifies, every required check passed on it, and it writes no
        protected path (such a job is approved alone, explicitly)."""
        return (
            self.verdict is True
            and not self.protected
            and all(c.satisfied for c in self.checks if c.required)
        )


def approvable(standings: Mapping[str, Standing]) -> tuple[list[str], dict[str, list[str]]]:
    """Split jobs into those apply would take now and, by reason, those it would not: a
    bulk approve runs on the first and says why it leaves out the others."""
    ok: list[str] = []
    left: dict[str, list[str]] = {}
    for key, standing in standings.items():
        if standing.approvable:
            ok.append(key)
            continue
        if standing.verdict is None:
            why = "no receipt (one with candidates is approved alone, to choose one)"
        elif standing.verdict is not True:
            why = "the receipt does not verify"
        elif standing.protected:
            why = "it writes protected paths (approved alone, explicitly)"
        else:
            states = {c.state for c in standing.checks if c.required and not c.satisfied}
            why = "required checks " + (
                "failed"
                if CheckState.FAILED in states
                else "still running"
                if CheckState.RUNNING in states
                else "stale"
                if CheckState.STALE in states
                else "not run yet"
            )
        left.setdefault(why, []).append(key)
    return ok, left
