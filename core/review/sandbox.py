"""Run a command from outside confined by bubblewrap: one writable folder, nothing else.

A command genjob did not write (a check over generated code, a generator) runs under
``bwrap`` with:
 - every namespace unshared (`--unshare-all`): no network unless asked for, its own
   process tree, hostname and IPC; its own session (`--new-session`); every capability
   dropped and no further user namespaces;
 - a filesystem made of nothing but what is named here: ``/usr`` and the few files of
   ``/etc`` a program needs, read-only; the prefixes of the interpreter genjob runs on,
   read-only, so that ``python3`` works; the caller's extra read-only paths; a fresh
   ``/proc``, ``/dev`` and an empty ``/tmp`` in memory; and exactly one writable folder,
   bound at its own absolute path (or at the path the caller names). The user's home, SSH
   keys and genjob's own key folder are never bound, and a read-only path that would
   show any of them is refused. Read-only paths are opened and judged as descriptors
   (`core.review.read_only`) and bwrap binds those descriptors, so a path swapped for a link
   after it was judged binds nothing else;
 - no unix socket of its own (`core.review.seccomp`): a read-only socket file can still be
   connected to, and one outside (an ssh-agent's, ``docker.sock``) would be a way out;
 - a clean environment: ``PATH``, ``LANG``, ``HOME`` (an empty folder in that ``/tmp``)
   and what the caller adds;
 - `--die-with-parent`, and a process group genjob kills on a timeout or a cancel. Every
   process in the sandbox lives in its own PID namespace, which the kernel empties when
   bwrap goes: no process is left behind, whatever it forked or however it detached.

The writable folder can be an `Overlay`: a read-only folder (never written, even
through a hard link) under a layer in memory that takes every write and is gone with
the sandbox. It is mounted in a private mount namespace (``unshare``) around bwrap.

Without bwrap nothing runs unless the caller asked for ``kind="none"``; a `Launch`
then says plainly that it is not sandboxed (`Launch.sandboxed`, `Launch.describe`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from core.errors import BadInput, GenjobError
from core.remote.rules import TailBuffer
from core.review import read_only, seccomp
from core.review.read_only import Bind, Rules, private_fault, within
from core.store import procfs
from core.store.tree import closing

Kind = Literal["bwrap", "none"]
KINDS: tuple[Kind, ...] = ("bwrap", "none")

# The parts of /etc a program needs to start, read its users and find its libraries.
ETC_BASE = (
    "alternatives",
    "group",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "passwd",
)
# What a program that may use the network also needs: name resolution and certificates.
ETC_NETWORK = ("resolv.conf", "gai.conf", "ssl", "ca-certificates", "pki")
TOP_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
SANDBOX_HOME = "/tmp/home"
CHUNK = 1 << 16
# After a kill, how long the output of processes that outlived their group is waited for.
DRAIN_WAIT = 2.0
# How long the sandbox's init may take to empty its PID namespace before it is killed.
EMPTY_WAIT = 5.0


class SandboxError(GenjobError):
    """The sandbox cannot be set up as asked; nothing was run."""


@dataclass(frozen=True)
class Overlay:
    """A writable view of `lower` whose writes stay in memory and vanish with the sandbox.

    `mount_point` is an empty folder the private mount namespace mounts its memory
    filesystem on; outside that namespace it stays empty.
    """

    lower: Path
    mount_point: Path


@dataclass(frozen=True)
class Confinement:
    """What a sandboxed command may see and touch.

    folder: the one writable folder (or an `Overlay`); the command starts there.
    at: where `folder` appears inside the sandbox (default: its own path; an overlay
      needs one).
    read_only: more paths the command may read, each at its own path (its real one,
      or, inside `tree`, the one it has there): `core.review.read_only` judges and opens them.
    tree: a folder whose links a read-only path inside it may not leave (a check's
      repository: its links are data, not the operator's word).
    named_by: who named the read-only paths, for the message that refuses one (the config
      file and its table).
    network: whether the command shares the host's network (default: none at all).
    env: variables set for the command, over the clean environment.
    kind: "bwrap", or "none" to run without a sandbox (the operator's explicit choice).
    home: HOME for a command run with kind "none" (default: a path that does not exist).
    """

    folder: Path | Overlay
    at: Path | None = None
    read_only: tuple[Path, ...] = ()
    tree: Path | None = None
    named_by: str = "sandbox"
    network: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    kind: Kind = "bwrap"
    home: Path | None = None

    @property
    def inside(self) -> Path:
        """Where the writable folder is seen by the command."""
        if self.at is not None:
            return self.at
        if isinstance(self.folder, Overlay):
            raise SandboxError("an overlay needs the path it is seen at (`at`)")
        return self.folder


@dataclass(frozen=True)
class Launch:
    """A command line ready to start: the wrapper (unshare, bwrap) and the command.

    Start it in a new session (``start_new_session=True``) so `kill_tree` reaches it;
    `start` does, and closes the descriptors it holds once bwrap has them (a launch that
    is not started must be closed).
    """

    argv: list[str]
    env: dict[str, str]
    cwd: str
    sandboxed: bool
    describe: str
    # Where bwrap's own options start in `argv` (None when it is not sandboxed).
    bwrap_at: int | None = None
    # The descriptors `argv` binds (`--ro-bind-fd`), open until it is started or closed.
    fds: list[int] = field(default_factory=list)
    # The seccomp filter bwrap is to load (`core.review.seccomp`; empty: none).
    seccomp: bytes = b""

    def close(self) -> None:
        """Close the descriptors it holds (again: nothing)."""
        _close(self.fds)
        self.fds.clear()


@dataclass(frozen=True)
class Finished:
    """How a command run by `run` ended.

    exit_code: the command's exit status; None when genjob stopped it (timed out or
      cancelled). duration: seconds from start to end. tail: the last bytes of its
      output (stdout and stderr together); output_bytes: how many there were in all.
    """

    exit_code: int | None
    timed_out: bool
    cancelled: bool
    duration: float
    tail: bytes
    output_bytes: int
    sandboxed: bool

    @property
    def passed(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class Tools:
    """The programs a sandbox is made with, found on this machine (None: not found)."""

    bwrap: str | None
    unshare: str | None
    mount: str | None
    sh: str | None
    bwrap_version: tuple[int, ...] = ()


@functools.cache
def tools() -> Tools:
    """What this machine has, looked up once per process."""
    bwrap = shutil.which("bwrap")
    version: tuple[int, ...] = ()
    if bwrap:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout
            match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
            if match:
                version = tuple(int(g) for g in match.groups() if g is not None)
    return Tools(bwrap, shutil.which("unshare"), shutil.which("mount"), shutil.which("sh"), version)


def interpreter_paths() -> tuple[Path, ...]:
    """The prefixes of the interpreter genjob runs on, so that `python3` works inside."""
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parent.parent}
    return tuple(sorted(p for p in paths if p != Path("/")))


def sandbox_path() -> str:
    """PATH inside: the folder of genjob's interpreter first, then the system's."""
    return os.pathsep.join(
        dict.fromkeys([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"])
    )


def check_writable(folder: Path) -> None:
    """Refuse a writable folder that holds the user's home, ~/.ssh or genjob's key folder,
    or lies within either of the last two."""
    fault = private_fault(folder)
    if fault is not None:
        raise SandboxError(f"sandbox: the writable folder {folder} {fault}")


def _open_read_only(spec: Confinement, writable: Path) -> list[Bind]:
    """The interpreter's prefixes and `spec`'s read-only paths, open and judged
    (`core.review.read_only`); SandboxError naming who named the path and its fault."""
    try:
        ours = read_only.open_read_only(interpreter_paths(), Rules("sandbox", writable))
        try:
            theirs = read_only.open_read_only(spec.read_only, Rules(spec.named_by, writable, spec.tree))
        except BaseException:
            _close(bind.fd for bind in ours)
            raise
    except BadInput as exc:
        raise SandboxError(str(exc)) from None
    return ours + theirs


def _close(fds: Iterable[int]) -> None:
    for fd in fds:
        os.close(fd)


@functools.cache
def system_call_filter() -> bytes:
    """The seccomp filter every sandboxed command runs under (`core.review.seccomp`); SandboxError
    on an architecture genjob has none for, rather than a sandbox without it."""
    arch = seccomp.native()
    if arch is None:
        raise SandboxError(
            f"no system-call filter for this machine ({platform.machine()}; genjob has one for "
            f"{', '.join(seccomp.ARCHES)}), and without it a sandboxed command could reach the "
            "machine's unix sockets; nothing was run"
        )
    return seccomp.program(arch)


def launch(spec: Confinement, command: Sequence[str]) -> Launch:
    """The command line that runs `command` as `spec` says; SandboxError when it cannot."""
    if not command:
        raise SandboxError("nothing to run: the command is empty")
    if spec.kind == "none":
        return _unsandboxed(spec, command)
    if spec.kind != "bwrap":
        raise SandboxError(f"unknown sandbox {spec.kind!r} (expected one of {', '.join(KINDS)})")
    have = tools()
    if have.bwrap is None:
        raise SandboxError(
            "bwrap (bubblewrap) is not installed, and this command runs sandboxed by default; "
            'install it (Debian, Ubuntu: apt-get install bubblewrap), or set sandbox = "none" '
            "to run it unsandboxed"
        )
    inside = spec.inside
    if not inside.is_absolute():
        raise SandboxError(f"the sandbox's folder must be an absolute path, not {inside}")
    overlay = spec.folder if isinstance(spec.folder, Overlay) else None
    if isinstance(spec.folder, Overlay):
        check_writable(Path(os.path.realpath(spec.folder.lower)))
        writable = Path(os.path.realpath(spec.folder.mount_point))
    else:
        writable = Path(os.path.realpath(spec.folder))
    check_writable(writable)
    source = str(writable / "merged") if overlay else str(writable)
    prelude = _overlay_prelude(have, overlay) if overlay else []
    allowed = system_call_filter()
    binds = _open_read_only(spec, writable)
    try:
        args, bound = _bwrap_args(have, spec, inside, source, binds)
    except BaseException:
        _close(b.fd for b in binds)
        raise
    _close(b.fd for b in binds if b.fd not in bound)
    argv = [*prelude, have.bwrap, *args, "--", *command]
    network = "network shared" if spec.network else "no network"
    what = f"bwrap: {network}, no unix sockets, only {inside} writable"
    if overlay:
        what += " (its writes kept in memory)"
    env = {"PATH": os.defpath, "LANG": "C.UTF-8"}
    return Launch(argv, env, "/", True, what, bwrap_at=len(prelude) + 1, fds=bound, seccomp=allowed)


def _base_env(spec: Confinement, home: str) -> dict[str, str]:
    return {"PATH": sandbox_path(), "LANG": "C.UTF-8", "HOME": home, **spec.env}


def _unsandboxed(spec: Confinement, command: Sequence[str]) -> Launch:
    if isinstance(spec.folder, Overlay):
        raise SandboxError('an overlay needs the sandbox; with sandbox = "none" give a plain folder')
    home = str(spec.home) if spec.home is not None else "/nonexistent"
    env = _base_env(spec, home)
    return Launch(
        list(command),
        env,
        str(spec.folder),
        False,
        'UNSANDBOXED (sandbox = "none"): it can read and write whatever you can, and use the network',
    )


def _bwrap_args(
    have: Tools, spec: Confinement, inside: Path, source: str, binds: list[Bind]
) -> tuple[list[str], list[int]]:
    """bwrap's options, and the descriptors of `binds` they bind (one shown through a
    folder bound above it is not bound again)."""
    args = [
        "--unshare-all",
        "--unshare-user",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--hostname",
        "genjob-sandbox",
        "--clearenv",
    ]
    if have.bwrap_version >= (0, 8):
        args.append("--disable-userns")
    if spec.network:
        args.append("--share-net")
    for name, value in _base_env(spec, SANDBOX_HOME).items():
        args += ["--setenv", name, value]
    # Mounts in order of depth, so that a deeper one is never hidden by a shallower one.
    mounts: list[tuple[str, list[str]]] = [("/usr", ["--ro-bind", "/usr", "/usr"])]
    for name in TOP_LINKS:
        top = Path("/") / name
        if top.is_symlink():
            mounts.append((str(top), ["--symlink", os.readlink(top), str(top)]))
        elif top.is_dir():
            mounts.append((str(top), ["--ro-bind", str(top), str(top)]))
    for name in ETC_BASE + (ETC_NETWORK if spec.network else ()):
        mounts.append((f"/etc/{name}", ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]))
    mounts += [
        ("/proc", ["--proc", "/proc"]),
        ("/dev", ["--dev", "/dev"]),
        ("/tmp", ["--tmpfs", "/tmp"]),
        (SANDBOX_HOME, ["--dir", SANDBOX_HOME]),
    ]
    bound, fds = [Path("/usr")], []
    for bind in sorted(binds, key=lambda b: len(b.at.parts)):
        if any(_shown_through(bind.at, b, inside) for b in bound):
            continue
        bound.append(bind.at)
        fds.append(bind.fd)
        mounts.append((str(bind.at), ["--ro-bind-fd", str(bind.fd), str(bind.at)]))
    mounts.append((str(inside), ["--bind", source, str(inside)]))
    for _, op in sorted(mounts, key=lambda m: len(Path(m[0]).parts)):
        args += op
    # The root bwrap builds the rest on is a memory filesystem: make it read-only too.
    return [*args, "--remount-ro", "/", "--chdir", str(inside)], fds


def _shown_through(path: Path, folder: Path, inside: Path) -> bool:
    """Whether `path` is seen through `folder` bound above it: not when the writable
    folder is bound between the two and hides it."""
    return within(path, folder) and not (within(inside, folder) and within(path, inside))


# Runs as root of a new user namespace with a private mount namespace, then becomes
# bwrap: a memory filesystem on the mount point, the lower folder bound into it under a
# plain name (so no path ever needs escaping in the overlay's options), and the overlay.
# `userxattr` keeps the overlay's own marks in user xattrs, which a user namespace may
# write: without it removing a folder of the lower tree fails.
_PRELUDE = (
    'set -e; "$2" -t tmpfs -o mode=0700 genjob "$1"; cd "$1"; mkdir lower upper work merged; '
    '"$2" --bind "$3" lower; '
    '"$2" -t overlay -o lowerdir=lower,upperdir=upper,workdir=work,userxattr genjob merged; '
    'cd /; shift 3; exec "$@"'
)


def _overlay_prelude(have: Tools, overlay: Overlay) -> list[str]:
    if have.unshare is None or have.mount is None or have.sh is None:
        raise SandboxError("an overlay needs unshare, mount and sh (util-linux)")
    return [
        have.unshare,
        "--user",
        "--map-root-user",
        "--mount",
        "--",
        have.sh,
        "-c",
        _PRELUDE,
        "genjob-overlay",
        str(overlay.mount_point),
        have.mount,
        str(overlay.lower),
    ]


@functools.cache
def bwrap_problem() -> str | None:
    """Why bwrap cannot run a sandbox on this machine (None: it can). Checked once."""
    with tempfile.TemporaryDirectory(prefix="genjob-probe-") as tmp:
        spec = Confinement(Path(tmp))
        try:
            return _probe(launch(spec, ["/bin/sh", "-c", "exit 0"]))
        except SandboxError as exc:
            return str(exc)


def overlay_problem(near: Path) -> str | None:
    """Why an overlay cannot be made for a lower folder on the filesystem of `near`
    (None: it can). Checked once per filesystem."""
    return _overlay_problem(os.stat(near).st_dev, str(near))


@functools.lru_cache(maxsize=32)
def _overlay_problem(dev: int, near: str) -> str | None:
    problem = bwrap_problem()
    if problem is not None:
        return problem
    with tempfile.TemporaryDirectory(prefix=".genjob-probe-", dir=near) as tmp:
        lower, mnt = Path(tmp) / "lower", Path(tmp) / "mnt"
        (lower / "folder").mkdir(parents=True)
        mnt.mkdir()
        (lower / "probe").write_bytes(b"lower\n")
        (lower / "folder" / "probe").write_bytes(b"lower\n")
        spec = Confinement(Overlay(lower, mnt), at=Path("/genjob-probe"))
        try:
            # A file written and a folder removed: what a test suite does to its tree.
            problem = _probe(launch(spec, ["/bin/sh", "-c", "echo upper > probe && rm -r folder"]))
        except SandboxError as exc:
            return str(exc)
        if problem is None and (lower / "probe").read_bytes() != b"lower\n":
            return "the overlay wrote through to its lower folder"
        return problem


def _probe(how: Launch) -> str | None:
    try:
        with handed(how) as (argv, fds):
            proc = subprocess.run(
                argv, env=how.env, cwd=how.cwd, capture_output=True, timeout=60, pass_fds=fds
            )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{how.argv[0]}: {exc}"
    if proc.returncode != 0:
        why = proc.stderr.decode(errors="replace").strip().splitlines()
        return f"{os.path.basename(how.argv[0])} failed: {why[-1] if why else f'exit {proc.returncode}'}"
    return None


def kill_tree(pid: int) -> None:
    """SIGKILL the process group `pid` leads and every process left in its session.

    A sandboxed command's processes all die with bwrap (their PID namespace goes with
    it); an unsandboxed one's may have left the group: the session still names them.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for other in _session_members(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(other, signal.SIGKILL)


