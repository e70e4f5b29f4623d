"""Run genjob's benchmarks and print each ratio against its baseline.

    uv run python tests/bench/run.py [--quick] [--json FILE] [--only NAME]...

Every `bench_*.py` module beside this file exposes ``run(quick: bool) -> list[Result]``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE))

from common import Result  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller sizes, for CI and a first look")
    ap.add_argument("--json", type=Path, help="also write the results as JSON here")
    ap.add_argument("--only", action="append", default=[], help="run only benchmarks whose name starts so")
    args = ap.parse_args(argv)
    results: list[Result] = []
    for mod_path in sorted(HERE.glob("bench_*.py")):
        module = importlib.import_module(mod_path.stem)
        names = getattr(module, "NAMES", (mod_path.stem.removeprefix("bench_"),))
        if args.only and not any(n.startswith(tuple(args.only)) for n in names):
            continue
        for res in module.run(args.quick):
            results.append(res)
            print(_row(res), flush=True)
    print()
    print(_table(results))
    if args.json:
        args.json.write_text(json.dumps({"results": [r.to_dict() for r in results]}, indent=2) + "\n")
    return 0


def _row(r: Result) -> str:
    return f"{r.name}: {r.value:.4g} {r.unit} vs {r.baseline} {r.baseline_value:.4g} {r.unit}"


def _table(results: list[Result]) -> str:
    w = max([13, *(len(r.name) for r in results)])
    head = (
        f"| {'name':{w}} | {'genjob':>12} | {'baseline':>12} | {'ratio':>7} | {'goal':>6} | met | baseline is"
    )
    lines = [head, "|" + "-" * (len(head) - 1)]
    for r in results:
        lines.append(
            f"| {r.name:{w}} | {r.value:>9.4g} {r.unit:2} | {r.baseline_value:>9.4g} {r.unit:2} | "
            f"{r.ratio:>7.3f} | {r.goal:>6.2f} | {'yes' if r.met else 'NO ':3} | {r.baseline}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
