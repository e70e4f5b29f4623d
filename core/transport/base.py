"""What every transport shares: the outcome type, the stdin payload and the job loop.

A transport starts ``core/runner.py`` somewhere (a local subprocess, an SSH session),
writes the bootstrap line, the runner's source, the header and the bundle to its stdin,
keeps stdin open until the job is done (EOF there means "cancel" to the runner), streams
its stderr to ``on_output`` and reads its stdout, the result tar, fully.
"""

from __future__ import annotations

import asyncio
import json
import shlex
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from core import runner
from core.bundle import DEFAULT_LIMITS, Limits, ResultInfo, extract_result, make_bundle, make_header

OutputCallback = Callable[[bytes], None]

STDERR_TAIL_BYTES = 64 << 10
CHUNK = 1 << 16
STOP_WAIT = runner.KILL_GRACE + 8.0


@dataclass(frozen=True)
class RunOutcome:
    """How one run ended, before the result tar is checked.

    ``result_tar`` is the runner's stdout when it produced any; ``error`` is None only
    when the runner exited 0 and the session ended normally.
    """

    result_tar: bytes | None = field(repr=False)
    stderr_tail: bytes
    exit_status: int | None
    error: str | None


class Transport(Protocol):
    """Runs the runner on some host.

    ``run`` reports a failed attempt in the outcome's ``error`` instead of raising. It
    raises only for an untrusted host key (SSH's ``HostKeyError``: that needs an
    operator, not a retry), for an exception from ``on_output``, and when its task is
    cancelled; in the last two cases the remote side is stopped first.
    """

    async def run(
        self,
        header: Mapping[str, Any],
        bundle: bytes,
        on_output: OutputCallback | None = None,
        cancel: asyncio.Event | None = None,
    ) -> RunOutcome: ...

    async def close(self) -> None: ...


class Reader(Protocol):
    async def read(self, n: int = -1) -> bytes: ...


class Writer(Protocol):
    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...


@dataclass
class Session:
    """One started runner, as the job loop sees it, whatever carries it."""

    stdin: Writer
    stdout: Reader
    stderr: Reader
    wait: Callable[[], Awaitable[int | None]]
    stop: Callable[[], Awaitable[None]]
    lost: tuple[type[BaseException], ...]
    python: str


def runner_source() -> bytes:
    return Path(runner.__file__).read_bytes()


def remote_command(python: str) -> str:
    """The fixed, short command line that starts the runner on any POSIX shell."""
    return f"{shlex.quote(python)} -c {shlex.quote(runner.BOOTSTRAP)}"


def stdin_payload(header: Mapping[str, Any], bundle: bytes) -> bytes:
    if header.get("bundle_bytes") != len(bundle):
        raise ValueError("header bundle_bytes does not match the bundle's length")
    source = runner_source()
    line = json.dumps(dict(header), sort_keys=True, separators=(",", ":")).encode("utf-8")
    return b"%d\n" % len(source) + source + line + b"\n" + bundle


def max_result_bytes(header: Mapping[str, Any]) -> int:
    """Largest stdout a well-behaved runner can produce for this header."""
    limits = header["limits"]
    per_member = 3 * 512
    return (
        limits["max_total_bytes"]
        + (limits["max_files"] + 1) * per_member
        + 4 * limits["max_tail_bytes"]
        + (8 << 20)
    )


class _Tail:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > self.limit:
            del self.data[: len(self.data) - self.limit]


class _TooLarge(Exception):
    pass


