"""One job's state as `derive_state` says it, read from disk now: what a command that
refuses a job says it is. A message built from the folder alone would call a FAILED or
ORPHANED job in running/ "RUNNING"; this reads the lease, the receipt, the tree and the
candidates too, as the listing does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from core.errors import BadInput
from core.model.canonical import loads_strict, read_bytes, sha256_file
from core.model.contract import ReceiptStatus
from core.model.lifecycle import Facts, State, derive_state
from core.model.models import Job, job_from_bytes, job_from_obj
from core.model.paths import regular_file_inside
from core.store import candidate_store, receipts
from core.store.layout import JOB_FOLDERS, Layout
from core.store.lease import lease_verdict


def read_job_file(path: Path, folder: str) -> tuple[Job, dict[str, Any] | None]:
    """Load a job document, or an applied/rejected record holding one."""
    data = read_bytes(path)
    if folder in ("applied", "rejected"):
        obj = loads_strict(data, str(path))
        if not isinstance(obj, dict) or "job" not in obj:
            raise BadInput(f'{path}: a {folder} record must hold the job under "job"')
        job = job_from_obj(obj["job"], f"{path} (job)")
        record = {k: v for k, v in obj.items() if k != "job"}
    else:
        job, record = job_from_bytes(data, str(path)), None
    if job.key != path.stem:
        raise BadInput(f"{path}: file name does not match its key {job.key}")
    return job, record


def said_state(layout: Layout, key: str) -> str:
    """The state `key` is in now, for a message that refuses it."""
    return job_state(layout, key).value


def job_state(layout: Layout, key: str) -> State:
    """The state `key` is in now, by the one rule (`core.model.lifecycle.derive_state`)."""
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
    judged = receipt == ReceiptStatus.OK or (folders == {"queue"} and receipt is None)
    fresh = _base_fresh(layout, job) if judged and job is not None else None
    return derive_state(Facts(folders, lease, receipt, fresh, invalid, _candidates(layout, key)))


def _receipt_status(layout: Layout, key: str) -> str | None:
    try:
        receipt = receipts.load_receipt(layout, key)
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