def _session_members(sid: int) -> list[int]:
    members = []
    for name in os.listdir("/proc"):
        fields = procfs.stat_fields(name) if name.isdigit() else None
        if fields and len(fields) > procfs.SESSION and int(fields[procfs.SESSION]) == sid:
            members.append(int(name))
    return members


class Started:
    """A started `Launch`. Leaving ``async with`` it kills whatever of it still runs, reads
    bwrap's status reports (`status`, one JSON object a line) and waits until a sandbox's
    PID namespace is empty: every way of running a `Launch` goes through here, so that
    none returns while a process the command left behind still runs."""

    def __init__(self, proc: asyncio.subprocess.Process, status_fd: int | None) -> None:
        self.proc = proc
        self.status = b""
        self._status_fd = status_fd

    async def __aenter__(self) -> Started:
        return self

    async def __aexit__(self, *_: object) -> None:
        if self.proc.returncode is None:
            kill_tree(self.proc.pid)
            with contextlib.suppress(ProcessLookupError):
                await self.proc.wait()
        if self._status_fd is not None:
            self.status = _read_all(self._status_fd)
            os.close(self._status_fd)
            self._status_fd = None
        await _namespace_emptied(self.status)


async def start(how: Launch, *, stdin: int, stdout: int, stderr: int) -> Started:
    """Start `how` in a session of its own (OSError when it cannot be started); the
    descriptors it holds are closed either way."""
    status_r, status_w = None, None
    with handed(how) as (argv, fds):
        if how.bwrap_at is not None:
            # bwrap reports its init's pid and namespaces on this pipe, and the command's
            # exit code once the command ran.
            status_r, status_w = os.pipe()
            argv[how.bwrap_at : how.bwrap_at] = ["--json-status-fd", str(status_w)]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                env=how.env,
                cwd=how.cwd,
                start_new_session=True,
                pass_fds=[*fds, status_w] if status_w is not None else fds,
            )
        except OSError:
            if status_r is not None:
                os.close(status_r)
            raise
        finally:
            if status_w is not None:
                os.close(status_w)
    return Started(proc, status_r)


