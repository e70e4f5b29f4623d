"""What every transport shares: the outcome type, the stdin payload and the job loop.

A transport starts ``core/remote/runner.py`` somewhere (a local subprocess, an SSH session),
writes the preflight, the runner's source and a fresh nonce to its stdin at once, then the
header and the bundle once they are ready, keeps stdin open until the job is done (EOF
there means "cancel" to the runner), streams its stderr to ``on_output`` and reads its
stdout fully: the runner's hello (found after whatever a login shell printed first, which
is kept, bounded), then the result tar. The runner is started before the job's files are
read and bundled, so that work overlaps with connecting and with the remote shell and
interpreter start.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import queue
import re
import secrets
import shlex
import shutil
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from core import errors
from core.errors import BadInput, GenjobError
from core.remote import preflight, rules, runner
from core.remote.rules import (
    DEFAULT_LIMITS,
    HELLO,
    MAX_HELLO_BYTES,
    Limits,
    TailBuffer,
    check_facts,
    loads_strict,
)
from core.work.bundle import BundleError, ResultInfo, extract_result, make_bundle, make_header

OutputCallback = Callable[[bytes], None]
# The runner's stdout, a chunk at a time; an awaitable it returns holds reading back until
# it is done, so a host can send no faster than what it sent is taken.
ResultCallback = Callable[[bytes], "Awaitable[None] | None"]
# What the runner said as it started: the facts its scheduler gave the run (see
# `core.remote.rules.FACTS`). An awaitable it returns is awaited before reading on.
StartCallback = Callable[[Mapping[str, str]], "Awaitable[None] | None"]
T = TypeVar("T")
# The runner's header line, as a mapping, and the bundle it announces.
Prepared = tuple[Mapping[str, Any], bytes]

STDERR_TAIL_BYTES = 64 << 10
CHUNK = 1 << 16
# The most of a result read from the host and not yet taken by the thread that writes it:
# past it, reading waits until that thread has taken it down to half.
MAX_RESULT_WAITING = 8 << 20
STOP_WAIT = runner.KILL_GRACE + 8.0
# The most a host may print on stdout before the runner's hello (a login shell's banner):
# more is refused, and never held.
MAX_PREAMBLE_BYTES = 64 << 10
# Where to look when it printed something and the runner never answered.
QUIET_SHELL = (
    "a login shell's startup files there (~/.bashrc, ~/.profile, /etc/profile.d/) must print "
    "nothing when it is not interactive, as scp and rsync need too"
)


@dataclass(frozen=True)
class RunOutcome:
    """How one run ended, before the result tar is checked.

    ``result_bytes`` counts the runner's stdout after its hello, the result tar, which
    went to the ``on_result`` given to ``run`` as it arrived; ``error`` is None only when
    the runner exited 0 and the session ended normally. ``preamble`` is what the host
    printed on stdout before the hello (a login shell's banner, at most
    MAX_PREAMBLE_BYTES), ``hello`` whether the hello came, ``marked`` whether its marker
    (`core.remote.rules.HELLO` and this run's nonce) did, even in a hello then refused: from
    then on the run started, and a failure is the run's, not the host's; ``facts`` what the
    runner said its scheduler gave the run.
    """

    result_bytes: int
    stderr_tail: bytes
    exit_status: int | None
    error: str | None
    preamble: bytes = b""
    hello: bool = False
    facts: Mapping[str, str] = field(default_factory=dict)
    marked: bool = False


class Transport(Protocol):
    """Runs the runner on some host.

    ``run`` starts the runner, then awaits ``job`` for the header and bundle to send it;
    the runner's stdout goes to ``on_result`` and its stderr to ``on_output`` as they come,
    and ``on_start`` hears the runner's facts as soon as it has started.
    It reports a failed attempt in the outcome's ``error`` instead of raising. It raises
    only for an untrusted host key (SSH's ``HostKeyError``: that needs an operator, not a
    retry), for an exception from ``job``, ``on_output`` or ``on_start``, and when its task
    is cancelled; in the last three cases the remote side is stopped first. When it returns
    or raises before awaiting ``job``, ``job`` is the caller's to cancel.
    """

    async def run(
        self,
        job: Awaitable[Prepared],
        on_result: ResultCallback,
        on_output: OutputCallback | None = None,
        cancel: asyncio.Event | None = None,
        *,
        on_start: StartCallback | None = None,
    ) -> RunOutcome: ...

    async def close(self) -> None: ...


class Reader(Protocol):
    async def read(self, n: int = -1) -> bytes: ...


class Writer(Protocol):
    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...


class HostKeyError(GenjobError):
    """The server's host key is not trusted by the known_hosts file: unknown or changed.

    The message carries the key's SHA256 fingerprint (when known) and what trusts it.
    """

    def __init__(self, message: str, fingerprint: str | None) -> None:
        super().__init__(message)
        self.fingerprint = fingerprint


# How a transport words a runner that exited with a status other than 0, given that
# status and the tail of what came on stderr; None keeps the generic wording.
ExitReason = Callable[[int | None, bytes], "str | None"]


@dataclass
class Session:
    """One started runner, as the job loop sees it, whatever carries it.

    ``exit_reason`` lets a transport whose exit status is a local client's (``ssh``,
    ``kubectl``) say what a failed exit means, from the status and the stderr tail.
    """

    stdin: Writer
    stdout: Reader
    stderr: Reader
    wait: Callable[[], Awaitable[int | None]]
    stop: Callable[[], Awaitable[None]]
    lost: tuple[type[BaseException], ...]
    python: str
    exit_reason: ExitReason | None = None

    @property
    def broken(self) -> tuple[type[BaseException], ...]:
        """What writing to or reading from a session that went away raises."""
        return (*self.lost, OSError)


# Shipped in this order: each module's `from core...` imports name the ones before it.
_SHIPPED = (errors, rules, runner)
_CORE_IMPORT = re.compile(rb"^from core\.[\w.]+ import (?:\([^)]*\)|[^\n]*)\n", re.MULTILINE)
_FUTURE = b"from __future__ import annotations\n"


@functools.cache
def runner_source() -> bytes:
    """The one blob the generator host runs: `core.errors`, `core.remote.rules` and `core.remote.runner`,
    stdlib only, with their imports of each other dropped (the source is all there)."""
    sources = (Path(m.__file__ or "").read_bytes() for m in _SHIPPED)
    return _FUTURE + b"\n".join(_CORE_IMPORT.sub(b"", src).replace(_FUTURE, b"") for src in sources)


# How every transport starts the host's interpreter: isolated (-I: no PYTHON* variables, no
# user site) and without `site` (-S). The runner needs only the standard library, so the
# host's site-packages and .pth files neither change it nor cost it (3-4 ms a job here).
RUNNER_FLAGS = ("-I", "-S")


def runner_start(python: str) -> list[str]:
    """The argv that starts the runner with `python`; it reads itself from stdin."""
    return [python, *RUNNER_FLAGS, "-c", runner.BOOTSTRAP]


def remote_command(python: str) -> str:
    """The fixed, short command line that starts the runner on any POSIX shell."""
    return shlex.join(runner_start(python))


@functools.cache
def preflight_source() -> bytes:
    """What ``runner.BOOTSTRAP`` runs first, on any Python: `core.remote.preflight`."""
    return Path(preflight.__file__).read_bytes()


def new_nonce() -> bytes:
    """A fresh nonce for one run: the runner's hello carries it back."""
    return secrets.token_hex(16).encode("ascii")


