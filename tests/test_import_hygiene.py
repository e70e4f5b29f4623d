"""The core is a library without a UI: importing any of its modules loads no Textual, Rich or
click.

One fresh interpreter imports every core module in turn and says after each one which UI
libraries are loaded; the first module after which any is loaded is the one that pulls
it in (whatever it loaded stays loaded, so what follows cannot be judged alone, and
need not be: the test fails on the first).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UI = ("textual", "rich", "click")
CORE_MODULES = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts)
    for p in (ROOT / "core").rglob("*.py")
    if p.name != "__init__.py"
)
# Imports each module named on stdin, in order, and prints one JSON line after each one:
# the module, the UI modules loaded by then, and the core modules its import loaded.
PROBE = """
import importlib, json, sys
ui = tuple(sys.argv[1:])
for module in sys.stdin.read().split():
    before = set(sys.modules)
    importlib.import_module(module)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ui)
    also = sorted(m for m in set(sys.modules) - before if m.startswith("core.") and m != module)
    print(json.dumps([module, loaded, also]), flush=True)
"""


@dataclass(frozen=True)
class Imported:
    module: str
    ui: list[str]  # every UI module loaded once `module` was
    also: list[str]  # the core modules importing `module` loaded first

    def blame(self) -> str:
        through = f" (through one of {', '.join(self.also)})" if self.also else ""
        return f"{self.module}{through} pulls in {', '.join(self.ui[:5])}"


def ui_loaded_after_each(modules: list[str]) -> list[Imported]:
    """Import `modules` in one fresh interpreter, in order; what was loaded after each."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *UI],
        cwd=ROOT,
        input="\n".join(modules),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [Imported(*json.loads(line)) for line in out.splitlines()]


def test_no_core_module_imports_a_ui_library() -> None:
    assert {"core.store.queue", "core.work.transport.ssh", "core.review.apply"} <= set(CORE_MODULES)
    seen = ui_loaded_after_each(CORE_MODULES)
    assert [i.module for i in seen] == CORE_MODULES, "every module was imported"
    pulled = [i for i in seen if i.ui]
    assert not pulled, pulled[0].blame()


def test_the_probe_names_the_module_that_pulls_one_in() -> None:
    """The check can fail: a module that imports Rich is named, and the ones before it are not."""
    seen = ui_loaded_after_each(["core.model.canonical", "rich.text", "core.store.layout"])
    assert (seen[0].module, seen[0].ui) == ("core.model.canonical", [])
    assert seen[1].module == "rich.text" and "rich.text" in seen[1].ui
    assert seen[1].blame().startswith("rich.text pulls in rich")