@contextlib.contextmanager
def handed(how: Launch) -> Iterator[tuple[list[str], list[int]]]:
    """`how`'s command line with what bwrap reads from descriptors, and those descriptors,
    to start it with (``pass_fds``); when the block ends they are closed, `how`'s too.

    The seccomp filter goes through a pipe, written whole before bwrap starts (a pipe
    holds far more than a filter's few hundred bytes), and read once by bwrap.
    """
    argv, fds = list(how.argv), list(how.fds)
    try:
        if how.seccomp and how.bwrap_at is not None:
            filter_r, filter_w = os.pipe()
            fds.append(filter_r)
            with closing(filter_w):
                os.write(filter_w, how.seccomp)
            argv[how.bwrap_at : how.bwrap_at] = ["--add-seccomp-fd", str(filter_r)]
        yield argv, fds
    finally:
        _close(fd for fd in fds if fd not in how.fds)
        how.close()


async def run(
    how: Launch,
    timeout: float,
    on_output: Callable[[bytes], None] | None = None,
    cancel: asyncio.Event | None = None,
    tail_bytes: int = 64 << 10,
) -> Finished:
    """Run `how` to its end, its timeout or a cancel; every process it made is gone after.

    Its output (stdout and stderr as one stream) goes to `on_output` as it comes, and its
    last `tail_bytes` are kept. When this task is cancelled the command is killed first.
    A sandbox that could not be set up (bwrap refused a mount, say) raises SandboxError
    with bwrap's words, instead of passing for a command that failed.
    """
    tail = TailBuffer(tail_bytes)
    began = time.monotonic()
    sub = asyncio.subprocess
    try:
        run = await start(how, stdin=sub.DEVNULL, stdout=sub.PIPE, stderr=sub.STDOUT)
    except OSError as exc:
        raise SandboxError(f"{how.argv[0]}: cannot start ({exc.strerror})") from None
    async with run:
        output = _Output(run.proc, tail, on_output)
        try:
            timed_out, cancelled = await _wait(run.proc, timeout, cancel)
            await output.drain()
        finally:
            output.stop()
    duration = time.monotonic() - began
    exit_code: int | None = run.proc.returncode
    if timed_out or cancelled:
        exit_code = None
    elif how.bwrap_at is not None:
        exit_code = _command_exit(run.status, run.proc.returncode, bytes(tail))
    return Finished(exit_code, timed_out, cancelled, duration, bytes(tail), output.total, how.sandboxed)