def runner_preamble(nonce: bytes) -> bytes:
    """What the runner's stdin starts with: the preflight and the runner's source, each
    after its length on a line (``runner.BOOTSTRAP`` reads the first, the preflight the
    second), then the nonce on a line."""
    first, source = preflight_source(), runner_source()
    return b"%d\n" % len(first) + first + b"%d\n" % len(source) + source + nonce + b"\n"


def header_line(header: Mapping[str, Any], bundle: bytes) -> bytes:
    """The header as the runner reads it, after the preamble and before the bundle."""
    if header.get("bundle_bytes") != len(bundle):
        raise ValueError("header bundle_bytes does not match the bundle's length")
    return json.dumps(dict(header), sort_keys=True, separators=(",", ":")).encode("utf-8") + b"\n"


def max_result_bytes(header: Mapping[str, Any]) -> int:
    """Largest stdout a well-behaved runner can produce for this header."""
    limits = header["limits"]
    per_member = 3 * 512
    return int(
        limits["max_total_bytes"]
        + (limits["max_files"] + 1) * per_member
        + 4 * limits["max_tail_bytes"]
        + (8 << 20)
    )


class _Refused(Exception):
    """What the host sent on stdout is refused: the session is stopped, the message says why."""


def _excerpt(data: bytes) -> str:
    """The start of what a host printed, for a message: its first line, cut short."""
    first = data.lstrip(b"\r\n").split(b"\n", 1)[0].rstrip(b"\r")
    text = first.decode("utf-8", errors="replace")
    return repr(text if len(text) <= 60 else text[:60] + "…")


