"""Moving jobs between state folders: enqueue, claim, heartbeat, release, requeue, reject, cancel.

A claim is a bare rename from `queue/` to `running/`: exactly one claimer's rename can
succeed. Every other move happens under `.gen/state.lock`, so that a requeue cannot
interleave with a receipt being committed or an apply. A requeue, and a cancel of a job
whose worker is gone, run its host's `cleanup` (`core.store.scheduler`) afterwards, outside
the lock: what a dead worker left running on a scheduler is stopped.
"""

from __future__ import annotations

import os
import random
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import BadInput, KeyConflict, NotFound, NothingToClaim, WrongState
from core.model import freshness
from core.model.canonical import canonical, read_bytes
from core.model.freshness import LeaseState
from core.model.models import KEY_RE, Job, JobV1, check_key, job_bytes, job_from_bytes
from core.store.blobs import keeping
from core.store.config import load_config
from core.store.durable import atomic_write, create_exclusive, flocked, fsync_dir, move, rename
from core.store.events import attempts, claims, record_attempt, record_event
from core.store.job_state import read_job_file, said_state
from core.store.layout import JOB_FOLDERS, Layout
from core.store.lease import Lease, lease_verdict, new_lease, own_lease, read_lease, write_lease
from core.store.overlaps import in_flight, moved_inputs, waits_for
from core.store.tree import make_folder

if TYPE_CHECKING:
    from core.store.scheduler import Cleanup


@dataclass(frozen=True)
class Located:
    """A job document found on disk, with the folder that holds it."""

    key: str
    folder: str
    path: Path
    job: Job
    record: dict[str, Any] | None = None  # the apply or rejection record, when final
    also_in: tuple[str, ...] = ()


def locate(layout: Layout, key: str) -> Located:
    """Find the job with `key` in whichever state folder holds it."""
    check_key(key)
    found = [f for f in JOB_FOLDERS if layout.job_file(f, key).exists()]
    if not found:
        raise NotFound(f"{key}: no such job in {layout.gen}")
    folder = found[0]
    path = layout.job_file(folder, key)
    job, record = read_job_file(path, folder)
    return Located(key, folder, path, job, record, tuple(found[1:]))


def same_work(a: Job, b: Job) -> bool:
    """Whether two documents are one submission: the same digest, or for v1 (whose digest
    covers a fresh uuid and timestamp) the same schema, instruction, paths and inputs."""
    if a.digest == b.digest:
        return True
    meaning = ("schema_", "instruction", "allowed_paths", "inputs")
    return (
        isinstance(a, JobV1) and isinstance(b, JobV1) and all(getattr(a, f) == getattr(b, f) for f in meaning)
    )


@dataclass(frozen=True)
class Enqueued:
    key: str
    path: Path
    created: bool
    folder: str


def enqueue(layout: Layout, job: Job) -> Enqueued:
    """Write a minted job into `queue/`, or report where the same job already is.

    The same key with other content anywhere is a `KeyConflict` naming both documents.
    """
    key = job.key
    for folder in JOB_FOLDERS:
        path = layout.job_file(folder, key)
        if path.exists():
            existing, _ = read_job_file(path, folder)
            if not same_work(existing, job):
                raise KeyConflict(
                    f"{path}: key {key} is already used by digest {existing.digest[:16]}…; "
                    f"the new job has digest {job.digest[:16]}…"
                )
            return Enqueued(key, path, False, folder)
    path = layout.job_file("queue", key)
    with keeping(layout, job):  # before the job exists: a job is never without its base's bytes
        created = create_exclusive(make_folder(path.parent, layout.gen) / path.name, job_bytes(job))
    if not created:
        return enqueue(layout, job)
    record_event(layout, "minted", key, schema=job.schema_name, digest=job.digest)
    return Enqueued(key, path, True, "queue")


# Mints a serialized job again over the tree as it is, closing the old one: (layout, job,
# the paths that moved) -> the new key. Given by the planes above (`core.plan.overlaps`).
Replayer = Callable[[Layout, Job, list[str]], str]


@dataclass(frozen=True)
class Claim:
    key: str
    job: Job
    lease: Lease
    path: Path


