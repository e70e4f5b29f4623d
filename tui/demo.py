"""`genjob demo`: a sandbox repository holding jobs in every state, made with core's own operations.

The sandbox is a git repository with a small Python project, an initialised `.gen/`, a
worker key in a demo-local config folder (`<DIR>/.demo-config`, used as
XDG_CONFIG_HOME) that is trusted, and jobs that are queued, running (a small holder
process keeps its lease fresh), orphaned, received (verified, with drifted output, with
an untrusted signature), stale, failed, applied, rejected and invalid. Outputs are made
by the demo generator's own edit (`core.remote.demo_generator.comment_block`). The project's
tests are a check policy requires; they ran, sandboxed, on two receipts: one passes,
one (whose output breaks `div`) fails.

    python -m tui.demo hold ROOT KEY WORKER TTL PARENT_PID   # the lease holder build_demo starts
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import GenjobError
from core.model.canonical import sha256_bytes
from core.model.contract import ReceiptStatus
from core.model.models import Job
from core.plan.mint import build_job
from core.remote.demo_generator import comment_block
from core.review import sandbox
from core.review.apply_job import apply_job
from core.review.checks import CheckRun, run_checks
from core.review.consent import allow_as_written
from core.store.durable import atomic_write
from core.store.events import record_attempt
from core.store.layout import Layout
from core.store.queue import cancel_requested, claim, enqueue, heartbeat, reject, requeue
from core.store.receipts import commit_receipt, make_receipt
from core.store.repo import init_repo
from core.store.signing import keygen, load_private_key, trust_repository

CONFIG_DIR = ".demo-config"
MARKER = "demo-built"
WORKER = "demo-worker@sandbox"
HOLD_SECONDS = 3600.0

PROJECT: dict[str, str] = {
    "README.md": "# calc\n\nA tiny calculator: `python -m calc '2 * (3 + 4)'`.\n",
    "pyproject.toml": '[project]\nname = "calc"\nversion = "0.1.0"\nrequires-python = ">=3.10"\n',
    "calc/__init__.py": '"""A tiny calculator."""\n\nfrom calc.ops import add, div, mul, sub\n\n'
    '__all__ = ["add", "div", "mul", "sub"]\n',
    "calc/ops.py": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
    "def mul(a, b):\n    return a * b\n\n\ndef div(a, b):\n    return a / b\n",
    "calc/parse.py": 'import re\n\nTOKEN = re.compile(r"\\s*(\\d+\\.?\\d*|[-+*/()])")\n\n\n'
    "def tokens(text):\n    pos, out = 0, []\n    while pos < len(text):\n"
    "        m = TOKEN.match(text, pos)\n        if not m:\n"
    '            raise ValueError(f"bad input at {pos}")\n'
    "        out.append(m.group(1))\n        pos = m.end()\n    return out\n",
    "calc/cli.py": "import sys\n\nfrom calc.parse import tokens\n\n\ndef main(argv=None):\n"
    "    argv = sys.argv[1:] if argv is None else argv\n    print(tokens(' '.join(argv)))\n"
    "    return 0\n",
    "tests/test_ops.py": "import unittest\n\nfrom calc.ops import add, div, mul, sub\n\n\n"
    "class OpsTest(unittest.TestCase):\n    def test_ops(self):\n"
    "        self.assertEqual(add(2, 3), 5)\n        self.assertEqual(sub(2, 3), -1)\n"
    "        self.assertEqual(mul(2, 3), 6)\n        self.assertEqual(div(7, 2), 3.5)\n",
    "tests/test_parse.py": "import unittest\n\nfrom calc.parse import tokens\n\n\n"
    "class ParseTest(unittest.TestCase):\n    def test_tokens(self):\n"
    '        self.assertEqual(tokens("2*(3+4)"), ["2", "*", "(", "3", "+", "4", ")"])\n',
}

HOSTS = """
# A second local host whose generator takes its time, to watch a live tail.
[hosts.slow-local]
transport = "local"
generator = "GENJOB_DEMO_DELAY=0.7 python3 -m core.remote.demo_generator"
timeout = 120
concurrency = 1
"""

# The project's tests, with nothing but the standard library, as a check every receipt
# must pass before it is applied.
CHECKS = """
# The project's own tests, run on each receipt's outputs in a scratch copy of the
# repository (`genjob check KEY`; the board runs them as receipts arrive).
[checks.tests]
run = "python3 -m unittest discover -s tests"
timeout = 120
sandbox = "{sandbox}"
"""

SPOOF = (
    "Rename [bold red]x[/] to y in the parser; see [link=http://evil.example]the docs[/link]\n"
    "and keep \x1b[31mthis red\x1b[0m text and \u202eright-to-left\u202c text literal."
)


@dataclass
class Demo:
    """A built sandbox; `stop()` ends the process that keeps the running job's lease fresh."""

    root: Path
    config_home: Path
    summary: list[str] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)
    holder: subprocess.Popen[bytes] | None = None

    def stop(self) -> None:
        if self.holder is not None and self.holder.poll() is None:
            self.holder.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.holder.wait(5)