class _Hello:
    """Finds the runner's hello (`core.remote.rules.HELLO` and this run's nonce) in its
    stdout. What came before it (a login shell's banner) is kept as the preamble, up to
    MAX_PREAMBLE_BYTES: a host that prints more is refused, never held in memory."""

    def __init__(self, nonce: bytes) -> None:
        self.marker = HELLO + nonce + b" "
        self.seen = bytearray()
        self.preamble = b""
        self.facts: dict[str, str] | None = None
        self.marked = False  # the marker came (the runner started), its line good or not

    @property
    def found(self) -> bool:
        return self.facts is not None

    def feed(self, chunk: bytes) -> bytes:
        """What of `chunk` comes after the hello: b"" until it is found. Raises _Refused."""
        self.seen += chunk
        at = self.seen.find(self.marker)
        self.marked = self.marked or at >= 0
        end = self.seen.find(b"\n", at) if at >= 0 else -1
        if at > MAX_PREAMBLE_BYTES or (at < 0 and len(self.seen) > MAX_PREAMBLE_BYTES + len(self.marker)):
            raise _Refused(
                f"the generator host printed over {MAX_PREAMBLE_BYTES} bytes on stdout before genjob's "
                f"runner started (they begin {_excerpt(bytes(self.seen))}): {QUIET_SHELL}"
            )
        if at >= 0 and end < 0 and len(self.seen) - at > MAX_HELLO_BYTES:
            raise _Refused(f"the runner's hello is over {MAX_HELLO_BYTES} bytes")
        if end < 0:
            return b""
        self.preamble = bytes(self.seen[:at])
        self.facts = _facts(bytes(self.seen[at + len(self.marker) : end]))
        rest = bytes(self.seen[end + 1 :])
        self.seen = bytearray()
        return rest

    def unanswered(self) -> str | None:
        """Why the stream ended without a hello, when the host printed something first."""
        if self.found or not self.seen:
            return None
        return (
            f"the generator host printed {len(self.seen)} bytes on stdout and genjob's runner never "
            f"answered (they begin {_excerpt(bytes(self.seen))}): {QUIET_SHELL}"
        )

    def kept(self) -> bytes:
        """What the host printed before the hello (or before it stopped), as evidence."""
        return self.preamble if self.found else bytes(self.seen[:MAX_PREAMBLE_BYTES])


def _facts(line: bytes) -> dict[str, str]:
    try:
        return check_facts(loads_strict(line))
    except ValueError as exc:
        raise _Refused(f"refused the runner's hello: {exc}") from None


