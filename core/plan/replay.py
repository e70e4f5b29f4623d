"""Replay: mint a finished-but-unusable job again over the tree as it is now."""

from __future__ import annotations

from core.errors import WrongState
from core.model.lifecycle import State, allowed
from core.model.paths import regular_file_inside
from core.plan.mint import build_job
from core.read.snapshot import job_row
from core.store.events import record_event
from core.store.layout import Layout
from core.store.queue import Enqueued, enqueue, locate


def replay(layout: Layout, key: str, allow_secrets: bool = False) -> Enqueued:
    """A new v2 job with the same instruction and paths that records `replay_of`.

    Paths that exist now become inputs at their current hash; paths that are gone become
    new files. Replaying the same job over the same tree twice gives the same key.
    """
    row = job_row(layout, key)
    state = row.state if row else None
    if state is None or not allowed("replay", state):
        allowed_states = ", ".join(s.value for s in sorted({State.STALE, State.FAILED, State.REJECTED}))
        raise WrongState(f"{key}: is {state.value if state else 'missing'}; replay is for {allowed_states}")
    job = locate(layout, key).job
    present = [p for p in job.allowed_paths if regular_file_inside(layout.root, p) is not None]
    new = [p for p in job.allowed_paths if p not in present]
    fresh = build_job(layout, job.instruction, present, new, replay_of=key, allow_secrets=allow_secrets)
    res = enqueue(layout, fresh)
    if res.created:
        record_event(layout, "replayed", key, as_key=res.key)
    return res
