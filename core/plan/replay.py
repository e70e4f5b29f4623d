"""Replay: mint a finished-but-unusable job again over the tree as it is now (or a queued
job whose inputs moved, STALE before it ever shipped: its replay closes it).

A v2 job is replayed as a v2 job that records `replay_of`. A v1 job stays v1, as the seed's
article says ("raise attempt in a new file with a new job_id"): the seed's own client must
load the replay, and its `GenerationJob` has no `replay_of`. A v1 key is the instruction and
the inputs, so a v1 replay over an unchanged tree would reuse the replayed job's key, and v1
cannot create a file: both are refused with the reason and the way out.
"""

from __future__ import annotations

from core.errors import BadInput, WrongState
from core.model.canonical import canonical, sha256_bytes
from core.model.lifecycle import State, allowed
from core.model.models import V1, V2, Job, JobV1
from core.model.paths import regular_file_inside
from core.plan.mint import build_job
from core.read.snapshot import job_row
from core.store.events import record_event
from core.store.layout import Layout
from core.store.queue import Enqueued, enqueue, locate, reject


def replay(layout: Layout, key: str, allow_secrets: bool = False) -> Enqueued:
    """A new job with the same instruction and paths: v2 recording `replay_of`, or for a v1
    job a v1 job with a new `job_id` and the next `attempt`.

    Paths that exist now become inputs at their current hash; paths that are gone become
    new files. Replaying the same job over the same tree twice gives the same key.
    """
    row = job_row(layout, key)
    state = row.state if row else None
    if state is None or not allowed("replay", state):
        allowed_states = ", ".join(s.value for s in sorted({State.STALE, State.FAILED, State.REJECTED}))
        raise WrongState(f"{key}: is {state.value if state else 'missing'}; replay is for {allowed_states}")
    located = locate(layout, key)
    job = located.job
    present = [p for p in job.allowed_paths if regular_file_inside(layout.root, p) is not None]
    new = [p for p in job.allowed_paths if p not in present]
    if isinstance(job, JobV1):
        fresh = _v1_replay(layout, job, present, new, allow_secrets)
    else:
        fresh = build_job(layout, job.instruction, present, new, replay_of=key, allow_secrets=allow_secrets)
    res = enqueue(layout, fresh)
    if res.created:
        record_event(layout, "replayed", key, as_key=res.key)
    if located.folder == "queue":  # a STALE job never shipped: its replay takes its place
        reject(layout, key, f"its inputs moved since the mint; replayed as {res.key}", by="replay")
    return res


def _v1_replay(layout: Layout, job: JobV1, present: list[str], new: list[str], allow_secrets: bool) -> Job:
    """The seed's replay of a v1 job: the same instruction and paths, a new `job_id`, the next `attempt`."""
    if new:
        raise BadInput(
            f"{job.key}: cannot be replayed as genjob.v1: {', '.join(new)} no longer exist(s) and a v1 job "
            f"cannot create files; mint it again as v2 (genjob mint --schema {V2} --new PATH ...)"
        )
    fresh = build_job(layout, job.instruction, present, schema=V1, allow_secrets=allow_secrets)
    if fresh.key == job.key:
        raise BadInput(
            f"{job.key}: cannot be replayed as genjob.v1 over this tree: its files are as the job was minted "
            "on, and a v1 key is the instruction and the inputs, so the replay would reuse this job's key; "
            f"edit a file first, or mint it again as v2 (genjob mint --schema {V2})"
        )
    body = {**fresh.digest_body(), "attempt": job.attempt + 1}
    return JobV1.model_validate({**body, "digest": sha256_bytes(canonical(body))})


def replay_unmergeable(layout: Layout, key: str, why: str) -> str:
    """`policy.auto_replay`: replay `key`, whose STALE receipt could not be merged (`why`),
    and close it as rejected naming its replay, so that no later pass replays it again.
    The replay comes first: after a crash between the two, the next pass replays it to the
    same key (the same tree) and closes it then. Returns the new key."""
    res = replay(layout, key)
    reject(layout, key, f"{why}; replayed as {res.key} (policy.auto_replay)", by="auto_replay")
    return res.key
