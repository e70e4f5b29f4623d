"""The receipt store: `.gen/receipts/<key>.json` (+ `.sig`) and `.gen/out/<digest>/`.

The first receipt written for a job wins. A worker commits only while it still holds
the job's lease with its fencing token; a late receipt is kept aside as evidence under
`.gen/logs/<key>/`, never over the one that won.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.model.canonical import canonical, read_bytes
from core.model.models import Job, Receipt, ReceiptStatus, receipt_from_bytes
from core.store import queue
from core.store.durable import atomic_write, create_exclusive, flocked, move
from core.store.events import record_attempt, record_event
from core.store.evidence import keep, set_aside
from core.store.layout import Layout
from core.store.signing import sign_receipt
from core.store.tree import make_folder


def make_receipt(job: Job, status: ReceiptStatus, outputs: dict[str, str], worker_id: str) -> Receipt:
    return Receipt.model_validate(
        {
            "schema": job.schema_name,
            "job_digest": job.digest,
            "idempotency_key": job.key,
            "status": status,
            "outputs": outputs,
            "worker_id": worker_id,
        }
    )


def load_receipt(layout: Layout, key: str) -> Receipt | None:
    """The stored receipt, None when there is none; BadInput when it does not parse."""
    path = layout.receipt(key)
    if not path.exists():
        return None
    return receipt_from_bytes(read_bytes(path), str(path))


@dataclass(frozen=True)
class Committed:
    won: bool
    path: Path  # the receipt, or where the late one was kept aside


def commit_receipt(
    layout: Layout,
    job: Job,
    receipt: Receipt,
    token: int,
    worker: str,
    staged_out: Path | None,
    key: Ed25519PrivateKey | None,
    reason: str | None = None,
) -> Committed:
    """Publish a worker's result if it still holds the lease: outputs, signature, receipt.

    `staged_out` is a folder inside `.gen/out/` holding the validated outputs; it is
    renamed to `.gen/out/<digest>/`. Returns `won=False` (and keeps everything aside)
    when the lease was lost or another receipt came first.
    """
    body = canonical(receipt.document())
    sig, ssh_sig = sign_receipt(key, body) if key is not None else (None, None)
    with flocked(layout.lock):
        if not queue.holds_lease(layout, job.key, token, worker) or layout.receipt(job.key).exists():
            return Committed(False, _keep_late(layout, job.key, token, body, sig, staged_out))
        if staged_out is not None:
            final = layout.out_dir(job.digest)
            if os.path.lexists(final):
                set_aside(layout, job.key, final, f"out-before-{token}")
            move(staged_out, final)
        make_folder(layout.receipts, layout.gen)
        if sig is not None and ssh_sig is not None:
            atomic_write(layout.signature(job.key), sig)
            atomic_write(layout.ssh_signature(job.key), ssh_sig)
        else:
            layout.signature(job.key).unlink(missing_ok=True)
            layout.ssh_signature(job.key).unlink(missing_ok=True)
        create_exclusive(layout.receipt(job.key), body)
        layout.lease(job.key).unlink(missing_ok=True)
        layout.cancel_request(job.key).unlink(missing_ok=True)
        record_attempt(
            layout,
            job.key,
            "finished",
            attempt=token,
            worker=worker,
            status=receipt.status,
            reason=reason,
            signed=sig is not None,
        )
        record_event(layout, "received", job.key, status=receipt.status, worker=worker, reason=reason)
    return Committed(True, layout.receipt(job.key))


def _keep_late(
    layout: Layout, key: str, token: int, body: bytes, sig: bytes | None, staged: Path | None
) -> Path:
    path = keep(layout, key, f"late-receipt-attempt-{token}.json", body)
    if sig is not None:
        keep(layout, key, f"late-receipt-attempt-{token}.sig", sig)
    if staged is not None and os.path.lexists(staged):
        set_aside(layout, key, staged, f"late-out-attempt-{token}", stamped=False)
    record_attempt(layout, key, "late_receipt", attempt=token, kept=path.name)
    record_event(layout, "late_receipt", key, attempt=token)
    return path


@dataclass(frozen=True)
class ReceiptFiles:
    """Where a receipt, its signature and its outputs are: the job's own
    (`receipts/<key>.json`, `.sig`, `out/<digest>/`) or one of its candidates'."""

    receipt: Path
    signature: Path
    out: Path


def receipt_files(layout: Layout, job: Job) -> ReceiptFiles:
    return ReceiptFiles(layout.receipt(job.key), layout.signature(job.key), layout.out_dir(job.digest))
