"""Apply benchmark: verify and write a receipt's outputs into the tree.

apply  `apply_job` of 200 small outputs and one of 32 MiB (signature, hashes, base,
       descriptor walk, staged copies hashed as copied, atomic swaps, fsyncs)
   vs  a bare loop doing the least a verified, durable apply must: hash each target
       and each output, copy the output next to its target, fsync it, rename it over
       the target, fsync the folder.

Each run gets a fresh copy of the prepared repository; the copy is not timed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import Result

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402

from core.plan.mint import build_job  # noqa: E402
from core.review.apply_job import apply_job  # noqa: E402
from core.store.layout import Layout  # noqa: E402
from core.store.pins import pin_key  # noqa: E402
from core.store.queue import Claimer, enqueue  # noqa: E402
from core.store.receipts import commit_receipt, make_receipt  # noqa: E402
from core.store.repo import init_repo  # noqa: E402
from core.store.signing import trust_repository  # noqa: E402

NAMES = ("apply",)
CACHE = Path(tempfile.gettempdir()) / "genjob-bench"
RUNS = 7


def run(quick: bool) -> list[Result]:
    # The operator's pins of the benchmark's repositories live in a folder of its own.
    os.environ["XDG_CONFIG_HOME"] = str(CACHE / "apply-xdg")
    return [bench_apply(quick)]


def _prepare(quick: bool) -> tuple[Path, str, dict[str, bytes]]:
    small = 50 if quick else 200
    big = (8 if quick else 32) << 20
    template = CACHE / f"apply-{small}-{big}"
    outputs = {f"src/mod_{i:03}.py": f"VALUE = {i + 1}\n".encode() * 64 for i in range(small)}
    outputs["data/blob.bin"] = os.urandom(big)
    if template.exists():
        shutil.rmtree(template)
    template.mkdir(parents=True)
    layout, _ = init_repo(template)
    for rel in outputs:
        (template / rel).parent.mkdir(parents=True, exist_ok=True)
        (template / rel).write_bytes(b"# before\n" * 64)
    (layout.config).write_text("[policy]\nrequire_signature = true\n")
    key_pair = Ed25519PrivateKey.generate()
    pub = key_pair.public_key()
    pub_file = CACHE / "apply-bench.pub"
    pub_file.write_bytes(pub.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))
    _, fingerprint = trust_repository(layout, pub_file)
    pin_key(CACHE / "apply-work", fingerprint)  # where each run's copy is applied
    job = build_job(layout, "Benchmark apply.", sorted(outputs))
    enqueue(layout, job)
    claim = Claimer(layout, "bench").claim(job.key)
    staged = layout.out / ".stage-bench"
    for rel, data in outputs.items():
        (staged / rel).parent.mkdir(parents=True, exist_ok=True)
        (staged / rel).write_bytes(data)
    digests = {rel: hashlib.sha256(data).hexdigest() for rel, data in outputs.items()}
    receipt = make_receipt(job, "ok", digests, "bench")
    commit_receipt(layout, job, receipt, claim.lease.token, "bench", staged, key_pair)
    return template, job.key, outputs


def _bare_apply(root: Path, out: Path, paths: list[str]) -> None:
    for rel in paths:
        target, source = root / rel, out / rel
        hashlib.sha256(target.read_bytes()).hexdigest()
        data = source.read_bytes()
        hashlib.sha256(data).hexdigest()
        tmp = target.with_name(f".{target.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
        dfd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _timed_on_copies(template: Path, work: Path, fns: list[Callable[[Path], object]]) -> list[float]:
    """The best of `RUNS` timings of each of `fns`, each on a fresh copy of `template`; the
    runs are interleaved so that a burst of load elsewhere hits both sides alike."""
    best = [float("inf")] * len(fns)
    for _ in range(RUNS):
        for i, fn in enumerate(fns):
            if work.exists():
                shutil.rmtree(work)
            shutil.copytree(template, work, symlinks=True)
            os.sync()
            start = time.perf_counter()
            fn(work)
            best[i] = min(best[i], time.perf_counter() - start)
    shutil.rmtree(work)
    return best


def bench_apply(quick: bool) -> Result:
    template, key, outputs = _prepare(quick)
    work = CACHE / "apply-work"
    digest_dir = next(p for p in (template / ".gen/out").iterdir() if not p.name.startswith("."))
    rel_out = digest_dir.relative_to(template)
    paths = sorted(outputs)
    genjob, bare = _timed_on_copies(
        template,
        work,
        [lambda root: apply_job(Layout(root), key), lambda root: _bare_apply(root, root / rel_out, paths)],
    )
    size = sum(len(d) for d in outputs.values()) >> 20
    return Result(
        "apply",
        genjob,
        "s",
        f"a bare hash+copy+fsync+rename loop ({len(paths)} files, {size} MiB)",
        bare,
        1.5,
    )