def queue_stamps(layout: Layout) -> dict[str, int]:
    """The mtime (ns) of each queued job's file, by key: claims take the oldest first."""
    stamps = {}
    with os.scandir(layout.queue) as it:
        for e in it:
            if e.name.endswith(".json") and KEY_RE.fullmatch(e.name[:-5]):
                try:
                    stamps[e.name[:-5]] = e.stat(follow_symlinks=False).st_mtime_ns
                except FileNotFoundError:  # claimed since
                    continue
    return stamps


class Claimer:
    """Claims jobs for one worker, oldest first, from one listing of the queue at a time.

    Several claimers race by renaming the same files; a lost race is a vanished source,
    and the claimer simply moves on to its next candidate.
    """

    def __init__(
        self,
        layout: Layout,
        worker: str,
        ttl: float = 120.0,
        pid: int | None = None,
        replay: Replayer | None = None,
    ) -> None:
        self.layout = layout
        self.worker = worker
        self.ttl = ttl
        self.pid = pid
        self.replay = replay
        self._candidates: list[str] = []
        self._serialize: bool | None = None
        self.skipped: dict[str, str] = {}  # what the last claim left queued, and why

    def _list(self) -> list[str]:
        stamps = queue_stamps(self.layout)
        keys = sorted(stamps, key=lambda k: (stamps[k], k))
        # Racing claimers start a little apart so they do not all collide on the head.
        if len(keys) > 64:
            cut = random.randrange(min(len(keys), 64))
            keys = keys[cut:] + keys[:cut]
        return keys[::-1]

    def claim(self, key: str | None = None) -> Claim:
        """Claim `key`, or the oldest queued job; NothingToClaim when none is left.

        Without a key, a job file that cannot be claimed (INVALID, STALE, or a key already
        running) is left where it is and skipped (in `skipped`, with the reason), so one
        bad file never blocks the queue.
        """
        if key is not None:
            claimed = self._try(check_key(key))
            if claimed is None:
                locate(self.layout, key)  # NotFound for a key in no folder
                raise WrongState(f"{key}: is {said_state(self.layout, key)}, not QUEUED; nothing claimed")
            return claimed
        self.skipped = {}
        skipped = self.skipped
        for relisted in (False, True):
            if relisted or not self._candidates:
                self._candidates = [k for k in self._list() if k not in skipped]
            while self._candidates:
                candidate = self._candidates.pop()
                try:
                    claimed = self._try(candidate)
                except (BadInput, WrongState) as exc:
                    skipped[candidate] = str(exc)
                    continue
                if claimed is not None:
                    return claimed
        why = ""
        if skipped:
            why = f"; skipped {len(skipped)} that cannot be claimed: {next(iter(skipped.values()))}"
        raise NothingToClaim(f"{self.layout.queue}: nothing left to claim{why}")

    def _serialized(self) -> bool:
        if self._serialize is None:
            self._serialize = load_config(self.layout.config).policy.overlapping == "serialize"
        return self._serialize

    def _hold_back(self, key: str) -> None:
        """Under `policy.overlapping = "serialize"`: refuse (WrongState) a job that waits for
        an older overlapping job in flight; a job whose inputs those changed is replayed by
        `replay` (never shipped on a stale base) and refused, naming its replay."""
        src = self.layout.job_file("queue", key)
        try:
            job = job_from_bytes(read_bytes(src), str(src))
        except FileNotFoundError:
            return  # claimed by another meanwhile: the rename says so
        flight = in_flight(self.layout)
        waits = waits_for(job, flight)
        if waits:
            raise WrongState(
                f"{key}: waits for the older jobs it overlaps ({'; '.join(o.line() for o in waits)}); "
                'policy.overlapping = "serialize"; nothing claimed'
            )
        moved = moved_inputs(self.layout, job)
        if not moved:
            return
        if self.replay is None:
            raise WrongState(
                f"{key}: the jobs it waited for changed its inputs ({', '.join(moved)}), so it is not "
                "shipped on a stale base; nothing claimed: `genjob worker`, `genjob ship KEY` and "
                "`genjob claim` replay it over the tree as it is"
            )
        fresh = self.replay(self.layout, job, moved)
        raise WrongState(
            f"{key}: its inputs changed while it waited ({', '.join(moved)}); replayed as {fresh}"
        )

    def _try(self, key: str, remake: bool = True) -> Claim | None:
        src = self.layout.job_file("queue", key)
        dst = self.layout.job_file("running", key)
        if self._serialized():
            self._hold_back(key)
        try:
            # The claim's one fsync, of running/ (queue/ is not synced: after a crash the
            # job is in one folder or the other, whole, either way). Without it a power cut
            # could undo a claim whose worker already started: the job would be claimed
            # again and run twice, with nothing in running/ to say it had been taken.
            move(src, dst, sync_source=False)
        except FileNotFoundError:
            if remake and os.path.lexists(src) and not os.path.isdir(dst.parent):
                # running/ itself is gone (a clone keeps no empty folder): made, then tried again
                make_folder(dst.parent, self.layout.gen)
                return self._try(key, remake=False)
            return None  # another claimer renamed it first
        except FileExistsError:
            if not os.path.lexists(src):
                return None  # another claimer renamed it first
            raise WrongState(f"{dst}: already running; {src} left in the queue") from None
        try:
            # Faults name the queued file: that is where the job stays when it is refused.
            job = job_from_bytes(read_bytes(dst, source=str(src)), str(src))
            if job.key != key:
                raise BadInput(f"{src}: file name does not match its key {job.key}")
            moved = moved_inputs(self.layout, job)
            if moved:
                raise WrongState(
                    f"{key}: is STALE: its inputs changed since it was minted ({', '.join(moved)}), so "
                    f"shipping it would only fail; nothing claimed: `genjob replay {key}` mints it again "
                    "over the tree as it is"
                )
            # Read only now that the rename has made this claim the one: the attempt
            # number is the lease's fencing token.
            token = claims(attempts(self.layout, key)) + 1
        except (BadInput, WrongState):
            # Not ours to run (stale, or its attempts file cannot be read): put it back, so
            # it shows in the queue with its fault, and no attempt is spent on it.
            rename(dst, src)
            raise
        lease = new_lease(self.worker, token, self.ttl, self.pid)
        write_lease(self.layout, key, lease)
        record_attempt(self.layout, key, "claimed", attempt=token, worker=self.worker)
        record_event(self.layout, "claimed", key, worker=self.worker, attempt=token)
        return Claim(key, job, lease, dst)


