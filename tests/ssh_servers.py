"""Real SSH servers on 127.0.0.1 for the transport tests.

``asyncssh_server``: an in-process asyncssh server whose sessions run the requested
command as a real ``/bin/sh -c`` subprocess (own session, sshd-like environment), piping
stdin/stdout/stderr and passing on exit status and signal requests.

``openssh_server``: ``/usr/sbin/sshd -D -e`` with a config, host key, user key and
authorized_keys written to a temp folder, listening on 127.0.0.1 only. Missing sshd
fails the tests when ``CI`` is set and skips them otherwise. ``run_sshd(folder)`` is the
same server as a plain context manager, for the benchmarks.

``talkative_sshd``: the same sshd, but the user's own ``~/.bashrc``, which bash reads for
every command sshd runs, first prints what the test put in a banner file (as an `echo`
there, conda's or Lmod's messages do), and exits instead of running the command when the
test says so. The rc is bind-mounted over the real one in a mount namespace of that sshd's
own, so nothing outside it changes; it needs root, and bash as the user's shell.

Both give an ``SSHServer``: address, port, client identity, a known_hosts file holding
the server's host key, the key's SHA256 fingerprint, and ``drop()``, which kills every
live connection from the server side.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import pytest

HOST = "127.0.0.1"
SSHD = "/usr/sbin/sshd"
# What every session on either server has in its environment, beside a PATH: two
# variables a host's `pass_env` may name for its generator, and one it must never see.
HOST_ENV = {"PASSME_ONE": "one", "PASSME_TWO": "two", "OTHER_SECRET": "s3cret"}
SESSION_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", **HOST_ENV}


@dataclass
class SSHServer:
    kind: str
    port: int
    user: str
    identity: Path
    known_hosts: Path
    fingerprint: str
    drop: Callable[[], None]
    host: str = HOST

    @property
    def address(self) -> str:
        return f"{self.user}@{self.host}"


def write_key(path: Path) -> asyncssh.SSHKey:
    """Generate an ed25519 key: private in OpenSSH format (0600) and ``.pub`` beside it."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(path))
    path.chmod(0o600)
    key.write_public_key(str(path) + ".pub")
    return key


def known_hosts_line(port: int, key: asyncssh.SSHKey) -> str:
    return f"[{HOST}]:{port} {key.export_public_key().decode().strip()}\n"


