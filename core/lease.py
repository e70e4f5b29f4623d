"""Leases: who holds a running job, with a heartbeat, a ttl and a fencing token."""

from __future__ import annotations

import os
import socket
import time
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.canonical import canonical, loads_strict, read_bytes
from core.docscan import holder_dead
from core.durable import atomic_write
from core.errors import BadInput
from core.layout import Layout
from core.lifecycle import CLAIM_GRACE as CLAIM_GRACE


class Lease(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    worker: Annotated[str, Field(min_length=1, max_length=200)]
    host: str
    pid: int
    token: Annotated[int, Field(ge=1)]
    claimed_at: float
    heartbeat: float
    ttl: Annotated[float, Field(gt=0)]

    def expired(self, now: float) -> bool:
        return now - self.heartbeat > self.ttl

    def holder_dead(self) -> bool:
        """True only when the holder ran on this host and its process is gone."""
        return holder_dead(self.host, self.pid)

    def fresh(self, now: float) -> bool:
        return not self.expired(now) and not self.holder_dead()


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
    obj = loads_strict(data, source, 64 * 1024)
    try:
        return Lease.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise BadInput(f"{source}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def read_lease(layout: Layout, key: str) -> Lease | None:
    """The job's lease, or None when there is none; BadInput when it does not parse."""
    path = layout.lease(key)
    try:
        data = read_bytes(path, 64 * 1024)
    except BadInput:
        if not path.exists():
            return None
        raise
    return lease_from_bytes(data, str(path))