async def _wait(
    proc: asyncio.subprocess.Process, timeout: float, cancel: asyncio.Event | None
) -> tuple[bool, bool]:
    """Wait for `proc` to end, killing its tree at the timeout or the cancel; returns
    (timed out, cancelled)."""
    waiter = asyncio.ensure_future(proc.wait())
    stopper = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
    try:
        pending = {waiter} | ({stopper} if stopper is not None else set())
        done, _ = await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if waiter in done:
            return False, False
        kill_tree(proc.pid)
        await waiter
        return stopper not in done, stopper in done
    finally:
        for task in (waiter, stopper):
            if task is not None and not task.done():
                task.cancel()


class _Output:
    """The command's output, read as it comes into a tail and the caller's callback."""

    def __init__(
        self, proc: asyncio.subprocess.Process, tail: TailBuffer, on_output: Callable[[bytes], None] | None
    ) -> None:
        self.proc = proc
        self.tail = tail
        self.on_output = on_output
        self.total = 0
        self.task = asyncio.ensure_future(self._pump())

    async def _pump(self) -> None:
        stdout = self.proc.stdout
        if stdout is None:
            raise RuntimeError("the command was started with its output on a pipe")
        while chunk := await stdout.read(CHUNK):
            self.total += len(chunk)
            self.tail.add(chunk)
            if self.on_output is not None:
                self.on_output(chunk)

    async def drain(self) -> None:
        """Read what is left once the command ended, for `DRAIN_WAIT` at most: a process
        that left an unsandboxed command's group could hold the pipe open for ever."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.task), DRAIN_WAIT)
        if not self.task.done():
            kill_tree(self.proc.pid)
            return
        error = self.task.exception()
        if error is not None:
            raise error

    def stop(self) -> None:
        if not self.task.done():
            self.task.cancel()


def _read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, CHUNK):
            chunks.append(chunk)
    return b"".join(chunks)


def _reports(status: bytes) -> dict[str, object]:
    """bwrap's status reports (one JSON object a line), merged."""
    merged: dict[str, object] = {}
    for line in status.splitlines():
        with contextlib.suppress(ValueError):
            report = json.loads(line)
            if isinstance(report, dict):
                merged.update(report)
    return merged