async def drive(
    session: Session,
    payload: bytes,
    header: Mapping[str, Any],
    on_output: OutputCallback | None,
    cancel: asyncio.Event | None,
    deadline: float,
) -> RunOutcome:
    """Feed the runner, stream its stderr, read its stdout, and stop it if need be.

    Stops the runner (``session.stop``) on cancel, on ``deadline`` seconds passing, on a
    lost connection, on an oversized result, and when this coroutine is itself cancelled.
    """
    tail = _Tail(STDERR_TAIL_BYTES)
    limit = max_result_bytes(header)

    async def feed() -> None:
        try:
            session.stdin.write(payload)
            await session.stdin.drain()
        except (*session.lost, OSError):
            return

    async def pump_stderr() -> None:
        while chunk := await session.stderr.read(CHUNK):
            tail.add(chunk)
            if on_output is not None:
                on_output(chunk)

    async def read_stdout() -> bytes:
        chunks: list[bytes] = []
        size = 0
        while chunk := await session.stdout.read(CHUNK):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise _TooLarge(f"runner output over {limit} bytes")
        return b"".join(chunks)

    async def whole() -> tuple[bytes, int | None]:
        feeder = asyncio.ensure_future(feed())
        try:
            out, _ = await asyncio.gather(read_stdout(), pump_stderr())
            return out, await session.wait()
        finally:
            feeder.cancel()

    job = asyncio.ensure_future(whole())
    waiters: set[asyncio.Future[Any]] = {job}
    cancel_wait = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
    if cancel_wait is not None:
        waiters.add(cancel_wait)
    try:
        await asyncio.wait(waiters, timeout=deadline, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        job.cancel()
        await session.stop()
        raise
    finally:
        if cancel_wait is not None:
            cancel_wait.cancel()

    if not job.done():
        job.cancel()
        await session.stop()
        reason = "cancelled" if cancel is not None and cancel.is_set() else "deadline exceeded"
        return RunOutcome(None, bytes(tail.data), None, reason)
    try:
        stdout, status = job.result()
    except _TooLarge as exc:
        await session.stop()
        return RunOutcome(None, bytes(tail.data), None, str(exc))
    except (*session.lost, OSError) as exc:
        await session.stop()
        return RunOutcome(None, bytes(tail.data), None, f"connection lost: {exc}")
    except BaseException:
        await session.stop()
        raise
    return _outcome(stdout, status, bytes(tail.data), session.python)


def _outcome(stdout: bytes, status: int | None, tail: bytes, python: str) -> RunOutcome:
    if status == 127 and not stdout:
        error: str | None = f"{python} not found on the generator host"
    elif status is None:
        error = "connection lost: the runner ended without an exit status"
    elif status != 0:
        error = f"runner exited with status {status}"
    elif not stdout:
        error = "runner produced no result"
    else:
        error = None
    return RunOutcome(stdout or None, tail, status, error)


async def run_job(
    transport: Transport,
    *,
    job_doc: bytes,
    instruction: str,
    allowed_paths: list[str],
    files: Mapping[str, bytes | Path],
    generator: str,
    timeout: float,
    dest_dir: Path,
    limits: Limits = DEFAULT_LIMITS,
    on_output: OutputCallback | None = None,
    cancel: asyncio.Event | None = None,
) -> tuple[RunOutcome, ResultInfo | None]:
    """Bundle, run and check one job: the whole client side in one call.

    Returns the outcome and, when the runner finished and sent a result, the locally
    checked ``ResultInfo`` (outputs written under the new ``dest_dir``). A result that
    fails the checks raises ``BundleError``; a failed attempt returns ``(outcome, None)``.
    Cancelled while the outputs are being written, it returns (raising) once they are,
    so ``dest_dir`` may then exist and is the caller's to remove.
    """
    # Building the bundle and writing the outputs take a while for big files: threads keep
    # the event loop (heartbeats, other jobs' streams) moving meanwhile.
    bundle = await asyncio.to_thread(make_bundle, job_doc, instruction, allowed_paths, files, limits=limits)
    header = make_header(generator, timeout, limits, bundle)
    outcome = await transport.run(header, bundle, on_output, cancel)
    if outcome.error is not None or outcome.result_tar is None:
        return outcome, None
    extracting = asyncio.ensure_future(
        asyncio.to_thread(extract_result, outcome.result_tar, allowed_paths, limits, dest_dir)
    )
    try:
        return outcome, await asyncio.shield(extracting)
    except asyncio.CancelledError:
        # A thread cannot be stopped: let it finish writing `dest_dir` before the caller
        # cleans up after the cancelled run.
        await asyncio.wait([extracting])
        raise
