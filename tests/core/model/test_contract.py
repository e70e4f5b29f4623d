"""core.model.contract: one home for the job contract's constants, readable without pydantic."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from core.model import contract, models, quick_checks

ROOT = Path(__file__).resolve().parents[3]


def test_the_models_and_the_quick_checks_use_the_same_constants() -> None:
    assert models.KEY_RE is contract.KEY_RE and quick_checks.c is contract
    assert models.HEX64_RE is contract.HEX64_RE
    assert models.SCHEMAS == (contract.V1, contract.V2)
    assert models.RECEIPT_STATUSES is contract.RECEIPT_STATUSES
    assert set(models.JobV1.model_fields) - {"schema_"} | {"schema"} == contract.V1_FIELDS
    assert {f.alias or name for name, f in models.JobV2.model_fields.items()} == contract.V2_FIELDS
    assert {f.alias or name for name, f in models.Receipt.model_fields.items()} == contract.RECEIPT_FIELDS


def test_the_v1_field_order_names_each_field_once() -> None:
    assert len(contract.V1_FIELD_ORDER) == len(contract.V1_FIELDS) == 9
    assert contract.V1_FIELD_ORDER[-1] == "digest"


@pytest.mark.parametrize(
    "module", ["core.model.contract", "core.model.quick_checks", "core.read.snapshot", "core.model.freshness"]
)
def test_the_listing_engine_loads_without_pydantic(module: str) -> None:
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.startswith('pydantic')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
