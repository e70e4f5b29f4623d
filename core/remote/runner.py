"""Run one generator job in a private, disposable workspace.

Stdlib only: the client ships this file's source to the generator host and runs it with
``python3 -I -S -c BOOTSTRAP``; nothing is installed there. The client keeps stdin open for the
whole job, so EOF on stdin means the client is gone and the job is cancelled.

stdin:  ``<len>\\n`` + `core.remote.preflight`'s source (read by BOOTSTRAP), which checks
        this Python and reads ``<len>\\n`` + this runner's source (with the rules it
        needs); then the client's nonce on a line; one JSON header line
        ``{"v": 2, "generator": str, "timeout": float, "limits": {...}, "pass_env": [...],
        "bundle_bytes": int}``, then ``bundle_bytes`` of an uncompressed tar: ``job.json``,
        ``instruction.txt``, then ``files/<path>`` for each allowed path that exists on the
        client, in that order.
stderr: the generator's merged stdout and stderr, live, plus ``[genjob-runner]`` notes.
stdout: the hello, one line at once: ``HELLO``, the nonce, a space and a JSON object of
        what the scheduler says about the run (`scheduler_facts`); then an uncompressed
        tar: ``outputs/<path>`` for each collected file, then ``result.json`` (last, so each
        output's hash is taken as it is sent). Whatever a login shell printed before the
        hello is the client's to skip.

Written for any python3 from 3.8 on, since the generator host's interpreter is not ours.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import select
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import typing

# Shipped together with this file (core.work.transport.base.runner_source), these imports are
# dropped there: the modules' source comes first in the same blob.
from core.errors import GenjobError
from core.remote.rules import (
    FACT_VALUE,
    HELLO,
    NONCE,
    Limits,
    MemberCheck,
    TailBuffer,
    check_allowed_paths,
    check_env_patterns,
    checked_members,
    loads_strict,
    passed_env,
)

# Runs `core.remote.preflight` with any Python (2 included, for the message that it is
# too old), which reads and runs the runner.
BOOTSTRAP = (
    'import sys;b=getattr(sys.stdin,"buffer",sys.stdin);'
    'exec(compile(b.read(int(b.readline())),"genjob-runner","exec"))'
)
PROTOCOL_VERSION = 2
KILL_GRACE = 2.0
MAX_HEADER_BYTES = 1 << 20
MAX_VIOLATIONS = 100
# The outputs kept open from collection until they are sent; the rest are read at once, so
# a job of a thousand small files stays far below the host's limit on open files.
MAX_OPEN_OUTPUTS = 64
PLACEHOLDER = re.compile(r"\{(instruction_file|job_file|paths|workdir)\}")
# Linux's own pipe-max-size, what any user may ask a pipe to hold. The 64 KiB a pipe holds
# by default made sshd wait on the runner every 64 KiB of the bundle: widening stdin took
# the upload of 50 MB from about 0.29 s to 0.17 s (the `ship` benchmark).
PIPE_BYTES = 1 << 20
# fcntl names it from Python 3.10 on; the runner also runs on older interpreters.
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031 if sys.platform.startswith("linux") else None)


class _Counted:
    """A write-only stream that knows its position, so tarfile can write to a pipe."""

    def __init__(self, out: typing.BinaryIO) -> None:
        self.out = out
        self.position = 0

    def write(self, data: bytes) -> int:
        self.out.write(data)
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position


class Member:
    """A member's content as tarfile reads it: ``size`` bytes of ``source``, each fed to
    ``digest`` when there is one. A source that ends early or fails is made up with zeros,
    so the tar stays whole, and ``short`` says so."""

    def __init__(self, source: typing.BinaryIO, size: int, digest: typing.Any = None) -> None:
        self.source = source
        self.size = size
        self.left = size
        self.digest = digest
        self.short = False

    def read(self, n: int | None = -1) -> bytes:
        want = self.left if n is None or n < 0 else min(n, self.left)
        try:
            chunk = self.source.read(want) if want else b""
        except OSError:
            chunk = b""
        if len(chunk) < want:
            self.short = True
            chunk += bytes(want - len(chunk))
        self.left -= want
        if self.digest is not None:
            self.digest.update(chunk)
        return chunk


@contextlib.contextmanager
def tar_writer(out: typing.BinaryIO) -> typing.Iterator[typing.Callable[[str, bytes | Member], None]]:
    """Write an uncompressed pax tar of regular files to ``out`` as members are added, with
    fixed metadata (mode 0644, mtime 0, uid/gid 0), so equal content gives equal bytes.

    Yields ``add(name, content)``: the content's bytes, or a ``Member`` read (and hashed)
    a megabyte at a time as it is written.
    """
    with tarfile.open(  # type: ignore[call-overload]  # copybufsize: a real, untyped parameter
        fileobj=_Counted(out), mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8", copybufsize=1 << 20
    ) as tf:

        def add(name: str, content: bytes | Member) -> None:
            info = tarfile.TarInfo(name)
            info.size = content.size if isinstance(content, Member) else len(content)
            info.mode = 0o644
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tf.addfile(info, content if isinstance(content, Member) else io.BytesIO(content))

        yield add


def write_tar(members: list[tuple[str, bytes]]) -> bytes:
    """The bytes of a tar of ``members``, in the given order."""
    buf = io.BytesIO()
    with tar_writer(buf) as add:
        for name, content in members:
            add(name, content)
    return buf.getvalue()


class ProtocolError(GenjobError):
    """The client sent something the runner refuses to work with."""


class Cancelled(GenjobError):
    """The client went away or the runner was told to stop."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISREG, "file"),
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return "special file"