def claim(
    layout: Layout,
    worker: str,
    key: str | None = None,
    ttl: float = 120.0,
    pid: int | None = None,
    replay: Replayer | None = None,
) -> Claim:
    """Claim one job; the lease names `pid` (default: this process) as its holder."""
    return Claimer(layout, worker, ttl, pid, replay).claim(key)


def heartbeat(layout: Layout, key: str, token: int, worker: str) -> bool:
    """Renew our lease; False when it is no longer ours (requeued, reclaimed or gone)."""
    with flocked(layout.lock):
        lease = own_lease(layout, key, token, worker)
        if lease is None:
            return False
        write_lease(layout, key, lease.model_copy(update={"heartbeat": time.time()}))
        return True


def renew_claim(layout: Layout, key: str, worker: str, pid: int, ttl: float | None = None) -> Lease:
    """Renew the lease `worker` holds on `key` (as `genjob claim` made it): its heartbeat
    now, `pid` (a process on this host) as its holder, and, given `ttl`, its ttl.

    Refused (WrongState, nothing written) when the job is not running, its lease is
    missing or another worker's, or its heartbeat no longer counts: a heartbeat never
    brings back a job ORPHANED by its ttl, which its operator may be requeuing. A lease
    whose holder process alone is gone is taken over: a heartbeat within the ttl is the
    proof of life, the holder only the quicker sign of a death."""
    check_key(key)
    with flocked(layout.lock):
        folder = next((f for f in JOB_FOLDERS if layout.job_file(f, key).exists()), None)
        if folder != "running":
            where = f"is {said_state(layout, key)}" if folder else "has no job file"
            raise WrongState(f"{key}: {where}, not claimed; nothing renewed (`genjob claim` claims a job)")
        if layout.receipt(key).exists():
            raise WrongState(f"{key}: has a receipt already; its lease needs no heartbeat")
        lease = read_lease(layout, key)
        if lease is None:
            raise WrongState(f"{layout.lease(key)}: no lease, so the job is not claimed; nothing renewed")
        if lease.worker != worker:
            raise WrongState(
                f"{key}: claimed by {lease.worker} (pid {lease.pid} on {lease.host}), not by {worker}; "
                "nothing renewed"
            )
        now = time.time()
        if why := freshness.expiry(lease.heartbeat, lease.ttl, now):
            raise WrongState(
                f"{key}: its lease has lapsed ({why}), so the job is ORPHANED; nothing renewed: "
                "`genjob requeue` it and claim it again"
            )
        renewed = lease.model_copy(
            update={
                "heartbeat": now,
                "host": socket.gethostname(),
                "pid": pid,
                "ttl": lease.ttl if ttl is None else ttl,
            }
        )
        write_lease(layout, key, renewed)
        return renewed