async def drive(
    session: Session,
    job: Awaitable[Prepared],
    on_result: ResultCallback,
    on_output: OutputCallback | None,
    cancel: asyncio.Event | None,
    slack: float,
    on_start: StartCallback | None = None,
) -> RunOutcome:
    """Feed the runner, stream its stdout and stderr, and stop it if need be.

    The preamble goes out at once; the header and bundle when ``job`` has them. Stops the
    runner (``session.stop``) when ``job`` raises (and raises that), on cancel, once the
    header's timeout plus ``slack`` has passed, on a lost connection, on an oversized
    result or banner, and when this coroutine is itself cancelled.
    """
    nonce = new_nonce()
    with contextlib.suppress(*session.broken):
        session.stdin.write(runner_preamble(nonce))
    try:
        header, bundle = await _unless_cancelled(job, cancel)
    except BaseException:
        await session.stop()
        raise
    if header is _CANCELLED:
        await session.stop()
        return RunOutcome(0, b"", None, "cancelled")
    streams = _Streams(
        session,
        (header_line(header, bundle), bundle),
        (on_result, on_output, on_start),
        _Hello(nonce),
        max_result_bytes(header),
    )
    running = asyncio.ensure_future(streams.run())
    try:
        await _first_of(running, cancel, header["timeout"] + slack)
    except asyncio.CancelledError:
        running.cancel()
        await session.stop()
        raise
    if not running.done():
        running.cancel()
        await session.stop()
        return streams.outcome(
            None, "cancelled" if cancel is not None and cancel.is_set() else "deadline exceeded"
        )
    try:
        status = running.result()
    except _Refused as exc:
        await _stop_discarding(session)
        return streams.outcome(None, str(exc))
    except session.broken as exc:
        await session.stop()
        return streams.outcome(None, f"connection lost: {exc}")
    except BaseException:
        await session.stop()
        raise
    return streams.outcome(status, _failure(streams, status))


async def _stop_discarding(session: Session) -> None:
    """Stop a session whose output was refused, reading and dropping what it still sends:
    a far side blocked writing to a full pipe would never see the end of its input."""

    async def discard(stream: Reader) -> None:
        with contextlib.suppress(*session.broken):
            while await stream.read(CHUNK):
                pass

    draining = [asyncio.ensure_future(discard(s)) for s in (session.stdout, session.stderr)]
    try:
        await session.stop()
    finally:
        for task in draining:
            task.cancel()
        await asyncio.gather(*draining, return_exceptions=True)


class _Streams:
    """One runner's three streams: the job in on stdin, the result out of stdout after the
    runner's hello (bounded by `limit`), the generator's output out of stderr (its tail kept)."""

    def __init__(
        self,
        session: Session,
        payload: tuple[bytes, ...],
        callbacks: tuple[ResultCallback, OutputCallback | None, StartCallback | None],
        hello: _Hello,
        limit: int,
    ) -> None:
        self.session = session
        self.payload = payload
        self.on_result, self.on_output, self.on_start = callbacks
        self.hello = hello
        self.limit = limit
        self.received = 0
        self.tail = TailBuffer(STDERR_TAIL_BYTES)

    async def run(self) -> int | None:
        """Stream until both outputs end; the runner's exit status."""
        feeder = asyncio.ensure_future(self._feed())
        try:
            await asyncio.gather(self._stdout(), self._stderr())
            return await self.session.wait()
        finally:
            feeder.cancel()

    def outcome(self, status: int | None, error: str | None) -> RunOutcome:
        hello = self.hello
        kept = hello.kept()
        return RunOutcome(
            self.received, bytes(self.tail), status, error, kept, hello.found, hello.facts or {}, hello.marked
        )

    async def _feed(self) -> None:
        try:
            for part in self.payload:
                self.session.stdin.write(part)
            await self.session.stdin.drain()
        except self.session.broken:
            return

    async def _stderr(self) -> None:
        while chunk := await self.session.stderr.read(CHUNK):
            self.tail.add(chunk)
            if self.on_output is not None:
                self.on_output(chunk)

    async def _stdout(self) -> None:
        while chunk := await self.session.stdout.read(CHUNK):
            if not self.hello.found:
                chunk = self.hello.feed(chunk)
                if self.hello.found and self.on_start is not None:
                    started = self.on_start(dict(self.hello.facts or {}))
                    if started is not None:
                        await started
                if not chunk:
                    continue
            self.received += len(chunk)
            if self.received > self.limit:
                raise _Refused(f"runner output over {self.limit} bytes")
            room = self.on_result(chunk)
            if room is not None:
                await room


async def _first_of(running: asyncio.Future[Any], cancel: asyncio.Event | None, timeout: float) -> None:
    """Wait until `running` ends, `cancel` is set or `timeout` passes, whichever is first."""
    waiters: set[asyncio.Future[Any]] = {running}
    cancel_wait = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
    if cancel_wait is not None:
        waiters.add(cancel_wait)
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if cancel_wait is not None:
            cancel_wait.cancel()


