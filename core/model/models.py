"""The job and receipt documents: `genjob.v1` (the seed's contract) and `genjob.v2`.

Both job schemas are frozen pydantic models that refuse unknown fields. A document's
digest is always recomputed from its fields and compared with the stored one; a loaded
document keeps the bytes it was read from.

v1 (byte-compatible with the seed):
  digest = sha256(canonical(every field but `digest`)), so it covers job_id, created_at
  and attempt; key = sha256(canonical({"instruction", "inputs"}))[:32].
v2 (the default):
  digest = sha256(canonical({"schema", "instruction", "allowed_paths" (sorted), "inputs"}
  [+ "replay_of" when the job replays another])); key = digest[:32]. The same work minted
  twice is the same document, so a duplicate submit collapses; attempts live in
  `.gen/attempts/`; an input may be ``null``: a new path that must not exist at apply.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator

from core.errors import BadInput
from core.model.canonical import canonical, loads_strict, sha256_bytes
from core.model.contract import HEX64_RE as HEX64_RE
from core.model.contract import KEY_RE as KEY_RE
from core.model.contract import MAX_INSTRUCTION_CHARS, MAX_NAME_CHARS, MAX_PATHS, V1_FIELD_ORDER
from core.model.contract import RECEIPT_STATUSES as RECEIPT_STATUSES
from core.model.contract import SCHEMAS as SCHEMAS
from core.model.contract import V1 as V1
from core.model.contract import V2 as V2
from core.model.contract import ReceiptStatus as ReceiptStatus
from core.model.paths import check_relpath

Sha256 = Annotated[str, Field(pattern=f"^{HEX64_RE.pattern}$")]
Key = Annotated[str, Field(pattern=f"^{KEY_RE.pattern}$")]

_FROZEN = ConfigDict(frozen=True, extra="forbid", strict=True, populate_by_name=True)


def _text_only(value: object) -> object:
    """What a word-valued enum field is validated from: its JSON text. Strict validation
    would take only the enum's members, lax also bytes; anything but text becomes None,
    which fails with the enum's own message ("Input should be 'ok', ...")."""
    return value if isinstance(value, str) else None


# A field holding one of a StrEnum's words: read from its text, dumped as the bare word.
TextEnum = (Field(strict=False), BeforeValidator(_text_only))


def _check_paths(paths: list[str]) -> list[str]:
    if not paths:
        raise ValueError("allowed_paths is empty")
    if len(paths) > MAX_PATHS:
        raise ValueError(f"more than {MAX_PATHS} allowed paths")
    if len(set(paths)) != len(paths):
        raise ValueError("allowed_paths lists a path twice")
    for p in paths:
        try:
            check_relpath(p)
        except ValueError as exc:
            raise ValueError(f"allowed path {p!r}: {exc}") from None
    return paths


class _Job(BaseModel):
    model_config = _FROZEN

    schema_: str = Field(alias="schema")
    idempotency_key: Key
    instruction: Annotated[str, Field(min_length=1, max_length=MAX_INSTRUCTION_CHARS)]
    allowed_paths: list[str]
    digest: Sha256

    @field_validator("allowed_paths")
    @classmethod
    def _paths(cls, v: list[str]) -> list[str]:
        return _check_paths(v)

    @property
    def key(self) -> str:
        return self.idempotency_key

    @property
    def schema_name(self) -> str:
        return self.schema_

    def digest_body(self) -> dict[str, Any]:
        raise NotImplementedError

    def derived_key(self) -> str:
        raise NotImplementedError

    def compute_digest(self) -> str:
        return sha256_bytes(canonical(self.digest_body()))

    def document(self) -> dict[str, Any]:
        """The document as a JSON object, field names as on disk."""
        return self.model_dump(by_alias=True, exclude_none=True)

    def new_paths(self) -> list[str]:
        """Allowed paths that must not exist yet (v2 inputs that are null)."""
        return [p for p in self.allowed_paths if self.input_digest(p) is None]

    def input_digest(self, rel: str) -> str | None:
        raise NotImplementedError