def lease_state(layout: Layout, key: str, now: float | None = None) -> LeaseState:
    """The state of the lease of `key`, a job in running/, by the one rule (`core.model.freshness`)."""
    return lease_verdict(layout, key, now).state


def _back_in_queue(layout: Layout, key: str, src: Path) -> Path:
    """Move a running job's file back to the queue, byte for byte, and drop its lease and
    any cancel request (under the state lock, held by the caller)."""
    dst = layout.job_file("queue", key)
    move(src, make_folder(dst.parent, layout.gen) / dst.name)
    layout.lease(key).unlink(missing_ok=True)
    layout.cancel_request(key).unlink(missing_ok=True)
    return dst


def release(layout: Layout, key: str, token: int, worker: str) -> Path:
    """Give back a claim this worker holds and has not run: the job goes back to the
    queue, byte for byte, and the attempt is recorded as released."""
    return _put_back(layout, key, token, worker, event="released", refused="nothing released")


def _put_back(
    layout: Layout, key: str, token: int, worker: str, *, event: str, refused: str, **facts: str
) -> Path:
    """Move a claim this worker holds, with no receipt yet, back to the queue, and record
    `event` (with `facts`) for its attempt; WrongState ending in `refused` otherwise."""
    check_key(key)
    with flocked(layout.lock):
        if own_lease(layout, key, token, worker) is None:
            raise WrongState(f"{key}: its lease is no longer {worker}'s (attempt {token}); {refused}")
        if layout.receipt(key).exists():
            raise WrongState(f"{key}: has a receipt already; {refused}")
        dst = _back_in_queue(layout, key, layout.job_file("running", key))
        record_attempt(layout, key, event, attempt=token, worker=worker, **facts)
        record_event(layout, event, key, worker=worker, attempt=token, **facts)
        return dst


# The attempt record of a run its host could not start (`give_back`): the host's error,
# never the job's or the generator's.
HOST_FAILED = "host_failed"
# How many times a job goes back to the queue because its host could not start it. The
# failure that reaches it ends the job FAILED instead (an aborted receipt naming the host),
# so a worker loop does not bounce it between a broken host and the queue for ever: the
# operator fixes the host and replays the job.
MAX_HOST_FAILURES = 3


def host_failures(records: list[dict[str, Any]]) -> int:
    """How many runs of the job its hosts could not start."""
    return sum(1 for r in records if r.get("event") == HOST_FAILED)


def host_failure_lines(records: list[dict[str, Any]]) -> list[str]:
    """Each run its host could not start, as a line: "attempt 1 on gpu did not start: ..."."""
    return [
        f"attempt {r.get('attempt')} on {r.get('host')} did not start: {r.get('reason')}"
        for r in records
        if r.get("event") == HOST_FAILED
    ]


def give_back(layout: Layout, key: str, token: int, worker: str, host: str, reason: str) -> Path:
    """Put back in the queue, byte for byte, a claim whose host could not start it (the
    runner never said it had started): the attempt is recorded with the host's error.
    WrongState when the lease is no longer this worker's or a receipt exists."""
    return _put_back(
        layout, key, token, worker, event=HOST_FAILED, refused="not put back", host=host, reason=reason
    )


