"""Receipt verification: an ordered list of small named checks.

Steps, in order; each is reported passed, failed or skipped (when an earlier fault
makes it meaningless), with its reason. Apply may run only when every step passed.

 1. receipt   the receipt file exists and parses as the six-field contract
 2. schema    its schema is the job's
 3. key       its idempotency key is the job's
 4. digest    its job digest is the job's digest, recomputed from the document
 5. status    its status is "ok"
 6. paths     every output is a safe path among the job's allowed paths
 7. present   every output exists under .gen/out/<digest>/ (a candidate's: under its
              own out/), through no link, and no other user could have written the
              receipt, its outputs or a folder that holds them (StrictModes)
 8. regular   every output is a regular file
 9. size      every output, and all of them together, are within the limits
10. hashes    every output's bytes hash to what the receipt says
11. signature a detached signature by a trusted key (or: not required by policy)
12. base      every allowed path in the tree is still at the job's input hash
              (or still absent, for a new path)

Beside the steps, `unchanged` flags an `ok` receipt whose outputs all equal the job's
inputs: the generator exited 0 and changed nothing (a coding agent without a model, a
key or a network often does). It verifies, since nothing it would write is wrong, but
every view says so, and `[policy] refuse_no_change` makes `ship` reject it instead.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import BadInput
from core.model.canonical import read_bytes, sha256_file
from core.model.models import Job, Receipt, ReceiptStatus, receipt_from_bytes
from core.model.paths import check_relpath, lstat_inside
from core.model.standing import FAILED, PASSED, SKIPPED
from core.store.candidate_store import Candidate
from core.store.config import Config
from core.store.layout import Layout
from core.store.ownership import repository_owners, untrusted_because
from core.store.receipts import ReceiptFiles, receipt_files


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str

    @property
    def passed(self) -> bool:
        return self.status == PASSED


@dataclass
class Verification:
    key: str
    checks: list[Check] = field(default_factory=list)
    receipt: Receipt | None = None
    signer: str | None = None
    signature_required: bool = True
    # An `ok` receipt whose every output equals the job's input: nothing changed.
    unchanged: bool = False

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAILED]

    def only_base_failed(self) -> bool:
        """Everything holds but the tree moved on: the job is STALE, not FAILED."""
        return [c.name for c in self.checks if not c.passed] == ["base"]

    def check(self, name: str) -> Check:
        """The check called `name` (every verification runs them all, in order)."""
        return next(c for c in self.checks if c.name == name)

    def add(self, name: str, ok: bool, detail: str) -> bool:
        self.checks.append(Check(name, PASSED if ok else FAILED, detail))
        return ok

    def skip(self, name: str, why: str) -> None:
        self.checks.append(Check(name, SKIPPED, why))

    def to_dict(self) -> dict[str, object]:
        return {
            "key": self.key,
            "ok": self.ok,
            "signature_required": self.signature_required,
            "signer": self.signer,
            "unchanged": self.unchanged,
            "checks": [{"name": c.name, "status": c.status, "detail": c.detail} for c in self.checks],
        }


FileHasher = Callable[[Path], str]
_STEPS = (
    "schema",
    "key",
    "digest",
    "status",
    "paths",
    "present",
    "regular",
    "size",
    "hashes",
    "signature",
    "base",
)


# What every view says of a receipt that changed nothing.
NOTHING_CHANGED = "nothing changed: the generator exited 0 and every output equals its input"


def nothing_changed(job: Job, outputs: Mapping[str, str]) -> bool:
    """Whether outputs (path -> sha256) change nothing: each equals the job's input at its
    path (a new path has none, so any output there is a change); no output at all is none."""
    return all(
        rel in job.allowed_paths and job.input_digest(rel) == digest for rel, digest in outputs.items()
    )


def base_problems(root: Path, job: Job, hasher: FileHasher = sha256_file) -> list[str]:
    """Where the tree no longer matches the job's inputs (empty when the base is fresh)."""
    problems = []
    for rel in job.allowed_paths:
        want = job.input_digest(rel)
        try:
            st = lstat_inside(root, rel)
        except BadInput as exc:
            problems.append(str(exc))
            continue
        if st is None:
            if want is not None:
                problems.append(f"{rel}: deleted since the job was minted")
        elif want is None:
            problems.append(f"{rel}: exists now, but the job creates it")
        elif not stat.S_ISREG(st.st_mode):
            problems.append(f"{rel}: is no longer a regular file")
        elif hasher(root / rel) != want:
            problems.append(f"{rel}: changed since the job was minted")
    return problems