class Watch:
    """Notices cancellation: EOF on stdin, or SIGTERM, SIGHUP or SIGINT.

    Signal handlers only record the signal; ``set_wakeup_fd`` wakes the select loop, and
    a no-op SIGCHLD handler makes a generator's exit wake it too.
    """

    def __init__(self) -> None:
        self.reason: str | None = None
        self.stdin_open = True
        self._wake_r, wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.reason is None:
            self.reason = f"received {signal.Signals(signum).name}"

    def fds(self) -> list[int]:
        return [self._wake_r, 0] if self.stdin_open else [self._wake_r]

    def handle(self, fd: int) -> None:
        if fd == self._wake_r:
            try:
                while os.read(self._wake_r, 256):
                    pass
            except BlockingIOError:
                pass
        elif fd == 0:
            try:
                data = os.read(0, 65536)
            except OSError:
                data = b""
            if not data:
                self.stdin_open = False
                if self.reason is None:
                    self.reason = "client closed the connection"


class Tail(TailBuffer):
    """Forwards generator output to stderr and keeps its last ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self._forward = True

    def add(self, chunk: bytes) -> None:
        super().add(chunk)
        self.note(chunk)

    def note(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        while self._forward and view:
            try:
                view = view[os.write(2, view) :]
            except OSError:
                self._forward = False


def _leader_exited(proc: subprocess.Popen[bytes]) -> bool:
    """True once the generator's shell has exited, without reaping it where possible.

    Leaving it a zombie keeps its process group id from being reused until the group
    has been killed.
    """
    if hasattr(os, "waitid"):
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    return proc.poll() is not None


def _killpg(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class Generator:
    """The generator's process group, its output pipe and the select loop around them."""

    def __init__(self, proc: subprocess.Popen[bytes], watch: Watch, tail: Tail) -> None:
        self.proc = proc
        self.watch = watch
        self.tail = tail
        self.out = proc.stdout.fileno()  # type: ignore[union-attr]
        os.set_blocking(self.out, False)
        self.out_open = True

    def _read_out(self) -> None:
        try:
            chunk = os.read(self.out, 65536)
        except BlockingIOError:
            return
        if chunk:
            self.tail.add(chunk)
        else:
            self.out_open = False

    def pump(self, until: float, stop_on_cancel: bool) -> str:
        """Move output until the shell exits ("exited"), cancel, or ``until`` passes."""
        while True:
            if stop_on_cancel and self.watch.reason is not None:
                return "cancelled"
            if _leader_exited(self.proc):
                return "exited"
            left = until - time.monotonic()
            if left <= 0:
                return "deadline"
            fds = self.watch.fds() + ([self.out] if self.out_open else [])
            ready = select.select(fds, [], [], min(left, 1.0))[0]
            for fd in ready:
                if fd == self.out:
                    self._read_out()
                else:
                    self.watch.handle(fd)

    def drain(self, until: float) -> None:
        """Read what is left in the pipe; a setsid'd escapee may hold it open, so bound it."""
        while self.out_open:
            left = until - time.monotonic()
            if left <= 0:
                return
            if select.select([self.out], [], [], left)[0]:
                self._read_out()

    def finish(self, timeout: float) -> tuple[int | None, bool, bool]:
        """Wait for the generator, stopping it on timeout or cancel.

        Returns ``(exit_code, timed_out, cancelled)``; exit_code is None when the shell
        was killed by a signal. Whatever is left of the process group is killed in the end.
        """
        why = self.pump(time.monotonic() + timeout, stop_on_cancel=True)
        if why != "exited":
            self.tail.note(f"\n[genjob-runner] {self._why(why, timeout)}; stopping\n".encode())
            _killpg(self.proc, signal.SIGTERM)
            self.pump(time.monotonic() + KILL_GRACE, stop_on_cancel=False)
        _killpg(self.proc, signal.SIGKILL)
        self.drain(time.monotonic() + 1.0)
        code = self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return (code if code >= 0 else None), why == "deadline", why == "cancelled"

    def _why(self, why: str, timeout: float) -> str:
        if why == "deadline":
            return f"timed out after {timeout:g}s"
        return f"cancelled: {self.watch.reason}"