@dataclass(frozen=True)
class Changed:
    """A job moved or asked to stop (`path`, the file that says so), and the cleanups its
    host ran for the run a dead worker left (`core.store.scheduler`): a failed one says so
    and undoes nothing."""

    path: Path
    cleanups: tuple[Cleanup, ...] = ()


def _clean_up(layout: Layout, key: str, attempt: int | None = None) -> tuple[Cleanup, ...]:
    # The config's models (pydantic) load only when a job is requeued or stopped.
    from core.store.scheduler import clean_up

    return tuple(clean_up(layout, key, attempt))


def requeue(layout: Layout, key: str, force: bool = False) -> Changed:
    """Put an orphaned job back in the queue, byte for byte; the attempt is recorded.
    Then its host's cleanup runs for what the attempt left on the host."""
    check_key(key)
    with flocked(layout.lock):
        loc = locate(layout, key)
        if loc.folder != "running":
            raise WrongState(f"{key}: is {said_state(layout, key)}; only an ORPHANED job can be requeued")
        if layout.receipt(key).exists():
            state = said_state(layout, key)
            raise WrongState(f"{key}: is {state}, with a receipt; reject or replay it instead")
        state = lease_state(layout, key)
        if state.live and not force:
            lease = read_lease(layout, key)
            holder = f" held by {lease.worker} (pid {lease.pid} on {lease.host})" if lease else ""
            raise WrongState(f"{key}: lease is live{holder}; use --force to take it back")
        dst = _back_in_queue(layout, key, loc.path)
        # The attempt that left the run: a worker may claim the job again before its cleanup runs.
        attempt = claims(attempts(layout, key))
        record_attempt(layout, key, "requeued", forced=force, lease=state)
        record_event(layout, "requeued", key, forced=force, lease=state)
    return Changed(dst, _clean_up(layout, key, attempt))


def reject(layout: Layout, key: str, reason: str, by: str = "operator") -> Path:
    """Close a job as rejected, with the reason; its receipt and outputs stay as evidence."""
    check_key(key)
    if not reason.strip():
        raise BadInput("--reason: a rejection needs a reason")
    with flocked(layout.lock):
        loc = locate(layout, key)
        if loc.folder in ("applied", "rejected"):
            raise WrongState(f"{key}: is {said_state(layout, key)} already")
        if layout.journal_file(key).exists():
            raise WrongState(f"{key}: an apply was interrupted; run `genjob recover` to finish it first")
        live = lease_state(layout, key).live
        if loc.folder == "running" and not layout.receipt(key).exists() and live:
            raise WrongState(f"{key}: is running; cancel it first")
        dst = layout.job_file("rejected", key)
        make_folder(dst.parent, layout.gen)
        record = {
            "job": loc.job.document(),
            "rejection": {"reason": reason, "by": by, "at": time.time(), "from": loc.folder},
        }
        create_exclusive(dst, canonical(record))
        loc.path.unlink()
        layout.lease(key).unlink(missing_ok=True)
        fsync_dir(loc.path.parent)
        record_event(layout, "rejected", key, reason=reason, rejected_by=by)
        return dst


def request_cancel(layout: Layout, key: str) -> Changed:
    """Ask the worker running `key` to stop; it ends the job with an aborted receipt. When
    no worker holds it any more (ORPHANED), its host's cleanup runs for what it left."""
    check_key(key)
    if not layout.job_file("running", key).exists() or layout.receipt(key).exists():
        raise WrongState(f"{key}: is {said_state(layout, key)}, not RUNNING; nothing to cancel")
    path = layout.cancel_request(key)
    atomic_write(path, canonical({"at": time.time()}))
    record_event(layout, "cancel_requested", key)
    if lease_state(layout, key).live:
        return Changed(path)
    return Changed(path, _clean_up(layout, key))


def cancel_requested(layout: Layout, key: str) -> bool:
    return layout.cancel_request(key).exists()


def cancel_requested_at(layout: Layout, key: str) -> float | None:
    """When a cancel of `key` was asked for and is still waiting for its worker; else None."""
    try:
        return os.stat(layout.cancel_request(key)).st_mtime
    except FileNotFoundError:
        return None
