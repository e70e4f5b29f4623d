"""One job's state as `derive_state` says it, read from disk now: what a command that
refuses a job says it is. A message built from the folder alone would call a FAILED or
ORPHANED job in running/ "RUNNING"; this reads the lease, the receipt, the tree and the
candidates too, as the listing does.
"""

from __future__ import annotations

import os

from core.errors import BadInput
from core.model.canonical import sha256_file
from core.model.contract import ReceiptStatus
from core.model.lifecycle import Facts, State, derive_state
from core.model.models import Job
from core.model.paths import regular_file_inside
from core.store import candidate_store
from core.store.layout import JOB_FOLDERS, Layout
from core.store.lease import lease_verdict
from core.store.receipts import load_receipt


def job_state(layout: Layout, key: str) -> State:
    """The state `key` is in now, by the one rule (`core.model.lifecycle.derive_state`)."""
    from core.store.queue import read_job_file  # it builds its messages with this module

    folders = frozenset(f for f in JOB_FOLDERS if os.path.lexists(layout.job_file(f, key)))
    job: Job | None = None
    invalid: str | None = None
    for folder in sorted(folders):
        try:
            job, _ = read_job_file(layout.job_file(folder, key), folder)
        except (BadInput, OSError) as exc:
            invalid = str(exc)
    receipt = _receipt_status(layout, key)
    lease = lease_verdict(layout, key).state if folders == {"running"} else None
    fresh = _base_fresh(layout, job) if receipt == ReceiptStatus.OK and job is not None else None
    return derive_state(Facts(folders, lease, receipt, fresh, invalid, _candidates(layout, key)))


def _receipt_status(layout: Layout, key: str) -> str | None:
    try:
        receipt = load_receipt(layout, key)
    except (BadInput, OSError):
        return "invalid"
    return None if receipt is None else receipt.status.value


def _base_fresh(layout: Layout, job: Job) -> bool:
    """Whether every path of the job is still as it was minted."""
    for rel in job.allowed_paths:
        want = job.input_digest(rel)
        try:
            st = regular_file_inside(layout.root, rel)
            have = sha256_file(layout.root / rel) if st is not None else None
        except (BadInput, OSError):
            return False
        if have != want:
            return False
    return True


def _candidates(layout: Layout, key: str) -> str | None:
    found = candidate_store.load_all(layout, key)
    if not found:
        return None
    return "ok" if any(c.status == ReceiptStatus.OK for c in found) else "failed"
