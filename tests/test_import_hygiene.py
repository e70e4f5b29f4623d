"""The core is a library without a UI: importing any of its modules loads no Textual or Rich."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE_MODULES = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts)
    for p in (ROOT / "core").rglob("*.py")
    if p.name != "__init__.py"
)


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_module_imports_no_ui(module: str) -> None:
    code = (
        f"import sys, {module}\n"
        "ui = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(ui))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "", f"{module} pulls in {out}"