@contextlib.contextmanager
def _config_home(path: Path) -> Iterator[None]:
    old = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("XDG_CONFIG_HOME", None)
        else:
            os.environ["XDG_CONFIG_HOME"] = old


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        [
            "git",
            "-c",
            "user.name=genjob demo",
            "-c",
            "user.email=demo@genjob.invalid",
            "-C",
            str(root),
            *args,
        ],
        check=True,
        capture_output=True,
    )


def _write_project(root: Path) -> None:
    for rel, text in PROJECT.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "calc: a tiny calculator")


def _exclude(root: Path, name: str) -> None:
    exclude = root / ".git" / "info" / "exclude"
    lines = exclude.read_text().splitlines() if exclude.exists() else []
    if f"/{name}/" not in lines:
        exclude.parent.mkdir(parents=True, exist_ok=True)
        exclude.write_text("\n".join([*lines, f"/{name}/"]) + "\n")


def _mint(layout: Layout, instruction: str, paths: list[str], new: list[str] | None = None) -> Job:
    job = build_job(layout, instruction, paths, new or [])
    enqueue(layout, job)
    return job


def _generated(layout: Layout, job: Job) -> dict[str, bytes]:
    """What the demo generator writes for `job`: a comment block appended to each path."""
    first = job.instruction.strip().splitlines()[0]
    out = {}
    for rel in job.allowed_paths:
        path = layout.root / rel
        old = path.read_text() if path.exists() else ""
        sep = "" if not old or old.endswith("\n") else "\n"
        out[rel] = (old + sep + comment_block(rel, first)).encode()
    return out


def _receive(
    layout: Layout,
    job: Job,
    key: Ed25519PrivateKey | None,
    *,
    status: ReceiptStatus = ReceiptStatus.OK,
    reason: str | None = None,
    outputs: dict[str, bytes] | None = None,
) -> dict[str, bytes]:
    """Claim `job`, stage the generator's outputs (or `outputs`) and commit a signed receipt
    for them."""
    c = claim(layout, WORKER, job.key, ttl=300.0)
    if outputs is None:
        outputs = _generated(layout, job) if status is ReceiptStatus.OK else {}
    staged = layout.out / f".staging-{secrets.token_hex(6)}"
    staged.mkdir()
    for rel, data in outputs.items():
        target = staged / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    log = layout.log_dir(job.key)
    log.mkdir(parents=True, exist_ok=True)
    lines = [f"edited {rel}" for rel in outputs] or ["[genjob-runner] cancelled: operator asked to stop"]
    (log / f"attempt-{c.lease.token}.log").write_text("\n".join(lines) + "\n")
    receipt = make_receipt(job, status, {rel: sha256_bytes(d) for rel, d in outputs.items()}, WORKER)
    commit_receipt(layout, job, receipt, c.lease.token, WORKER, staged, key, reason)
    return outputs


def _configure_checks(layout: Layout) -> str | None:
    """The demo's check, required by policy; sandboxed when bwrap can run here, else
    unsandboxed (the demo's own code only). Returns why it is not sandboxed, if it is not."""
    problem = sandbox.bwrap_problem()
    text = layout.config.read_text().replace('# require_checks = ["tests"]', 'require_checks = ["tests"]')
    text += CHECKS.format(sandbox="bwrap" if problem is None else "none")
    atomic_write(layout.config, text.encode())
    return problem


