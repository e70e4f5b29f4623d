"""Bundles shipped to a generator host, and the local validator for what comes back.

The bundle is an uncompressed, deterministic tar: ``job.json`` (the job document's
bytes), ``instruction.txt`` and ``files/<path>`` for each allowed path that exists
locally. The result tar holds ``outputs/<path>`` and ``result.json``; ``extract_result``
trusts none of it and reads it as it arrives: every member is checked before its bytes
are written, each file is created with ``O_EXCL | O_NOFOLLOW`` under a fresh folder, the
hashes are taken from the bytes written, and any refusal removes the whole folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import tarfile
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import GenjobError
from core.remote.rules import (
    DEFAULT_LIMITS,
    Limits,
    MemberCheck,
    check_allowed_paths,
    check_relpath,
    checked_members,
    loads_strict,
)
from core.remote.runner import PROTOCOL_VERSION, write_tar
from core.store.tree import DIR_MODE, FILE_MODE

MAX_RESULT_JSON_BYTES = 4 << 20
RESULT_KEYS = frozenset({"exit_code", "timed_out", "cancelled", "violations", "tail", "error", "outputs"})


class Readable(typing.Protocol):
    """A stream of bytes read as it arrives (a file, a pipe, the transport's result)."""

    def read(self, n: int = -1) -> bytes: ...


class BundleError(GenjobError):
    """A bundle or result that is refused; the message names the member and the fault."""


@dataclass(frozen=True)
class ResultInfo:
    """What a job run produced, as checked locally.

    ``outputs`` maps each path written under ``dest_dir`` to the sha256 of the bytes
    written there. ``violations`` holds the runner's findings plus any local ones (a hash
    the runner claimed that does not match, a file claimed but missing or unclaimed).
    """

    exit_code: int | None
    timed_out: bool
    cancelled: bool
    tail: str
    error: str | None
    outputs: dict[str, str]
    violations: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when the generator exited 0 in time and nothing was refused."""
        return (
            self.exit_code == 0
            and not self.timed_out
            and not self.cancelled
            and self.error is None
            and not self.violations
        )


def _read_local(path: Path) -> bytes:
    """Read a regular file without following a symlink in its last component."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise BundleError(f"{path}: not a regular file")
        return handle.read()


def make_bundle(
    job_doc: bytes,
    instruction: str,
    allowed_paths: Iterable[str],
    files: Mapping[str, bytes | Path],
    *,
    limits: Limits = DEFAULT_LIMITS,
) -> bytes:
    """Build the bundle for one job.

    ``allowed_paths`` must equal the job document's ``allowed_paths``, and ``files`` may
    only name allowed paths: a bundle never carries a file outside the job. A ``Path``
    value is read here, refusing a symlink or anything but a regular file.
    """
    allowed = list(allowed_paths)
    try:
        check_allowed_paths(allowed, limits.max_files)
        job = loads_strict(job_doc)
    except ValueError as exc:
        raise BundleError(f"job.json: {exc}") from None
    if not isinstance(job, dict) or job.get("allowed_paths") != allowed:
        raise BundleError("job.json: allowed_paths differs from the paths being shipped")
    if "instruction" in job and job["instruction"] != instruction:
        raise BundleError("instruction.txt: differs from the job document's instruction")
    # The runner unpacks as the bytes arrive: it needs the allowed paths before any file.
    members = [("job.json", job_doc), ("instruction.txt", instruction.encode("utf-8"))]
    total = 0
    for rel in sorted(files):
        if rel not in allowed:
            raise BundleError(f"files/{rel}: not an allowed path of this job")
        value = files[rel]
        try:
            content = _read_local(value) if isinstance(value, Path) else bytes(value)
        except OSError as exc:
            raise BundleError(f"files/{rel}: cannot read {value!s}: {exc.strerror}") from None
        if len(content) > limits.max_file_bytes:
            raise BundleError(f"files/{rel}: {len(content)} bytes, over max_file_bytes")
        total += len(content)
        if total > limits.max_total_bytes:
            raise BundleError(f"files/{rel}: bundle over max_total_bytes")
        members.append(("files/" + rel, content))
    for name, content in members[:2]:
        if len(content) > limits.max_file_bytes:
            raise BundleError(f"{name}: {len(content)} bytes, over max_file_bytes")
    return write_tar(members)


def make_header(
    generator: str, timeout: float, limits: Limits, bundle: bytes, pass_env: Sequence[str] = ()
) -> dict[str, Any]:
    """The runner's header line for ``bundle``; `pass_env` names what of the runner's
    environment the generator gets too."""
    return {
        "v": PROTOCOL_VERSION,
        "generator": generator,
        "timeout": float(timeout),
        "limits": limits.as_dict(),
        "pass_env": list(pass_env),
        "bundle_bytes": len(bundle),
    }


def _parse_result(raw: bytes) -> dict[str, Any]:
    try:
        result = loads_strict(raw)
    except ValueError as exc:
        raise BundleError(f"result.json: {exc}") from None
    if not isinstance(result, dict) or set(result) != RESULT_KEYS:
        raise BundleError(f"result.json: must have exactly the keys {sorted(RESULT_KEYS)}")
    checks: dict[str, Callable[[Any], bool]] = {
        "exit_code": lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)),
        "timed_out": lambda v: isinstance(v, bool),
        "cancelled": lambda v: isinstance(v, bool),
        "violations": lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
        "tail": lambda v: isinstance(v, str),
        "error": lambda v: v is None or isinstance(v, str),
        "outputs": lambda v: isinstance(v, dict) and all(isinstance(h, str) for h in v.values()),
    }
    for key, check in checks.items():
        if not check(result[key]):
            raise BundleError(f"result.json: {key} has the wrong type")
    return result