def read_header(stream: typing.BinaryIO) -> dict[str, typing.Any]:
    line = stream.readline(MAX_HEADER_BYTES)
    if not line:
        raise Cancelled("input closed before the header")
    if not line.endswith(b"\n"):
        raise ProtocolError("header line missing or too long")
    try:
        header = loads_strict(line)
    except ValueError as exc:
        raise ProtocolError(f"header: {exc}") from None
    if not isinstance(header, dict):
        raise ProtocolError("header: not a JSON object")
    if header.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(f"header: protocol version {header.get('v')!r} is not supported")
    if not isinstance(header.get("generator"), str) or not header["generator"].strip():
        raise ProtocolError("header: generator must be a non-empty string")
    timeout = header.get("timeout")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ProtocolError("header: timeout must be a positive number")
    try:
        header["limits"] = Limits.from_dict(header.get("limits"))
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"header: {exc}") from None
    try:
        header["pass_env"] = check_env_patterns(header.get("pass_env"))
    except ValueError as exc:
        raise ProtocolError(f"header: {exc}") from None
    size = header.get("bundle_bytes")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ProtocolError("header: bundle_bytes must be a non-negative integer")
    return header


class _Exactly:
    """The next ``size`` bytes of a stream, then EOF; Cancelled if the stream ends first."""

    def __init__(self, stream: typing.BinaryIO, size: int) -> None:
        self.stream = stream
        self.left = size

    def read(self, n: int = -1) -> bytes:
        want = self.left if n is None or n < 0 else min(n, self.left)
        data = self.stream.read(want) if want else b""
        if len(data) < want:
            raise Cancelled("input closed before the bundle was complete")
        self.left -= len(data)
        return data

    def finish(self) -> None:
        """Read what is left (the archive's end padding), so the stream stays in step."""
        while self.read(1 << 16):
            pass


