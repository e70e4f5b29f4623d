"""A tiny deterministic generator for demos and tests: ``python3 -m core.remote.demo_generator``.

Reads the instruction from ``$GENJOB_INSTRUCTION_FILE`` and the job from
``$GENJOB_JOB_FILE`` and, for each allowed path in the current folder, appends a comment
block quoting the instruction's first line (or creates the file with that block). Prints
one progress line per file and sleeps ``$GENJOB_DEMO_DELAY`` seconds after each; set it in
the generator command (``GENJOB_DEMO_DELAY=0.5 python3 -m core.remote.demo_generator``), since
generators run in a clean environment.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

# What every interface says of a host that runs this generator (`Host.stand_in`).
STAND_IN = "genjob's stand-in generator, which only appends a comment to each file"
SLASH_COMMENTS = {".c", ".h", ".cc", ".cpp", ".go", ".java", ".js", ".ts", ".rs", ".swift"}


def stand_in_note(names: Sequence[str]) -> str:
    """What the board says of the hosts `names` (shown as given) that run this generator."""
    runs = "runs" if len(names) == 1 else "run"
    return f"{' and '.join(names)} {runs} {STAND_IN}; `genjob help hosts` shows real ones"


def comment_block(path: str, line: str) -> str:
    prefix = "//" if Path(path).suffix in SLASH_COMMENTS else "#"
    return f"{prefix} genjob demo edit\n{prefix} instruction: {line}\n"


def main() -> int:
    instruction = Path(os.environ["GENJOB_INSTRUCTION_FILE"]).read_text(encoding="utf-8")
    job = json.loads(Path(os.environ["GENJOB_JOB_FILE"]).read_text(encoding="utf-8"))
    delay = float(os.environ.get("GENJOB_DEMO_DELAY", "0"))
    first_line = instruction.strip().splitlines()[0] if instruction.strip() else "(empty)"
    for rel in job["allowed_paths"]:
        path = Path(rel)
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="surrogateescape")
            separator = "" if not text or text.endswith("\n") else "\n"
            path.write_text(
                text + separator + comment_block(rel, first_line),
                encoding="utf-8",
                errors="surrogateescape",
            )
            print(f"edited {rel}", flush=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(comment_block(rel, first_line), encoding="utf-8")
            print(f"created {rel}", flush=True)
        time.sleep(delay)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