def _check(layout: Layout, keys: list[str]) -> dict[str, bool]:
    """Run the demo's checks on these jobs at once; whether each passed."""

    async def every() -> list[list[CheckRun]]:
        return await asyncio.gather(*(run_checks(layout, key) for key in keys))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        results = asyncio.run(every())
    else:  # built from inside an event loop (a script driving the board): a loop of its own
        with ThreadPoolExecutor(1) as pool:
            results = pool.submit(lambda: asyncio.run(every())).result()
    return {key: all(r.passed for r in runs) for key, runs in zip(keys, results, strict=True)}


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _start_holder(layout: Layout, key: str, config_home: Path, tied: bool) -> subprocess.Popen[bytes]:
    """A detached process that claims `key` with its own pid and heartbeats until stopped,
    until this process ends (when `tied`), or for an hour at most."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(config_home)}
    project = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(project), env.get("PYTHONPATH")]))
    parent = str(os.getpid() if tied else 0)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tui.demo", "hold", str(layout.root), key, WORKER, "30", parent],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 20
    while not layout.lease(key).exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise GenjobError(f"{layout.root}: the demo's lease holder did not start")
        time.sleep(0.05)
    return proc


def build_demo(directory: Path | None = None, tied: bool = True) -> Demo:
    """Build the sandbox in `directory` (default: a new temp folder) or reopen one built there.

    The running job's lease holder ends with this process when `tied`; else it runs on for
    an hour (`genjob demo --no-tui`, so that the board opened later finds a live lease).
    """
    root = Path(directory or tempfile.mkdtemp(prefix="genjob-demo-")).resolve()
    config_home = root / CONFIG_DIR
    layout = Layout(root)
    if (config_home / MARKER).exists():
        return _reopen(layout, config_home, tied)
    if root.exists() and any(root.iterdir()):
        raise GenjobError(f"{root}: not empty and not a genjob demo; give a new folder")
    # Built as the board will see it: the demo's own keys, pins and seals.
    with _config_home(config_home):
        layout, demo, signer = _set_up(root, config_home)
        _queue_jobs(layout, demo)
        _receive_jobs(layout, demo, signer)
        _check_and_apply(layout, demo, signer)
        _end_jobs(layout, demo, config_home, tied)
    (config_home / MARKER).write_text(demo.keys["running"] + "\n")
    return demo


def _set_up(root: Path, config_home: Path) -> tuple[Layout, Demo, Ed25519PrivateKey]:
    """The project, a git repository with genjob in it, its hosts and checks, and a trusted worker key."""
    root.mkdir(parents=True, exist_ok=True)
    _write_project(root)
    layout, _ = init_repo(root)
    _exclude(root, CONFIG_DIR)
    atomic_write(layout.config, layout.config.read_bytes() + HOSTS.encode())
    unsandboxed = _configure_checks(layout)
    allow_as_written(layout)  # the demo's hosts and checks are genjob's own
    trust_repository(layout, keygen())
    signer = load_private_key()
    demo = Demo(root, config_home)
    if unsandboxed:
        demo.summary.append(
            f'checks run UNSANDBOXED (sandbox = "none"): bwrap cannot run here ({unsandboxed})'
        )
    return layout, demo, signer


def _queue_jobs(layout: Layout, demo: Demo) -> None:
    """Five queued jobs, one with a hostile instruction and one that creates a file."""
    say = demo.summary.append
    for role, text, paths in (
        ("queued", "Add type hints to every function in calc/ops.py", ["calc/ops.py"]),
        ("queued2", "Raise ZeroDivisionError with a clear message", ["calc/ops.py"]),
        ("queued3", "Document the tokenizer's grammar in a docstring", ["calc/parse.py"]),
        ("spoof", SPOOF, ["calc/parse.py"]),
    ):
        demo.keys[role] = _mint(layout, text, paths).key
    say("queued: 4 jobs (one instruction holds markup and escape sequences, shown literally)")
    changelog = _mint(layout, "Add a CHANGELOG for the first release", ["README.md"], ["CHANGELOG.md"])
    demo.keys["new_file"] = changelog.key
    say("queued: 1 job that creates a new file")


def _receive_jobs(layout: Layout, demo: Demo, signer: Ed25519PrivateKey) -> None:
    """Jobs with receipts: two to check, and one each that fails verification, is stale,
    or failed on its host."""
    say = demo.summary.append
    verified = _mint(layout, "Add a module docstring to calc/__init__.py", ["calc/__init__.py"])
    demo.keys["verified"] = verified.key
    _receive(layout, verified, signer)
    broken = _mint(layout, "Return whole numbers from div", ["calc/ops.py"])
    demo.keys["checks_failed"] = broken.key
    ops = PROJECT["calc/ops.py"].replace("return a / b", "return a // b")
    _receive(layout, broken, signer, outputs={"calc/ops.py": ops.encode()})

    drifted = _mint(layout, "Support unary minus in the tokenizer", ["calc/parse.py", "tests/test_parse.py"])
    demo.keys["drifted"] = drifted.key
    _receive(layout, drifted, signer)
    out = layout.out_dir(drifted.digest) / "calc/parse.py"
    out.write_bytes(out.read_bytes() + b"import os  # not what the worker signed\n")
    say(f"received, output drifted after signing (hashes check fails): {drifted.key}")

    untrusted = _mint(layout, "Explain the calculator's usage in README.md", ["README.md"])
    demo.keys["untrusted"] = untrusted.key
    _receive(layout, untrusted, Ed25519PrivateKey.generate())
    say(f"received, signed by an untrusted key (signature check fails): {untrusted.key}")

    stale = _mint(layout, "Print the result, not the tokens, in calc/cli.py", ["calc/cli.py"])
    demo.keys["stale"] = stale.key
    _receive(layout, stale, signer)
    cli = layout.root / "calc/cli.py"
    cli.write_text(
        cli.read_text().replace("def main(argv=None):", "def main(argv: list[str] | None = None):")
    )
    _git(layout.root, "commit", "-q", "-am", "cli: type the argument")
    say(f"stale (calc/cli.py changed after mint): {stale.key}")

    failed = _mint(layout, "Rewrite the parser as a Pratt parser", ["calc/parse.py", "calc/cli.py"])
    demo.keys["failed"] = failed.key
    _receive(layout, failed, signer, status=ReceiptStatus.ABORTED, reason="cancelled by the operator")
    say(f"failed (aborted receipt): {failed.key}")


def _check_and_apply(layout: Layout, demo: Demo, signer: Ed25519PrivateKey) -> None:
    """Run the checks on the two received jobs and on a third, which is then applied."""
    say = demo.summary.append
    applied = _mint(layout, "Add a test for subtraction of negatives", [], ["tests/test_negatives.py"])
    demo.keys["applied"] = applied.key
    _receive(layout, applied, signer)
    verified, broken = demo.keys["verified"], demo.keys["checks_failed"]
    passed = _check(layout, [verified, broken, applied.key])
    verdict = {True: "pass", False: "FAIL (policy refuses to apply it)"}
    say(f"received, verified, its tests {verdict[passed[verified]]}: {verified}")
    say(f"received, verified, its tests {verdict[passed[broken]]}: {broken}")
    apply_job(layout, applied.key, protected=True)  # a test file: approved explicitly
    say(f"applied (its tests passed first; it writes a protected test file, approved): {applied.key}")


def _end_jobs(layout: Layout, demo: Demo, config_home: Path, tied: bool) -> None:
    """A rejected job, an orphaned one, an invalid job file, and a job running now."""
    say = demo.summary.append
    rejected = _mint(layout, "Delete the tests, they are slow", ["tests/test_ops.py", "tests/test_parse.py"])
    demo.keys["rejected"] = rejected.key
    reject(layout, rejected.key, "tests are never deleted to save time")
    say(f"rejected: {rejected.key}")

    orphan = _mint(
        layout, "Add a __main__ module so `python -m calc` works", ["pyproject.toml"], ["calc/__main__.py"]
    )
    demo.keys["orphan"] = orphan.key
    claim(layout, "demo-worker@crashed-host", orphan.key, ttl=3600.0, pid=_dead_pid())
    record_attempt(layout, orphan.key, "note", detail="the worker process was killed")
    say(f"orphaned (its worker's pid is dead): {orphan.key}")

    bad = demo.keys["invalid"] = "0" * 31 + "f"
    atomic_write(layout.job_file("queue", bad), b'{"schema": "genjob.v2", "instruction": ')
    say(f"invalid (a truncated job file): {bad}")

    running = _mint(layout, "Add property tests for add and mul", ["tests/test_ops.py"])
    demo.keys["running"] = running.key
    demo.holder = _start_holder(layout, running.key, config_home, tied)
    say(f"running (lease kept fresh by pid {demo.holder.pid}): {running.key}")


def _reopen(layout: Layout, config_home: Path, tied: bool) -> Demo:
    """A demo built before: restart the lease holder of its running job if it is still running."""
    demo = Demo(layout.root, config_home, ["reopened the demo built here before"])
    key = (config_home / MARKER).read_text().strip()
    if layout.job_file("running", key).exists() and not layout.receipt(key).exists():
        with contextlib.suppress(GenjobError):
            requeue(layout, key, force=True)
            demo.holder = _start_holder(layout, key, config_home, tied)
            demo.summary.append(f"running again: {key}")
    return demo


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def hold(root: Path, key: str, worker: str, ttl: float, parent: int = 0) -> int:
    """Claim `key` with this process as the lease holder; heartbeat until stopped, until
    the lease is lost, or until `parent` (when not 0) is gone. A cancel request
    (`genjob cancel`, `k` on the board) ends the job with an aborted receipt, as a real
    worker's would."""
    layout = Layout(root)
    c = claim(layout, worker, key, ttl=ttl)
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    started = time.monotonic()
    while not stop and time.monotonic() - started < HOLD_SECONDS:
        if not heartbeat(layout, key, c.lease.token, worker):
            return 0
        for _ in range(int(ttl / 3 / 0.2)):
            if stop or (parent and not _alive(parent)):
                return 0
            if cancel_requested(layout, key):
                from core.work.ship import abort_claim  # the transports: only when it is needed

                abort_claim(layout, c, "cancelled by the operator (genjob cancel)", worker)
                return 0
            time.sleep(0.2)
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "hold":
        args = sys.argv[2:]
        raise SystemExit(hold(Path(args[0]), args[1], args[2], float(args[3]), int(args[4])))
    raise SystemExit("usage: python -m tui.demo hold ROOT KEY WORKER TTL PARENT_PID")
