"""A queue that pulls: every RECEIVED job that verifies and passed its checks, applied in turn.

`pull` takes the repository's writer lock (`core.review.writer_lock`) for the whole pass
and goes through the jobs with a receipt, oldest receipt first. A job whose receipt
verifies and whose required checks passed on its exact outputs is applied; a STALE one is
merged over the tree (`core.review.merge`) when merging is on and every required check
passed on the receipt; anything else is left, with why, in one line each. Nothing is
forced: the apply and the merge refuse what they always refuse (a protected path needs
the operator's explicit approval, so a pass never writes one).

`policy.auto_apply` ("never" | "checked") says whether the apply plane as a process
(`genjob apply --ready --watch`) may apply with no person in the loop, and
`policy.auto_merge` whether a pass may merge unasked. `policy.auto_replay` lets a pass
replay a job whose STALE receipt it could not merge (the replay itself is given by the
plane above, `core.plan.replay.replay_unmergeable`, which closes the job naming its
replay, so no later pass replays it again), at most `policy.auto_replay_attempts`
replays down one job's chain. All three are settings a cloned repository's config cannot
switch on by itself (they are under the operator's consent, `core.store.config.what_runs`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from core.errors import GenjobError, Stale
from core.model.models import KEY_RE, Job, JobV1, JobV2
from core.review.apply_job import apply_job
from core.review.check_status import READY, require_checks
from core.review.merge import MergeConflict, apply_merged
from core.review.verify import verify
from core.review.writer_lock import writer
from core.store.config import Config, load_config
from core.store.layout import Layout
from core.store.queue import locate
from core.store.tree import make_folder

# Replays a job whose STALE receipt could not be merged, closing it as rejected with a
# reason that names its replay: (layout, key, why) -> the new key. Given by the plane above.
JobReplayer = Callable[[Layout, str, str], str]


@dataclass(frozen=True)
class Pulled:
    """What a pass did with one job: "applied", "merged", "replayed", "ready" (listed
    only) or "left"."""

    key: str
    done: str
    why: str

    def line(self) -> str:
        return f"{self.done} {self.key}: {self.why}"


def receipt_order(layout: Layout) -> list[str]:
    """The keys of the jobs with a receipt in `running/`, oldest receipt first."""
    try:
        entries = list(os.scandir(layout.receipts))
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        key = entry.name[: -len(".json")]
        if not entry.name.endswith(".json") or not KEY_RE.fullmatch(key):
            continue
        if not os.path.lexists(layout.job_file("running", key)):
            continue
        try:
            found.append((entry.stat(follow_symlinks=False).st_mtime_ns, key))
        except FileNotFoundError:
            continue
    return [key for _, key in sorted(found)]


def pull(
    layout: Layout,
    *,
    apply: bool = True,
    merge: bool = False,
    commit: bool = False,
    wait: bool = True,
    replay: JobReplayer | None = None,
) -> list[Pulled]:
    """One pass over the received jobs, as the repository's one writer.

    `apply` False lists what is ready, in the order a pass would take it, and writes
    nothing (nor waits for the writer: what the board's "ready" filter shows); `merge` (the
    operator asked) or `policy.auto_merge` merges a STALE receipt over the tree; `replay`
    replays one that cannot be merged, under `policy.auto_replay`."""
    with writer(layout, wait=wait) if apply else contextlib.nullcontext():
        config = load_config(layout.config)
        how = "operator" if merge else "auto_merge" if config.policy.auto_merge else None
        replayer = replay if config.policy.auto_replay else None
        return [_pull_one(layout, key, config, apply, how, commit, replayer) for key in receipt_order(layout)]


def _pull_one(
    layout: Layout,
    key: str,
    config: Config,
    apply: bool,
    merge: str | None,
    commit: bool,
    replay: JobReplayer | None,
) -> Pulled:
    """`merge`: who approves merging a STALE receipt ("operator", "auto_merge"); None: no merge."""
    try:
        loc = locate(layout, key)
        if loc.folder != "running":
            return Pulled(key, "left", f"is {loc.folder} now")
        v = verify(layout, loc.job, config)
        if v.ok:
            require_checks(layout, loc.job, config, v)
            if not apply:
                return Pulled(key, "ready", READY)
            res = apply_job(layout, key, commit)
            return Pulled(key, "applied", _changed(res.changed, res.commit))
        if not v.only_base_failed():
            lines = "; ".join(f"{c.name}: {c.detail}" for c in v.failures) or "incomplete checks"
            return Pulled(key, "left", f"does not verify: {lines}")
        if merge is None:
            detail = v.check("base").detail
            hint = f"genjob apply {key} --merge, or genjob replay {key}"
            return Pulled(key, "left", f"STALE, the tree moved on ({detail}): {hint}")
        if not apply:
            return Pulled(key, "ready", "STALE: would be merged over the tree as it is")
        try:
            merged = apply_merged(layout, key, commit, how=merge)
        except (MergeConflict, Stale) as exc:
            return _unmergeable(layout, loc.job, config, exc, replay)
        return Pulled(key, "merged", _changed(merged.changed, merged.commit))
    except GenjobError as exc:
        return Pulled(key, "left", str(exc))


def _unmergeable(
    layout: Layout, job: Job, config: Config, exc: MergeConflict | Stale, replay: JobReplayer | None
) -> Pulled:
    """A STALE receipt the pass could not merge: left, saying why, or replayed under
    `policy.auto_replay` until its chain of replays reaches the cap."""
    if isinstance(exc, MergeConflict):
        said = f"{exc} ({_hunk_count(exc)} conflicting line(s))"
        why = f"its three-way merge conflicts in {', '.join(sorted(exc.hunks))}"
    else:
        said, why = str(exc), "it cannot be merged over the tree as it is"
    if replay is None:
        return Pulled(job.key, "left", said)
    cap = config.policy.auto_replay_attempts
    made = replays_behind(layout, job, cap)
    if made >= cap:
        return Pulled(
            job.key,
            "left",
            f"{said}; not replayed: {made} replay(s) down its chain already, the cap "
            f"(policy.auto_replay_attempts = {cap})",
        )
    fresh = replay(layout, job.key, why)
    return Pulled(job.key, "replayed", f"{why}: replayed as {fresh} (auto_replay, {made + 1} of {cap})")


def replays_behind(layout: Layout, job: Job, limit: int) -> int:
    """How many replays `job` is down its chain (counted up to `limit`): the jobs its
    `replay_of` leads back through; a v1 job's count is its `attempt` less one."""
    if isinstance(job, JobV1):
        return min(max(job.attempt - 1, 0), limit)
    made, before = 0, job.replay_of
    while made < limit and before is not None:
        made += 1
        try:
            older = locate(layout, before).job
        except GenjobError:
            break
        before = older.replay_of if isinstance(older, JobV2) else None
    return made