def _open_parent(root_fd: int, rel: str) -> int:
    """Open (creating as needed) the folder that will hold ``rel``, never via a symlink."""
    fd = os.dup(root_fd)
    try:
        for part in rel.split("/")[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, DIR_MODE, dir_fd=fd)
            next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_output(root_fd: int, rel: str, content: typing.BinaryIO, size: int) -> str:
    """Create ``rel`` under the folder ``root_fd`` from ``size`` bytes of ``content``, made
    durable; return the sha256 of the bytes written."""
    try:
        parent = _open_parent(root_fd, rel)
        try:
            fd = os.open(
                rel.rsplit("/", 1)[-1],
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                FILE_MODE,
                dir_fd=parent,
            )
        finally:
            os.close(parent)
    except OSError as exc:
        raise BundleError(f"outputs/{rel}: cannot be written: {exc.strerror}") from None
    digest = hashlib.sha256()
    written = 0
    with os.fdopen(fd, "wb") as handle:
        while chunk := content.read(1 << 20):
            handle.write(chunk)
            digest.update(chunk)
            written += len(chunk)
        handle.flush()
        os.fsync(handle.fileno())
    if written != size:
        raise BundleError(f"result: 'outputs/{rel}': truncated member")
    return digest.hexdigest()


def extract_result(
    source: Readable, allowed_paths: Iterable[str], limits: Limits, dest_dir: Path
) -> ResultInfo:
    """Validate a runner's result tar, read from ``source`` as it arrives, and write its
    outputs into a new ``dest_dir``.

    Each member must be a plain regular file, not seen before, within the count and size
    limits, named ``result.json`` or ``outputs/<allowed path>``; each output is written
    with ``O_EXCL | O_NOFOLLOW`` and hashed as it is written. Then ``result.json`` is
    parsed strictly and its claimed hashes compared. ``dest_dir`` must not exist; any
    refusal raises BundleError and leaves no ``dest_dir`` behind.
    """
    try:
        dest_dir.mkdir(DIR_MODE)
    except FileExistsError:
        raise BundleError(f"{dest_dir}: already exists; results go into a new folder") from None
    try:
        root_fd = os.open(dest_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            raw_result, written = _receive(source, set(allowed_paths), limits, root_fd)
        finally:
            os.close(root_fd)
        result = _parse_result(raw_result)
    except BaseException:
        shutil.rmtree(dest_dir, ignore_errors=True)
        raise
    claimed: dict[str, str] = result["outputs"]
    mismatches = [
        f"{rel}: runner claimed sha256 {claimed.get(rel)}, received {written.get(rel)}"
        for rel in sorted(set(claimed) | set(written))
        if claimed.get(rel) != written.get(rel)
    ]
    return ResultInfo(
        exit_code=result["exit_code"],
        timed_out=result["timed_out"],
        cancelled=result["cancelled"],
        tail=result["tail"],
        error=result["error"],
        outputs=written,
        violations=(*result["violations"], *mismatches),
    )


def _receive(
    source: Readable, allowed: set[str], limits: Limits, root_fd: int
) -> tuple[bytes, dict[str, str]]:
    """Read the result tar: write each output under ``root_fd``; return the raw
    ``result.json`` and the hash of each output written."""
    max_json = MAX_RESULT_JSON_BYTES + 4 * limits.max_tail_bytes
    check = MemberCheck(
        limits.max_files + 1,
        max(limits.max_file_bytes, max_json),
        limits.max_total_bytes + max_json,
    )
    raw_result: bytes | None = None
    written: dict[str, str] = {}
    total = 0
    try:
        for name, size, handle in checked_members(source, check):
            if name == "result.json":
                if size > max_json:
                    raise BundleError(f"result: result.json is {size} bytes, too large")
                raw_result = handle.read()
                continue
            rel = name[len("outputs/") :] if name.startswith("outputs/") else ""
            try:
                check_relpath(rel)
            except ValueError as exc:
                raise BundleError(f"result: {name!r}: {exc}") from None
            if rel not in allowed:
                raise BundleError(f"result: {name!r}: not an allowed path of this job")
            if size > limits.max_file_bytes:
                raise BundleError(f"result: {name!r}: {size} bytes, over max_file_bytes")
            total += size
            if total > limits.max_total_bytes:
                raise BundleError(f"result: {name!r}: outputs over max_total_bytes")
            written[rel] = _write_output(root_fd, rel, handle, size)
    except (tarfile.TarError, EOFError) as exc:
        raise BundleError(f"result: damaged tar: {exc or 'unexpected end of data'}") from None
    except ValueError as exc:
        raise BundleError(f"result: {exc}") from None
    if raw_result is None:
        raise BundleError("result: result.json is missing")
    return raw_result, written