class JobV1(_Job):
    """The seed's `GenerationJob` plus its stored `digest`."""

    schema_: Literal["genjob.v1"] = Field(alias="schema")
    job_id: Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]
    created_at: int
    inputs: dict[str, Sha256]
    attempt: int

    def digest_body(self) -> dict[str, Any]:
        body = self.model_dump(by_alias=True)
        body.pop("digest")
        return body

    def derived_key(self) -> str:
        return sha256_bytes(canonical({"instruction": self.instruction, "inputs": self.inputs}))[:32]

    def input_digest(self, rel: str) -> str | None:
        return self.inputs[rel]


class JobV2(_Job):
    schema_: Literal["genjob.v2"] = Field(alias="schema")
    inputs: dict[str, Sha256 | None]
    created_at: int
    replay_of: Key | None = None

    def digest_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "schema": V2,
            "instruction": self.instruction,
            "allowed_paths": sorted(self.allowed_paths),
            "inputs": self.inputs,
        }
        if self.replay_of is not None:
            body["replay_of"] = self.replay_of
        return body

    def derived_key(self) -> str:
        return self.digest[:32]

    def input_digest(self, rel: str) -> str | None:
        return self.inputs[rel]


Job = JobV1 | JobV2


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "document"
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        msg = "unknown field"
    elif err["type"] == "missing":
        msg = "missing field"
    return f"{where}: {msg}"


def job_from_obj(obj: Any, source: str) -> Job:
    """Validate a parsed job document and its digest and key; raise BadInput naming `source`."""
    if not isinstance(obj, dict):
        raise BadInput(f"{source}: a job document must be a JSON object")
    schema = obj.get("schema")
    model: type[_Job]
    if schema == V1:
        model = JobV1
    elif schema == V2:
        model = JobV2
    else:
        raise BadInput(f"{source}: unknown schema {schema!r} (expected one of {', '.join(SCHEMAS)})")
    try:
        job = model.model_validate(obj)
    except ValidationError as exc:
        raise BadInput(f"{source}: {_first_error(exc)}") from None
    if set(job.inputs) != set(job.allowed_paths):
        raise BadInput(f"{source}: inputs must name exactly the allowed paths")
    if job.compute_digest() != job.digest:
        raise BadInput(f"{source}: digest {job.digest[:12]}… does not match the document")
    if job.derived_key() != job.idempotency_key:
        raise BadInput(f"{source}: idempotency_key does not match instruction and inputs")
    return job


def job_from_bytes(data: bytes, source: str) -> Job:
    return job_from_obj(loads_strict(data, source), source)


def job_bytes(job: Job) -> bytes:
    """The on-disk bytes of a freshly minted job, laid out as the seed writes them."""
    doc = job.document()
    if isinstance(job, JobV1):
        doc = {name: doc[name] for name in V1_FIELD_ORDER}
    return json.dumps(doc, indent=2).encode()


class Receipt(BaseModel):
    """Exactly the seed's six fields, so old verifiers keep working."""

    model_config = _FROZEN

    schema_: Literal["genjob.v1", "genjob.v2"] = Field(alias="schema")
    job_digest: Sha256
    idempotency_key: Key
    status: Annotated[ReceiptStatus, *TextEnum]
    outputs: dict[str, Sha256]
    worker_id: Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]

    def document(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)

    def canonical_bytes(self) -> bytes:
        """What the detached signature covers."""
        return canonical(self.document())


def receipt_from_obj(obj: Any, source: str) -> Receipt:
    if not isinstance(obj, dict):
        raise BadInput(f"{source}: a receipt must be a JSON object")
    try:
        return Receipt.model_validate(obj)
    except ValidationError as exc:
        raise BadInput(f"{source}: {_first_error(exc)}") from None


def receipt_from_bytes(data: bytes, source: str) -> Receipt:
    return receipt_from_obj(loads_strict(data, source), source)


def check_key(key: str) -> str:
    if not KEY_RE.fullmatch(key):
        raise BadInput(f"{key!r}: not a job key (32 lower-case hex characters)")
    return key
