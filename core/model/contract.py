"""The job contract's constants: schema names, field sets, the key format and size limits.

Standard library only, and nothing but constants: the strict models (`core.model.models`,
`core.store.lease`) and the quick checks a listing uses (`core.model.quick_checks`) both
read them here, so the two cannot drift apart, and neither depends on the other.
"""

from __future__ import annotations

import re
from enum import StrEnum

V1 = "genjob.v1"
V2 = "genjob.v2"
SCHEMAS = (V1, V2)

# A job key: the first 32 hex digits of a sha256 (v1: of instruction and inputs; v2: the digest).
KEY_RE = re.compile(r"[0-9a-f]{32}")
# A sha256 hex digest: job digests, input and output hashes.
HEX64_RE = re.compile(r"[0-9a-f]{64}")

# The v1 document's fields in the order the seed writes them.
V1_FIELD_ORDER = (
    "schema",
    "job_id",
    "idempotency_key",
    "created_at",
    "instruction",
    "allowed_paths",
    "inputs",
    "attempt",
    "digest",
)
V1_FIELDS = frozenset(V1_FIELD_ORDER)
V2_REQUIRED = frozenset(
    ("schema", "idempotency_key", "instruction", "allowed_paths", "digest", "inputs", "created_at")
)
V2_FIELDS = V2_REQUIRED | {"replay_of"}

# A receipt has exactly the seed's six fields.
RECEIPT_FIELDS = frozenset(("schema", "job_digest", "idempotency_key", "status", "outputs", "worker_id"))


class ReceiptStatus(StrEnum):
    """How a run ended, as its receipt says: `ok` (the only one that carries outputs),
    `rejected` (the generator failed or broke the contract) or `aborted` (it was stopped).
    A str, so a receipt's JSON holds the bare word."""

    OK = "ok"
    REJECTED = "rejected"
    ABORTED = "aborted"


# The same words as plain text, for the quick checks (`core.model.quick_checks`).
RECEIPT_STATUSES = tuple(s.value for s in ReceiptStatus)

LEASE_FIELDS = frozenset(("worker", "host", "pid", "token", "claimed_at", "heartbeat", "ttl"))

MAX_INSTRUCTION_CHARS = 256 * 1024
MAX_PATHS = 1000
# A v1 job_id, a receipt's worker_id and a lease's worker.
MAX_NAME_CHARS = 200
MAX_LEASE_BYTES = 64 * 1024
# The most candidates one job may run as at once (best-of-N).
MAX_CANDIDATES = 16