def _server_key_setup(folder: Path) -> tuple[asyncssh.SSHKey, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    host_key = write_key(folder / "ssh_host_ed25519_key")
    identity = folder / "id_ed25519"
    write_key(identity)
    shutil.copy(str(identity) + ".pub", folder / "authorized_keys")
    return host_key, identity


async def _pump(src: asyncio.StreamReader, dst: asyncssh.SSHWriter[bytes]) -> None:
    """Copy until EOF; keep draining even if the channel went away, so the child never
    blocks on a full pipe."""
    open_ = True
    while data := await src.read(65536):
        if open_:
            try:
                dst.write(data)
                await dst.drain()
            except (OSError, asyncssh.Error):
                open_ = False


async def _feed(src: asyncssh.SSHReader[bytes], proc: asyncio.subprocess.Process) -> None:
    """Channel stdin to the child; a signal request becomes a real signal. EOF or a lost
    channel closes the child's stdin, as sshd does."""
    assert proc.stdin is not None
    while True:
        try:
            data = await src.read(65536)
        except asyncssh.SignalReceived as exc:
            signum = getattr(signal, "SIG" + exc.signal, None)
            if signum is not None and proc.returncode is None:
                proc.send_signal(signum)
            continue
        except (OSError, asyncssh.Error):
            break
        if not data:
            break
        try:
            proc.stdin.write(data)
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            break
    proc.stdin.close()


async def _session(process: asyncssh.SSHServerProcess[bytes]) -> None:
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        process.command or "",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=SESSION_ENV,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    feeder = asyncio.ensure_future(_feed(process.stdin, proc))
    try:
        await asyncio.gather(_pump(proc.stdout, process.stdout), _pump(proc.stderr, process.stderr))
        code = await proc.wait()
    finally:
        feeder.cancel()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    with contextlib.suppress(OSError, asyncssh.Error):
        if code >= 0:
            process.exit(code)
        else:
            process.exit_with_signal(signal.Signals(-code).name[3:])


class _Tracker(asyncssh.SSHServer):
    def __init__(self, conns: set[asyncssh.SSHServerConnection]) -> None:
        self._conns = conns
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        self._conns.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is not None:
            self._conns.discard(self._conn)


@pytest.fixture
async def asyncssh_server(tmp_path: Path) -> AsyncIterator[SSHServer]:
    host_key, identity = _server_key_setup(tmp_path / "asyncssh")
    conns: set[asyncssh.SSHServerConnection] = set()
    sessions: set[asyncio.Task[None]] = set()

    def start_session(process: asyncssh.SSHServerProcess[bytes]) -> None:
        task = asyncio.ensure_future(_session(process))
        sessions.add(task)
        task.add_done_callback(sessions.discard)

    server = await asyncssh.create_server(
        lambda: _Tracker(conns),
        HOST,
        0,
        server_host_keys=[host_key],
        authorized_client_keys=str(tmp_path / "asyncssh" / "authorized_keys"),
        process_factory=start_session,
        encoding=None,
        allow_pty=False,
        agent_forwarding=False,
        x11_forwarding=False,
        config=[],
    )
    port = server.sockets[0].getsockname()[1]
    known_hosts = tmp_path / "asyncssh" / "known_hosts"
    known_hosts.write_text(known_hosts_line(port, host_key))

    def drop() -> None:
        for conn in list(conns):
            conn.abort()

    yield SSHServer(
        kind="asyncssh",
        port=port,
        user=getpass.getuser(),
        identity=identity,
        known_hosts=known_hosts,
        fingerprint=host_key.get_fingerprint("sha256"),
        drop=drop,
    )
    server.close()
    drop()
    await server.wait_closed()
    if sessions:
        await asyncio.wait(set(sessions), timeout=15)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _sshd_config(folder: Path, port: int, forwarding: bool) -> Path:
    config = folder / "sshd_config"
    allow = "yes" if forwarding else "no"
    config.write_text(
        f"Port {port}\n"
        f"ListenAddress {HOST}\n"
        f"HostKey {folder / 'ssh_host_ed25519_key'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\n"
        "PidFile none\n"
        "PermitRootLogin prohibit-password\n"
        "PubkeyAuthentication yes\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "UsePAM no\n"
        "StrictModes no\n"
        "UseDNS no\n"
        f"AllowAgentForwarding {allow}\n"
        f"AllowTcpForwarding {allow}\n"
        "X11Forwarding no\n"
        "PermitTTY no\n"
        "PrintMotd no\n"
        "MaxSessions 32\n"
        "MaxStartups 32\n"
        "Subsystem sftp internal-sftp\n"
        "LogLevel INFO\n"
        f"SetEnv {' '.join(f'{name}={value}' for name, value in HOST_ENV.items())}\n"
    )
    return config


def _listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> bool:
    """Whether this sshd got `port`: it says so in its log once it listens; it exits when
    another process holds the port (a free port found a moment ago can be taken by another
    test process before sshd binds it, and a banner on that port may be the other's)."""
    said = f"Server listening on {HOST} port {port}."
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if said in log.read_text(errors="replace").splitlines():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    raise RuntimeError(f"sshd did not listen on {HOST}:{port}:\n{log.read_text()}")


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            tree.setdefault(ppid, []).append(int(entry))
    return tree


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def sshd_connection_pids(listener: int) -> list[int]:
    """Every sshd process below the listener: one set per connection."""
    tree = _children()
    found: list[int] = []
    todo = list(tree.get(listener, []))
    while todo:
        pid = todo.pop()
        if _comm(pid).startswith("sshd"):
            found.append(pid)
            todo.extend(tree.get(pid, []))
    return found


@contextlib.contextmanager
def run_sshd(folder: Path, *, forwarding: bool = False, login_rc: Path | None = None) -> Iterator[SSHServer]:
    """Run ``/usr/sbin/sshd -D -e`` on 127.0.0.1 with keys and config written to ``folder``.

    Plain code, so benchmarks start the same server the tests do. On exit every
    connection is dropped and sshd is stopped. With `forwarding`, it allows what a hostile
    generator host would: agent and TCP forwarding. With `login_rc`, that file stands for
    the user's ``~/.bashrc`` in every session (bound over it in sshd's own mount namespace).
    """
    host_key, identity = _server_key_setup(folder)
    with contextlib.suppress(PermissionError):
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    log = folder / "sshd.log"
    for _attempt in range(5):
        port = _free_port()
        config = _sshd_config(folder, port, forwarding)
        with log.open("wb") as log_file:
            proc = subprocess.Popen(
                [*_with_login_rc(login_rc), SSHD, "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        if _listening(port, proc, log):
            break
    else:
        raise RuntimeError(f"sshd would not start:\n{log.read_text()}")
    known_hosts = folder / "known_hosts"
    known_hosts.write_text(known_hosts_line(port, host_key))

    def drop() -> None:
        for pid in sshd_connection_pids(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    try:
        yield SSHServer(
            kind="openssh",
            port=port,
            user=getpass.getuser(),
            identity=identity,
            known_hosts=known_hosts,
            fingerprint=host_key.get_fingerprint("sha256"),
            drop=drop,
        )
    finally:
        drop()
        deadline = time.monotonic() + 5
        while sshd_connection_pids(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _with_login_rc(rc: Path | None) -> list[str]:
    """The start of an argv that runs the rest with `rc` bound over the user's ~/.bashrc,
    in a mount namespace of its own (`unshare` execs it: the pid stays the program's)."""
    if rc is None:
        return []
    bashrc = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".bashrc"
    bind = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", bind, "sh", str(rc), str(bashrc)]


def _skip_or_fail(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def openssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    if not os.access(SSHD, os.X_OK):
        _skip_or_fail(f"{SSHD} is missing: install openssh-server")
    with run_sshd(tmp_path_factory.mktemp("openssh")) as server:
        yield server


@dataclass
class LoginShell:
    """What the talkative server's login shell does before the command: print `banner`
    (the file's bytes), and with `quits`, exit instead of running the command."""

    banner: Path
    quit_flag: Path

    def prints(self, data: bytes, *, quits: bool = False) -> None:
        self.banner.write_bytes(data)
        if quits:
            self.quit_flag.touch()
        else:
            self.quit_flag.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def talkative_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SSHServer, LoginShell]]:
    """sshd whose user's ~/.bashrc prints what `LoginShell.prints` was given, then goes on
    as the real one (`talkative_sshd` resets it for each test)."""
    if not os.access(SSHD, os.X_OK):
        _skip_or_fail(f"{SSHD} is missing: install openssh-server")
    user = pwd.getpwuid(os.getuid())
    bashrc = Path(user.pw_dir) / ".bashrc"
    if os.geteuid() != 0 or os.path.basename(user.pw_shell) != "bash" or not bashrc.is_file():
        pytest.skip(
            "a login shell's rc is stood in for as root, for a user whose shell is bash, over their ~/.bashrc"
        )
    folder = tmp_path_factory.mktemp("talkative")
    shell = LoginShell(folder / "banner", folder / "quit")
    rc = folder / "bashrc"
    rc.write_text(
        "# genjob's tests: a login shell that prints before the command (as an echo here,\n"
        "# conda's or Lmod's messages do), then the user's own rc.\n"
        f"cat {shlex.quote(str(shell.banner))} 2>/dev/null\n"
        f"[ -e {shlex.quote(str(shell.quit_flag))} ] && exit 0\n" + bashrc.read_text()
    )
    with run_sshd(folder / "sshd", login_rc=rc) as server:
        yield server, shell


@pytest.fixture
def talkative_sshd(talkative_server: tuple[SSHServer, LoginShell]) -> Iterator[tuple[SSHServer, LoginShell]]:
    server, shell = talkative_server
    shell.prints(b"")
    yield server, shell
    shell.prints(b"")