def receive_bundle(stream: typing.BinaryIO, size: int, limits: Limits, work: str, meta: str) -> list[str]:
    """Unpack the bundle as it arrives: ``job.json`` and ``instruction.txt`` into ``meta``,
    then each ``files/<allowed path>`` straight into ``work``; return the allowed paths.

    Writing while the client is still sending means the job's files are in place almost as
    soon as the last byte is in. Raises ProtocolError for a bundle that breaks the rules,
    Cancelled when stdin ends before ``size`` bytes.
    """
    source = _Exactly(stream, size)
    check = MemberCheck(limits.max_files + 2, limits.max_file_bytes, limits.max_total_bytes)
    allowed: list[str] | None = None
    instruction = False
    try:
        for name, size, handle in checked_members(source, check):
            if allowed is None:
                if name != "job.json":
                    raise ValueError("job.json is missing (it comes first)")
                job_bytes = handle.read()
                allowed = _allowed_of(job_bytes, limits.max_files)
                write_new_file(meta, "job.json", io.BytesIO(job_bytes), size)
            elif not instruction:
                if name != "instruction.txt":
                    raise ValueError("instruction.txt is missing (it comes second)")
                write_new_file(meta, "instruction.txt", handle, size)
                instruction = True
            else:
                rel = name[len("files/") :] if name.startswith("files/") else None
                if rel is None or rel not in allowed:
                    raise ValueError(f"{name!r}: not files/<an allowed path>")
                write_new_file(work, rel, handle, size)
    except tarfile.TarError as exc:
        raise ProtocolError(f"bundle: damaged tar: {exc}") from None
    except EOFError:
        raise ProtocolError("bundle: damaged tar: unexpected end of data") from None
    except ValueError as exc:
        raise ProtocolError(f"bundle: {exc}") from None
    if allowed is None:
        raise ProtocolError("bundle: job.json is missing")
    if not instruction:
        raise ProtocolError("bundle: instruction.txt is missing")
    source.finish()
    return allowed


def _allowed_of(job_bytes: bytes, max_files: int) -> list[str]:
    try:
        job = loads_strict(job_bytes)
        if not isinstance(job, dict):
            raise ValueError("not a JSON object")
        return check_allowed_paths(job.get("allowed_paths"), max_files)
    except ValueError as exc:
        raise ValueError(f"job.json: {exc}") from None