# What `_unless_cancelled` gives when the cancel came first.
_CANCELLED: Any = object()


async def _unless_cancelled(job: Awaitable[Prepared], cancel: asyncio.Event | None) -> Prepared:
    """``job``'s result, or (_CANCELLED, b"") if ``cancel`` is set first."""
    ready = asyncio.ensure_future(job)
    if cancel is None:
        return await ready
    cancel_wait = asyncio.ensure_future(cancel.wait())
    try:
        await asyncio.wait({ready, cancel_wait}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        cancel_wait.cancel()
    if not ready.done():
        return _CANCELLED, b""
    return ready.result()


def _unfit(tail: bytes) -> str | None:
    """Why the host's Python cannot run the runner, as `core.remote.preflight` said it."""
    for line in tail.decode("utf-8", errors="replace").splitlines():
        if line.startswith(preflight.UNFIT):
            return line[len(preflight.UNFIT) :].strip()
    return None


def _failure(streams: _Streams, status: int | None) -> str | None:
    """Why a run whose streams ended with `status` failed; None when it did not. A host that
    printed something and never let the runner answer is said to have, with where to look."""
    session, tail, received = streams.session, bytes(streams.tail), streams.received
    on_stdout = _said_on_stdout(streams, status)
    words = streams.hello.kept() if on_stdout else tail
    explained = session.exit_reason(status, words) if session.exit_reason and status != 0 else None
    unfit = _unfit(tail) if status == preflight.UNFIT_STATUS and not received else None
    if unfit is not None:
        error: str | None = f"the generator host's {session.python} cannot run genjob's runner: {unfit}"
    elif status == 127 and not received:
        error = f"{session.python} not found on the generator host"
    elif explained is not None:
        error = explained
    elif status is None:
        error = "connection lost: the runner ended without an exit status"
    elif status != 0:
        error = f"runner exited with status {status}"
    elif not received:
        error = "runner produced no result"
    else:
        error = None
    unanswered = None if on_stdout else streams.hello.unanswered()
    return f"{error}; {unanswered}" if error is not None and unanswered is not None else error


def _said_on_stdout(streams: _Streams, status: int | None) -> bool:
    """Whether a local client that failed said why on stdout, not stderr: `docker exec`
    passes the daemon's refusal to start the command (no such file, permission denied)
    there. A client that failed, silent on stderr, having printed something and never let
    the runner answer, said it in what it printed; that is no login shell's banner."""
    return (
        streams.session.exit_reason is not None
        and status not in (0, None)
        and not bytes(streams.tail).strip()
        and not streams.hello.found
        and bool(streams.hello.kept().strip())
    )


@dataclass(frozen=True)
class JobSpec:
    """What a host is asked to do for one job.

    ``files`` gives the job's input files; it is called in a thread while the transport
    starts the runner, so reading and bundling overlap the remote side's start.
    """

    job_doc: bytes
    instruction: str
    allowed_paths: list[str]
    files: Callable[[], Mapping[str, bytes | Path]]
    generator: str
    timeout: float
    limits: Limits = DEFAULT_LIMITS
    # What of the runner's environment the generator gets too (a host's `pass_env`).
    pass_env: tuple[str, ...] = ()

    def prepare(self) -> Prepared:
        """The header and bundle; BadInput for a bundle that cannot be made."""
        try:
            bundle = make_bundle(
                self.job_doc, self.instruction, self.allowed_paths, self.files(), limits=self.limits
            )
        except BundleError as exc:
            raise BadInput(f"cannot bundle the job: {exc}") from None
        header = make_header(self.generator, self.timeout, self.limits, bundle, self.pass_env)
        return header, bundle


async def run_job(
    transport: Transport,
    spec: JobSpec,
    dest_dir: Path,
    on_output: OutputCallback | None = None,
    cancel: asyncio.Event | None = None,
    *,
    on_start: StartCallback | None = None,
) -> tuple[RunOutcome, ResultInfo | None]:
    """Bundle, run and check one job: the whole client side in one call.

    What ``spec.files`` raises is raised here once the runner is stopped, and a bundle
    it cannot make (a file over the limits) raises BadInput.

    Returns the outcome and, when the runner finished and sent a result, the locally
    checked ``ResultInfo`` (outputs written under the new ``dest_dir``). A result that
    fails the checks raises ``BundleError``; a failed attempt returns ``(outcome, None)``.
    Cancelled while the outputs are being written, it returns (raising) once they are,
    so ``dest_dir`` may then exist and is the caller's to remove.
    """
    # Threads keep the event loop (heartbeats, other jobs' streams) moving while big
    # files are read and bundled, and while the outputs are written as they arrive.
    prepared = asyncio.ensure_future(asyncio.to_thread(spec.prepare))
    pipe = _Pipe(asyncio.get_running_loop())

    def extract() -> ResultInfo:
        try:
            return extract_result(pipe, spec.allowed_paths, spec.limits, dest_dir)
        finally:
            pipe.abandon()

    # Its own thread, not the shared pool: it waits for the result through the whole
    # run, and jobs enough to fill the pool would leave none to prepare the bundles.
    extracting = _in_own_thread(extract)
    try:
        outcome = await transport.run(prepared, pipe.put, on_output, cancel, on_start=on_start)
    except BaseException:
        pipe.close()
        # A thread cannot be stopped: let it see the end of what came (and remove
        # `dest_dir`, cut short) before the caller cleans up.
        await asyncio.wait([extracting])
        extracting.exception()
        raise
    finally:
        pipe.close()
        if not prepared.done():
            prepared.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await prepared
    if outcome.error is not None:
        await asyncio.wait([extracting])
        if not extracting.exception():
            shutil.rmtree(dest_dir, ignore_errors=True)
        return outcome, None
    try:
        return outcome, await asyncio.shield(extracting)
    except asyncio.CancelledError:
        await asyncio.wait([extracting])
        raise


def _in_own_thread(fn: Callable[[], T]) -> asyncio.Future[T]:
    """`fn()` run in a new thread, as a future of this event loop."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, exc: BaseException | None) -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result = fn()
        except BaseException as exc:
            loop.call_soon_threadsafe(settle, None, exc)
        else:
            loop.call_soon_threadsafe(settle, result, None)

    threading.Thread(target=run, name="genjob-result", daemon=True).start()
    return future


class _Pipe:
    """The runner's stdout, from the event loop to the thread that extracts it: `read`
    blocks until there is data or the end. `put` never blocks; with more than
    MAX_RESULT_WAITING bytes not yet read, it returns a future that `read` settles once
    it has taken them down to half. Once the reader stops (the result was refused), what
    still arrives is dropped."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._chunks: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._head = memoryview(b"")
        self._ended = False
        self._lock = threading.Lock()  # over `waiting`, `_room` and `abandoned`
        self.waiting = 0
        self._room: asyncio.Future[None] | None = None
        self.abandoned = False

    def put(self, chunk: bytes) -> asyncio.Future[None] | None:
        with self._lock:
            if self.abandoned:
                return None
            self._chunks.put(chunk)
            self.waiting += len(chunk)
            if self.waiting <= MAX_RESULT_WAITING:
                return None
            self._room = self._loop.create_future()
            return self._room

    def close(self) -> None:
        self._chunks.put(None)

    def abandon(self) -> None:
        """The reader stops: drop what comes, and let a `put` waiting for room go on."""
        with self._lock:
            self.abandoned = True
            self._make_room()

    def _took(self, size: int) -> None:
        with self._lock:
            self.waiting -= size
            if self.waiting <= MAX_RESULT_WAITING // 2:
                self._make_room()

    def _make_room(self) -> None:
        if self._room is not None:
            room, self._room = self._room, None
            self._loop.call_soon_threadsafe(_settle, room)

    def read(self, n: int = -1) -> bytes:
        while not self._head:
            if self._ended:
                return b""
            chunk = self._chunks.get()
            if chunk is None:
                self._ended = True
                return b""
            self._took(len(chunk))
            self._head = memoryview(chunk)
        n = len(self._head) if n is None or n < 0 else n
        out, self._head = self._head[:n], self._head[n:]
        return bytes(out)


def _settle(room: asyncio.Future[None]) -> None:
    if not room.done():  # a run stopped meanwhile cancelled it
        room.set_result(None)
