"""Leases: who holds a running job, with a heartbeat, a ttl and a fencing token.

Whether a lease is live is decided by `core.model.freshness`, the one rule every reader uses.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.errors import BadInput
from core.model import freshness
from core.model.canonical import canonical, loads_strict, read_bytes
from core.model.contract import MAX_LEASE_BYTES, MAX_NAME_CHARS
from core.store.durable import atomic_write
from core.store.layout import Layout


class Lease(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    worker: Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
    host: str
    pid: int
    token: Annotated[int, Field(ge=1)]
    claimed_at: float
    heartbeat: float
    ttl: Annotated[float, Field(gt=0)]

    def verdict(self, now: float) -> freshness.Verdict:
        """The lease's state at `now`, and why."""
        return freshness.judge(self.heartbeat, self.ttl, self.host, self.pid, now)

    def expired(self, now: float) -> bool:
        """Whether its heartbeat no longer counts (too old, or suspect), whoever holds it."""
        return bool(freshness.expiry(self.heartbeat, self.ttl, now))

    def holder_dead(self) -> bool:
        """True only when the holder ran on this host and its process is gone."""
        return freshness.holder_dead(self.host, self.pid)

    def fresh(self, now: float) -> bool:
        return self.verdict(now).state is freshness.LeaseState.FRESH


def new_lease(worker: str, token: int, ttl: float, pid: int | None = None) -> Lease:
    now = time.time()
    return Lease(
        worker=worker,
        host=socket.gethostname(),
        pid=os.getpid() if pid is None else pid,
        token=token,
        claimed_at=now,
        heartbeat=now,
        ttl=ttl,
    )


def write_lease(layout: Layout, key: str, lease: Lease) -> None:
    # Not fsynced: a lease lost to a power cut leaves an orphaned job, which is requeued.
    atomic_write(layout.lease(key), canonical(lease.model_dump()), durable=False)


def lease_from_bytes(data: bytes, source: str) -> Lease:
    obj = loads_strict(data, source, MAX_LEASE_BYTES)
    try:
        return Lease.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise BadInput(f"{source}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def read_lease(layout: Layout, key: str) -> Lease | None:
    """The job's lease, or None when there is none; BadInput when it does not parse."""
    path = layout.lease(key)
    try:
        data = read_bytes(path, MAX_LEASE_BYTES)
    except BadInput:
        if not path.exists():
            return None
        raise
    return lease_from_bytes(data, str(path))


def lease_verdict(layout: Layout, key: str, now: float | None = None) -> freshness.Verdict:
    """The state of the lease of `key`, a job in running/, and why: judged by the one rule
    whether the lease parses, is unreadable or absent."""
    now = time.time() if now is None else now
    try:
        lease = read_lease(layout, key)
    except BadInput as exc:
        return freshness.unreadable(str(exc))
    if lease is not None:
        return lease.verdict(now)
    try:
        claimed: float | None = os.lstat(layout.job_file("running", key)).st_ctime
    except FileNotFoundError:
        claimed = None
    return freshness.judge_absent(claimed, now)


def own_lease(layout: Layout, key: str, token: int, worker: str) -> Lease | None:
    """The lease of running job `key` when `worker` holds it at fencing `token`, else None."""
    if not layout.job_file("running", key).exists():
        return None
    try:
        lease = read_lease(layout, key)
    except BadInput:
        return None
    if lease is None or lease.token != token or lease.worker != worker:
        return None
    return lease


def holds_lease(layout: Layout, key: str, token: int, worker: str) -> bool:
    return own_lease(layout, key, token, worker) is not None