def verify(layout: Layout, job: Job, config: Config, files: ReceiptFiles | None = None) -> Verification:
    """Run every step against the stored receipt (or the one `files` names, a candidate's);
    never raises for a bad receipt."""
    v = Verification(job.key, signature_required=config.policy.require_signature)
    files = files or receipt_files(layout, job)
    path = files.receipt
    try:
        rec = receipt_from_bytes(read_bytes(path), str(path))
    except BadInput as exc:
        v.add("receipt", False, str(exc) if path.exists() else f"{path}: no receipt yet")
        for name in _STEPS[:-1]:
            v.skip(name, "no receipt to check")
        _check_base(v, base_problems(layout.root, job))
        return v
    # The tree's inputs are hashed in a second thread while the outputs are hashed here:
    # hashlib lets go of the GIL, and for big files the two take as long as one.
    with ThreadPoolExecutor(1) as pool:
        base = pool.submit(base_problems, layout.root, job)
        _check_receipt(v, layout, files, job, rec, config=config)
        _check_base(v, base.result())
    return v


def verify_candidate(layout: Layout, job: Job, config: Config, candidate: Candidate) -> Verification:
    """Every check a receipt gets, signature included, on a best-of-N candidate's own
    receipt, signature and outputs."""
    return verify(layout, job, config, candidate.files)


def _check_receipt(
    v: Verification, layout: Layout, files: ReceiptFiles, job: Job, rec: Receipt, *, config: Config
) -> None:
    path = files.receipt
    v.receipt = rec
    v.add("receipt", True, f"{path.name} parses ({rec.status}, by {rec.worker_id})")
    v.add("schema", rec.schema_ == job.schema_name, f"receipt {rec.schema_}, job {job.schema_name}")
    v.add(
        "key",
        rec.idempotency_key == job.key,
        "matches the job"
        if rec.idempotency_key == job.key
        else f"receipt is for {rec.idempotency_key}, not {job.key}",
    )
    digest = job.compute_digest()
    v.add(
        "digest",
        rec.job_digest == digest,
        "matches the job"
        if rec.job_digest == digest
        else f"receipt names digest {rec.job_digest[:16]}…, the job is {digest[:16]}…",
    )
    v.add("status", rec.status is ReceiptStatus.OK, f"status is {rec.status.value!r}")
    v.unchanged = rec.status is ReceiptStatus.OK and nothing_changed(job, rec.outputs)
    _check_outputs(v, layout, files, job, rec, config=config)
    _check_signature(v, layout, files.signature, rec, config)


def _check_outputs(
    v: Verification, layout: Layout, files: ReceiptFiles, job: Job, rec: Receipt, *, config: Config
) -> bool:
    """Steps 6 to 10, in order; the first that fails skips the rest, with its reason."""
    stats: dict[str, os.stat_result] = {}
    out = files.out
    steps: list[tuple[str, Callable[[], tuple[bool, str]], str]] = [
        ("paths", lambda: _paths_step(job, rec), "outputs name paths outside the job"),
        ("present", lambda: _present_step(layout, files, job, rec, stats), "outputs missing"),
        ("regular", lambda: _regular_step(stats), "outputs not regular"),
        ("size", lambda: _size_step(stats, config), "outputs over the limits"),
        ("hashes", lambda: _hashes_step(out, rec, stats), ""),
    ]
    for i, (name, step, why_skip) in enumerate(steps):
        ok, detail = step()
        if not v.add(name, ok, detail):
            for later, _, _ in steps[i + 1 :]:
                v.skip(later, why_skip)
            return False
    return True


def _paths_step(job: Job, rec: Receipt) -> tuple[bool, str]:
    allowed = set(job.allowed_paths)
    bad = []
    for rel in rec.outputs:
        try:
            check_relpath(rel)
        except ValueError as exc:
            bad.append(f"{rel!r} ({exc})")
            continue
        if rel not in allowed:
            bad.append(rel)
    if bad:
        return False, f"outside the job: {', '.join(sorted(bad))}"
    return True, f"{len(rec.outputs)} output(s), all allowed"