def _changed(paths: list[str], commit: str | None) -> str:
    said = f"{len(paths)} file(s) changed"
    return said + (f", committed {commit}" if commit else "")


def _hunk_count(exc: MergeConflict) -> int:
    return sum(len(lines) for lines in exc.hunks.values())


# A pass also runs this often with no event at all: watch events are hints (an NFS
# client sees no other client's writes; an overflow drops some).
_RESCAN_MS = 5000


def watch(
    layout: Layout,
    report: Callable[[Pulled], None],
    *,
    merge: bool = False,
    commit: bool = False,
    stop: threading.Event | None = None,
    replay: JobReplayer | None = None,
) -> None:
    """The apply plane as a process: a pass now, and again each time receipts or check
    records change, until `stop` is set. Under `policy.auto_apply = "never"` it only lists
    what is ready. Each job's outcome is reported when it is new or changed."""
    from watchfiles import watch as watch_files  # only the watching process needs it

    said: dict[str, str] = {}
    folders = [str(make_folder(layout.receipts, layout.gen)), str(make_folder(layout.checks, layout.gen))]

    def one_pass() -> None:
        applying = load_config(layout.config).policy.auto_apply == "checked"
        for pulled in pull(layout, apply=applying, merge=merge, commit=commit, replay=replay):
            if said.get(pulled.key) != pulled.line():
                said[pulled.key] = pulled.line()
                report(pulled)

    one_pass()
    for _ in watch_files(*folders, stop_event=stop, rust_timeout=_RESCAN_MS, yield_on_timeout=True):
        one_pass()
