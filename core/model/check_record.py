"""A check's record: what one run of a check found, and the bytes it found it on
(genjob.check.v1).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from core.model.canonical import canonical, sha256_bytes
from core.model.models import TextEnum

# A check's name: a TOML key of `[checks.NAME]`, and the name of its record's file.
CheckName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")]

RECORD_SCHEMA: Literal["genjob.check.v1"] = "genjob.check.v1"


Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class CheckResult(StrEnum):
    """How one run of a check ended, as its record says (a str: the record holds the word)."""

    PASSED = "passed"
    FAILED = "failed"
    TIMED_OUT = "timed out"


class CheckRecord(BaseModel):
    """What one run of a check found, and the bytes it found it on."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, populate_by_name=True)

    schema_: Literal["genjob.check.v1"] = Field(alias="schema")
    key: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
    name: CheckName
    command: str
    ran: str
    sandbox: Literal["bwrap", "none"]
    scratch: Literal["overlay", "copy"]
    outputs: dict[str, Sha256]
    base: dict[str, Sha256 | None]
    result: Annotated[CheckResult, *TextEnum]
    exit_code: int | None
    started_at: float
    duration: float
    timeout: float
    tail: str
    output_bytes: int
    head: str | None
    by: str

    @property
    def sandboxed(self) -> bool:
        return self.sandbox != "none"

    def document(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)


@dataclass(frozen=True)
class MergedOutputs:
    """The bytes a merge of a STALE receipt would write, as its checks are bound to them:
    each output path's hash after the merge, and each allowed path's hash it is laid over
    (the tree's, for a merged file; the job's input, for the rest)."""

    outputs: dict[str, str]
    base: dict[str, str | None]

    @property
    def digest(self) -> str:
        """What names them: the folder their check records are kept in."""
        return sha256_bytes(canonical({"base": self.base, "outputs": self.outputs}))

    def checked_by(self, record: CheckRecord) -> bool:
        return record.outputs == self.outputs and record.base == self.base