def _present_step(
    layout: Layout, files: ReceiptFiles, job: Job, rec: Receipt, stats: dict[str, os.stat_result]
) -> tuple[bool, str]:
    out = files.out
    missing = []
    for rel in sorted(rec.outputs):
        try:
            st = lstat_inside(out, rel)
        except BadInput as exc:
            missing.append(str(exc))
            continue
        if st is None:
            missing.append(rel)
        else:
            stats[rel] = st
    if missing:
        return False, f"missing or reached through a link: {', '.join(missing)}"
    why = writable_by_others(layout, files, stats)
    if why is not None:
        return False, f"another user could have replaced them, so they are not trusted: {why}"
    where = f"out/{job.digest[:12]}…" if out.name == job.digest else f"{out.parent.name}/{out.name}"
    return True, f"all under {where}/"


def writable_by_others(layout: Layout, files: ReceiptFiles, stats: dict[str, os.stat_result]) -> str | None:
    """Why a user other than the repository's owner could have written the receipt, its
    signature, an output (`stats`: their lstat) or a folder up to `.gen/` that holds one,
    with the command that fixes it; None when none could.

    A candidate folder its group can write is one a member of the group can swap with
    another candidate's after the operator reviewed it: both are signed.
    """
    owners = repository_owners(layout.root)
    folders = sorted({rel.rpartition("/")[0] for rel in stats} - {""})
    for path in (files.receipt, files.signature, files.out, *(files.out / f for f in folders)):
        why = untrusted_because(path, layout.gen, owners)
        if why is not None:
            return why
    for rel, st in sorted(stats.items()):
        # A link is refused by the `regular` step, with its own reason.
        if (st.st_uid not in owners or st.st_mode & 0o022) and not stat.S_ISLNK(st.st_mode):
            return untrusted_because(files.out / rel, files.out, owners)
    return None


def _regular_step(stats: dict[str, os.stat_result]) -> tuple[bool, str]:
    irregular = [rel for rel, st in stats.items() if not stat.S_ISREG(st.st_mode)]
    if irregular:
        return False, f"not regular files: {', '.join(irregular)}"
    return True, "all regular files"


def _size_step(stats: dict[str, os.stat_result], config: Config) -> tuple[bool, str]:
    limits = config.limits
    big = [rel for rel, st in stats.items() if st.st_size > limits.max_file_bytes]
    total = sum(st.st_size for st in stats.values())
    if big or total > limits.max_total_bytes or len(stats) > limits.max_files:
        return False, f"over the limits: {', '.join(big) or f'{total} bytes in all'}"
    return True, f"{total} bytes in {len(stats)} file(s)"


def _hashes_step(out: Path, rec: Receipt, stats: dict[str, os.stat_result]) -> tuple[bool, str]:
    drift = [rel for rel in sorted(stats) if sha256_file(out / rel) != rec.outputs[rel]]
    if drift:
        return False, f"artifact drift at {', '.join(drift)}"
    return True, "every output at its hash"


def _check_signature(v: Verification, layout: Layout, sig_path: Path, rec: Receipt, config: Config) -> None:
    # `sig_path` is beside the receipt file, whatever key the receipt names.
    required = config.policy.require_signature
    if not sig_path.exists():
        if required:
            v.add(
                "signature", False, f"{sig_path.name}: unsigned receipt; policy requires a trusted signature"
            )
        else:
            v.add("signature", True, "unsigned; not required by policy (require_signature = false)")
        return
    # Imported here: cryptography is needed only once a signature is read, and a board
    # that lists 100,000 jobs should not carry it from the start.
    from core.store.signing import check_signature, trust_anchors

    try:
        signer = check_signature(
            read_bytes(sig_path, 16 * 1024),
            str(sig_path),
            rec.canonical_bytes(),
            trust_anchors(layout.trusted_keys, layout.root),
        )
    except BadInput as exc:
        v.add("signature", False, str(exc) + ("" if required else " (policy does not require it)"))
        return
    v.signer = signer
    v.add("signature", True, f"signed by trusted key {signer}")


def _check_base(v: Verification, problems: list[str]) -> None:
    v.add(
        "base",
        not problems,
        "; ".join(problems) if problems else "every target still at the job's input hash",
    )