async def _namespace_emptied(status: bytes) -> None:
    """Wait until the sandbox's PID namespace is empty.

    bwrap exits as soon as its init reports the command's exit code, while that init is
    still on its way out: only as it exits does the kernel kill every process left in the
    namespace (a detached one, say), which could otherwise still run a moment after the
    command "ended". The init is known by its pid and its namespace's inode (so a reused
    pid is never mistaken for it); it is killed if it has not gone within `EMPTY_WAIT`.
    """
    reports = _reports(status)
    pid, namespace = reports.get("child-pid"), reports.get("pid-namespace")
    if not isinstance(pid, int) or not isinstance(namespace, int):
        return
    deadline, killed = time.monotonic() + EMPTY_WAIT, False
    while _in_namespace(pid, namespace):
        if time.monotonic() > deadline:
            if killed:
                return
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            deadline, killed = deadline + EMPTY_WAIT, True
        await asyncio.sleep(0.002)


def _in_namespace(pid: int, namespace: int) -> bool:
    """Whether process `pid` lives, in PID namespace `namespace`. A zombie does not: an
    init is one only once its namespace is empty, and who reaps it (whoever adopted it)
    may take its time."""
    try:
        link = os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return False
    return link == f"pid:[{namespace}]" and procfs.alive(pid)


def _command_exit(status: bytes, returncode: int | None, tail: bytes) -> int:
    """The command's exit code from bwrap's status reports; SandboxError when it never ran."""
    code = _reports(status).get("exit-code")
    if isinstance(code, int):
        return code
    lines = [line for line in tail.decode(errors="replace").splitlines() if line.strip()]
    why = lines[-1] if lines else f"exit status {returncode}"
    raise SandboxError(f"the sandbox could not be set up: {why}")
