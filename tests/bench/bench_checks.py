"""Check benchmarks: a check through genjob, and the scratch tree it runs in.

check_overhead  a check of a 1,000-file repository through genjob (`run_checks`:
                verification, the scratch tree, the sandbox, the record)
            vs  `cp -a` of the repository, then the same command run directly in the copy.
check_tree      making (and removing) the scratch tree the way genjob does on this machine
                (hard links under an overlay, when it can be mounted)
            vs  `cp -a` of the repository.
check_tree_copy the fallback (every file copied: no overlay here, or sandbox = "none")
            vs  `cp -a` of the repository.

Runs are interleaved, so that a burst of load elsewhere hits both sides alike; each side
keeps its best time.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import Result

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core.plan.mint import build_job  # noqa: E402
from core.review import sandbox  # noqa: E402
from core.review.checks import checkable, run_checks, scratch_mode  # noqa: E402
from core.review.consent import allow_as_written  # noqa: E402
from core.review.scratch import scratch_tree  # noqa: E402
from core.store.config import load_config  # noqa: E402
from core.store.layout import Layout  # noqa: E402
from core.store.queue import Claimer, enqueue  # noqa: E402
from core.store.receipts import commit_receipt, make_receipt  # noqa: E402
from core.store.repo import init_repo  # noqa: E402

NAMES = ("check_overhead", "check_tree", "check_tree_copy")
CACHE = Path(tempfile.gettempdir()) / "genjob-bench"
COMMAND = "python3 -m unittest discover -s tests -q"
TEST = (
    "import importlib\nimport unittest\n\n\n"
    "class Modules(unittest.TestCase):\n"
    "    def test_import(self):\n"
    "        for i in range({start}, {stop}):\n"
    "            mod = importlib.import_module(f'pkg.sub{{i % 10}}.mod_{{i:04}}')\n"
    "            self.assertEqual(mod.double(i), 2 * i)\n"
)
MODULE = "def double(x):\n    return 2 * x\n\n\n" + "".join(f"CONSTANT_{i} = {i}\n" for i in range(40))


def run(quick: bool) -> list[Result]:
    # The operator's pins of the benchmark's repositories live in a folder of its own.
    os.environ["XDG_CONFIG_HOME"] = str(Path(tempfile.gettempdir()) / "genjob-bench" / "checks-xdg")
    if sandbox.bwrap_problem() is not None:
        print(f"check benchmarks skipped: {sandbox.bwrap_problem()}", file=sys.stderr)
        return []
    files = 200 if quick else 1000
    runs = 3 if quick else 7
    layout, key = _prepare(files)
    return [bench_overhead(layout, key, files, runs), *bench_tree(layout, key, files, runs)]


def _prepare(files: int) -> tuple[Layout, str]:
    """A git repository of `files` files (modules and a unittest suite over them) with a
    receipt for one module, and a check that runs the suite."""
    root = CACHE / f"checks-{files}"
    if root.exists():
        shutil.rmtree(root)
    modules = files - 11
    (root / "tests").mkdir(parents=True)
    for i in range(modules):
        path = root / "pkg" / f"sub{i % 10}" / f"mod_{i:04}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(MODULE)
    for sub in range(10):
        (root / "pkg" / f"sub{sub}" / "__init__.py").write_text("")
    (root / "pkg" / "__init__.py").write_text("")
    step = max(1, modules // 10)
    for t in range(10):
        stop = modules if t == 9 else (t + 1) * step
        (root / "tests" / f"test_part{t}.py").write_text(TEST.format(start=t * step, stop=stop))
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@genjob.invalid", "-C", str(root)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "bench"], check=True)
    subprocess.run([*git, "gc", "-q"], check=True)  # packed, as a clone is: `cp -a` copies few git files
    layout, _ = init_repo(root)
    layout.config.write_text(
        f'[policy]\nrequire_signature = false\n[checks.tests]\nrun = "{COMMAND}"\ntimeout = 600\n'
    )
    allow_as_written(layout)  # the benchmark's own config
    target = "pkg/sub0/mod_0000.py"
    job = build_job(layout, "Benchmark a check.", [target])
    enqueue(layout, job)
    claim = Claimer(layout, "bench").claim(job.key)
    staged = layout.out / ".stage-bench"
    (staged / target).parent.mkdir(parents=True)
    output = (MODULE + "# changed\n").encode()
    (staged / target).write_bytes(output)
    receipt = make_receipt(job, "ok", {target: hashlib.sha256(output).hexdigest()}, "bench")
    commit_receipt(layout, job, receipt, claim.lease.token, "bench", staged, None)
    return layout, job.key


def _interleaved(runs: int, fns: list[Callable[[], object]], between: Callable[[], object]) -> list[float]:
    best = [float("inf")] * len(fns)
    for _ in range(runs):
        for i, fn in enumerate(fns):
            between()
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def _copy_and_run(layout: Layout, copy: Path) -> None:
    subprocess.run(["cp", "-a", str(layout.root), str(copy)], check=True)
    env = {"PATH": sandbox.sandbox_path(), "LANG": "C.UTF-8", "HOME": str(copy)}
    subprocess.run(["/bin/sh", "-c", COMMAND], cwd=copy, env=env, check=True, capture_output=True)


def bench_overhead(layout: Layout, key: str, files: int, runs: int) -> Result:
    copy = CACHE / "checks-copy"

    def clear() -> None:
        if copy.exists():
            shutil.rmtree(copy)
        os.sync()

    def through_genjob() -> None:
        [run] = asyncio.run(run_checks(layout, key))
        if not run.passed:
            raise RuntimeError(f"the benchmark's check failed: {run.finished.tail.decode()[-500:]}")

    genjob, baseline = _interleaved(runs, [through_genjob, lambda: _copy_and_run(layout, copy)], clear)
    clear()
    return Result(
        "check_overhead",
        genjob,
        "s",
        f"cp -a of the repository ({files} files), then `{COMMAND}` in the copy",
        baseline,
        1.2,
    )


def bench_tree(layout: Layout, key: str, files: int, runs: int) -> list[Result]:
    config = load_config(layout.config)
    job, receipt, _ = checkable(layout, key, config)
    mode = scratch_mode(layout, config.checks["tests"], "tests")
    copy = CACHE / "checks-copy"
    limit = config.limits.max_file_bytes

    def clear() -> None:
        if copy.exists():
            shutil.rmtree(copy)
        os.sync()

    def make(how: str) -> Callable[[], None]:
        def once() -> None:
            with scratch_tree(layout, job, receipt, how, limit):  # type: ignore[arg-type]
                pass

        return once

    cp = ["cp", "-a", str(layout.root), str(copy)]
    native, copied, baseline = _interleaved(
        runs, [make(mode), make("copy"), lambda: subprocess.run(cp, check=True)], clear
    )
    clear()
    what = "hard links under an overlay" if mode == "overlay" else "copies (no overlay here)"
    return [
        Result(
            "check_tree",
            native,
            "s",
            f"cp -a of the repository ({files} files); genjob: {what}",
            baseline,
            0.3,
        ),
        Result(
            "check_tree_copy",
            copied,
            "s",
            f"cp -a of the repository ({files} files); genjob: copies",
            baseline,
            1.2,
        ),
    ]
