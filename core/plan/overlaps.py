"""The forecast at mint: the jobs in flight a new job overlaps, and what policy makes of it.

`policy.overlapping` (`core.store.config.Policy`): "warn" says each overlap; "refuse"
mints nothing and says why; "serialize" mints the job, and claim holds it back until the
older jobs it overlaps are applied or closed (`core.store.queue.Claimer`), then replays it
here, before any model call, when they changed its inputs.
"""

from __future__ import annotations

from core.errors import GenjobError
from core.model.models import Job
from core.model.paths import regular_file_inside
from core.plan.mint import build_job
from core.store.config import Config
from core.store.events import record_event
from core.store.layout import Layout
from core.store.overlaps import Overlap, in_flight, overlapping
from core.store.queue import enqueue, reject


class Overlapping(GenjobError):
    """A new job overlaps jobs in flight and `policy.overlapping` is "refuse"."""


def forecast(layout: Layout, job: Job, config: Config) -> list[Overlap]:
    """The jobs in flight that `job`, not yet enqueued, would overlap.

    Raises `Overlapping` (nothing written) when there are some and policy refuses them."""
    found = overlapping(job, in_flight(layout))
    if found and config.policy.overlapping == "refuse":
        lines = "; ".join(o.line() for o in found)
        raise Overlapping(
            f'{lines}; policy.overlapping = "refuse" in {layout.config}: nothing was minted '
            "(mint it once those are applied or closed)"
        )
    return found


def replay_waiting(layout: Layout, job: Job, moved: list[str]) -> str:
    """Replay a queued job whose inputs the jobs it waited for changed: the same instruction
    and paths over the tree as it is now (`replay_of` naming it), and the old job closed as
    rejected. The new job is built before anything is written, so a fault leaves both as
    they were. Returns the new key."""
    present = [p for p in job.allowed_paths if regular_file_inside(layout.root, p) is not None]
    new = [p for p in job.allowed_paths if p not in present]
    fresh = build_job(layout, job.instruction, present, new, replay_of=job.key)
    reason = f"its inputs changed while it waited for the jobs it overlaps ({', '.join(moved)}); "
    reject(layout, job.key, f"{reason}replayed as {fresh.key}", by="serialize")
    res = enqueue(layout, fresh)
    record_event(layout, "replayed", job.key, as_key=res.key, moved=moved)
    return res.key