def write_new_file(root: str, rel: str, content: typing.BinaryIO, size: int) -> None:
    """Create ``root/rel`` and its parent folders from the ``size`` bytes ``content`` holds;
    never follow or replace anything."""
    parent = os.path.dirname(rel)
    try:
        if parent:
            os.makedirs(os.path.join(root, parent), mode=0o755, exist_ok=True)
        fd = os.open(os.path.join(root, rel), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise ValueError(f"cannot create {rel!r}: {exc.strerror}") from None
    written = 0
    with os.fdopen(fd, "wb") as handle:
        while chunk := content.read(1 << 20):
            handle.write(chunk)
            written += len(chunk)
    if written != size:
        raise ValueError(f"{rel!r}: truncated member")


def render_command(template: str, values: dict[str, str]) -> str:
    """Fill the placeholders in one pass, so a value can never introduce another one."""
    return PLACEHOLDER.sub(lambda match: values[match.group(1)], template)


def quoted_paths(paths: list[str]) -> str:
    """Quote each path; one that starts with "-" gets "./" so it can't read as an option."""
    return " ".join(shlex.quote("./" + p if p.startswith("-") else p) for p in paths)


class Output(typing.NamedTuple):
    """A collected output: the open file and its size when it was collected."""

    handle: typing.BinaryIO
    size: int


def _open_allowed(work: str, rel: str, max_bytes: int) -> Output | None:
    """Open the regular file at ``rel``, None if absent; raise ValueError."""
    parts = rel.split("/")
    dirfd = os.open(work, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                next_fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dirfd)
            except FileNotFoundError:
                return None
            except OSError:
                parent = "/".join(parts[: i + 1])
                raise ValueError(f"{rel}: parent {parent} is not a directory") from None
            os.close(dirfd)
            dirfd = next_fd
        try:
            info = os.stat(parts[-1], dir_fd=dirfd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{rel}: {_kind(info.st_mode)} at an allowed path")
        if info.st_size > max_bytes:
            raise ValueError(f"{rel}: {info.st_size} bytes, over max_file_bytes ({max_bytes})")
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dirfd)
        handle = os.fdopen(fd, "rb")
        try:
            opened = os.fstat(handle.fileno())
            if not stat.S_ISREG(opened.st_mode):
                raise ValueError(f"{rel}: replaced while being read")
            if opened.st_size > max_bytes:
                raise ValueError(f"{rel}: over max_file_bytes ({max_bytes})")
        except BaseException:
            handle.close()
            raise
        return Output(handle, opened.st_size)
    finally:
        os.close(dirfd)


def _stray_entries(work: str, allowed: list[str]) -> list[str]:
    """Name everything in the workspace that is neither an allowed path nor a folder of one."""
    allowed_set = set(allowed)
    folders = {"/".join(p.split("/")[:i]) for p in allowed for i in range(1, p.count("/") + 1)}
    found: list[str] = []

    def visit(rel_dir: str) -> None:
        path = os.path.join(work, rel_dir) if rel_dir else work
        try:
            entries = sorted(os.scandir(path), key=lambda e: e.name)
        except OSError as exc:
            found.append(f"{rel_dir or '.'}: cannot be read ({exc.strerror})")
            return
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if rel in allowed_set:
                continue
            kind = _kind(entry.stat(follow_symlinks=False).st_mode)
            if rel in folders:
                if kind == "directory":
                    visit(rel)
                else:
                    found.append(f"{rel}: {kind} where a folder of allowed paths belongs")
            else:
                found.append(f"{rel}: {kind} created outside the allowed paths")

    visit("")
    return found


def collect(work: str, allowed: list[str], limits: Limits) -> tuple[dict[str, Output], list[str]]:
    """Open the allowed regular files and name every violation in the workspace.

    The files are read as they are sent (`write_result`), not here: the result starts
    going out at once, and reading overlaps sending (25 ms of 50 MB in the `ship` benchmark).
    """
    try:
        root_mode = os.lstat(work).st_mode
    except OSError:
        root_mode = 0
    if not stat.S_ISDIR(root_mode):
        return {}, ["workspace folder was removed or replaced"]
    outputs: dict[str, Output] = {}
    violations: list[str] = []
    total = 0
    for rel in sorted(allowed):
        try:
            output = _open_allowed(work, rel, limits.max_file_bytes)
        except ValueError as exc:
            violations.append(str(exc))
            continue
        if output is None:
            continue
        total += output.size
        if total > limits.max_total_bytes:
            output.handle.close()
            violations.append(f"{rel}: outputs over max_total_bytes ({limits.max_total_bytes})")
            continue
        if len(outputs) >= MAX_OPEN_OUTPUTS:
            with output.handle as handle:
                output = Output(io.BytesIO(handle.read(output.size)), output.size)
        outputs[rel] = output
    violations.extend(_stray_entries(work, allowed))
    if len(violations) > MAX_VIOLATIONS:
        extra = len(violations) - MAX_VIOLATIONS
        violations = [*violations[:MAX_VIOLATIONS], f"... and {extra} more"]
    return outputs, violations


def remove_tree(path: str) -> None:
    """Remove a workspace even if the generator took the permissions off its folders."""
    for root, dirs, _files in os.walk(path):
        for name in dirs:
            full = os.path.join(root, name)
            if not os.path.islink(full):
                with contextlib.suppress(OSError):
                    os.chmod(full, 0o700)
    shutil.rmtree(path, ignore_errors=True)


def generator_env(
    home: str, work: str, instruction_file: str, job_file: str, pass_env: typing.Sequence[str] = ()
) -> dict[str, str]:
    """The generator's whole environment: nothing of the runner's beyond PATH/PYTHONPATH
    and the variables the host's `pass_env` names (never over one set here).

    PYTHONSAFEPATH keeps a Python generator from importing the job's files in place of
    its own modules: `python3 -m ruff` in a workspace holding the job's `ruff/__main__.py`
    would otherwise run that file (Python 3.11 and later honour it)."""
    env = {
        **passed_env(pass_env, os.environ),
        "PATH": os.environ.get("PATH") or os.defpath,
        "HOME": home,
        "LANG": "C.UTF-8",
        "PYTHONSAFEPATH": "1",
        "GENJOB_INSTRUCTION_FILE": instruction_file,
        "GENJOB_JOB_FILE": job_file,
        "GENJOB_WORKDIR": work,
    }
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def run_in_workspace(
    header: dict[str, typing.Any], stdin: typing.BinaryIO, watch: Watch, result: dict[str, typing.Any]
) -> dict[str, Output]:
    """Receive, run and collect one job, filling ``result``; return the collected outputs.

    The workspace is ``<tmp>/work`` (the generator's cwd, holding only the repository
    files), beside ``<tmp>/meta`` (job and instruction) and an empty ``<tmp>/home``.
    """
    limits = header["limits"]
    base = tempfile.mkdtemp(prefix="genjob-")
    try:
        work, meta, home = (os.path.join(base, name) for name in ("work", "meta", "home"))
        for folder in (work, meta, home):
            os.mkdir(folder, 0o700)
        allowed = receive_bundle(stdin, header["bundle_bytes"], limits, work, meta)
        instruction_file = os.path.join(meta, "instruction.txt")
        job_file = os.path.join(meta, "job.json")
        command = render_command(
            header["generator"],
            {
                "instruction_file": shlex.quote(instruction_file),
                "job_file": shlex.quote(job_file),
                "paths": quoted_paths(allowed),
                "workdir": shlex.quote(work),
            },
        )
        if watch.reason is not None:
            raise Cancelled(watch.reason)
        tail = Tail(limits.max_tail_bytes)
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=work,
            env=generator_env(home, work, instruction_file, job_file, header["pass_env"]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
        exit_code, timed_out, cancelled = Generator(proc, watch, tail).finish(header["timeout"])
        result.update(
            exit_code=exit_code,
            timed_out=timed_out,
            cancelled=cancelled,
            tail=bytes(tail.data).decode("utf-8", errors="replace"),
        )
        if cancelled:
            return {}
        outputs, violations = collect(work, allowed, limits)
        result["violations"] = violations
        return outputs
    finally:
        remove_tree(base)


def widen_pipe(fd: int) -> None:
    """Let the pipe on ``fd`` hold PIPE_BYTES where the system allows it; a file, a socket,
    another system or a user over their pipe quota keeps what it has."""
    if F_SETPIPE_SZ is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)


def read_nonce(stream: typing.BinaryIO) -> bytes:
    """The client's nonce, the line after the runner's source."""
    line = stream.readline(64)
    if not line:
        raise Cancelled("input closed before the nonce")
    nonce = line.rstrip(b"\n")
    if not NONCE.fullmatch(nonce.decode("ascii", "replace")):
        raise ProtocolError("the nonce line is not 32 hex digits")
    return nonce


def say_hello(out: typing.BinaryIO, nonce: bytes, facts: dict[str, str]) -> None:
    """The runner's first line on stdout: the client skips anything before it."""
    out.write(HELLO + nonce + b" " + json.dumps(facts, sort_keys=True).encode("ascii") + b"\n")
    out.flush()


# Where a container's id shows: the engine binds its own files (hostname, resolv.conf)
# from a folder named for it, `<data-root>/containers/<id>/` (docker, wherever its data
# root is) or `overlay-containers/<id>/userdata/` (podman), or names its cgroup for it
# (cgroup v1, or v2 without a cgroup namespace of its own: on v2 docker gives each
# container one by default, and its cgroup reads `/`).
_CONTAINER_PLACES = (
    ("mountinfo", re.compile(r"/(?:overlay-)?containers/([0-9a-f]{64})/")),
    ("cgroup", re.compile(r"(?:docker|libpod)[-/]([0-9a-f]{64})")),
)


def container_id(proc: str = "/proc/self") -> str | None:
    """The id of the container the runner is in, when a container engine names one."""
    for name, pattern in _CONTAINER_PLACES:
        try:
            with open(os.path.join(proc, name), encoding="utf-8", errors="replace") as handle:
                found = pattern.search(handle.read(1 << 20))
        except OSError:
            continue
        if found:
            return found.group(1)
    return None


def scheduler_facts(environ: typing.Mapping[str, str]) -> dict[str, str]:
    """What the scheduler or container engine says about this run: Slurm's job and step
    ids, the container's id, the Kubernetes pod's name (its HOSTNAME there); each one only
    when it is a plain word (`FACT_VALUE`)."""
    found = {
        "slurm_job_id": environ.get("SLURM_JOB_ID"),
        "slurm_step_id": environ.get("SLURM_STEP_ID"),
        "pod_name": environ.get("HOSTNAME") if environ.get("KUBERNETES_SERVICE_HOST") else None,
        "container_id": container_id(),
    }
    return {name: value for name, value in found.items() if value and FACT_VALUE.fullmatch(value)}


def main() -> int:
    result: dict[str, typing.Any] = {
        "exit_code": None,
        "timed_out": False,
        "cancelled": False,
        "violations": [],
        "tail": "",
        "error": None,
        "outputs": {},
    }
    outputs: dict[str, Output] = {}
    widen_pipe(0)
    stdin = sys.stdin.buffer
    try:
        nonce = read_nonce(stdin)
        say_hello(sys.stdout.buffer, nonce, scheduler_facts(os.environ))
    except (Cancelled, ProtocolError, OSError) as exc:
        sys.stderr.write(f"[genjob-runner] {exc}\n")
        return 2
    try:
        header = read_header(stdin)
        outputs = run_in_workspace(header, stdin, Watch(), result)
    except Cancelled as exc:
        result.update(cancelled=True, error=str(exc))
    except ProtocolError as exc:
        result["error"] = str(exc)
    except OSError as exc:
        result["error"] = f"runner: {exc}"
    try:
        write_result(sys.stdout.buffer, result, outputs)
        sys.stdout.buffer.flush()
    except OSError:
        return 1
    return 0


def _grew(handle: typing.BinaryIO) -> bool:
    """True when a file read to its collected size has more to give."""
    try:
        return bool(handle.read(1))
    except OSError:
        return True


def write_result(out: typing.BinaryIO, result: dict[str, typing.Any], outputs: dict[str, Output]) -> None:
    """The result tar: the outputs first, each read and hashed as it goes out (so both
    overlap sending), then ``result.json`` with those hashes.

    An output whose size changed since it was collected (something the generator left
    behind still writing) is sent at its collected size and named in the violations."""
    hashes = {}
    with tar_writer(out) as add:
        for rel in sorted(outputs):
            handle, size = outputs[rel]
            with handle:
                member = Member(handle, size, hashlib.sha256())
                add("outputs/" + rel, member)
                if member.short or _grew(handle):
                    result["violations"].append(f"{rel}: changed while it was being sent")
            hashes[rel] = member.digest.hexdigest()
        add("result.json", json.dumps({**result, "outputs": hashes}, sort_keys=True).encode("utf-8"))


if __name__ == "__main__":
    sys.exit(main())
