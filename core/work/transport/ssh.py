"""Run the runner on a generator host over SSH (asyncssh client; any SSH server).

One connection per transport, opened on first use, shared by concurrent jobs (one SSH
session each) and reopened after a drop. Host keys are always checked against the
given known_hosts file and nothing else; no agent, no forwarding, no environment sent,
no config file read, publickey authentication with the one identity given, no
compression.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
from collections.abc import Awaitable
from pathlib import Path

import asyncssh

from core.work.transport.base import (
    STOP_WAIT,
    HostKeyError,
    OutputCallback,
    Prepared,
    ResultCallback,
    RunOutcome,
    Session,
    StartCallback,
    drive,
    remote_command,
)

# AES-GCM first: asyncssh does it in one AEAD call per packet (AES-NI where the CPU has
# it), about twice the throughput of its ChaCha20-Poly1305 on a bundle of 50 MB. Both are
# authenticated ciphers that OpenSSH offers by default; CTR modes remain for old servers.
ENCRYPTION_ALGS = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes256-ctr",
    "aes192-ctr",
    "aes128-ctr",
)

# How long a failed session open waits for its connection to finish closing.
CLOSE_GRACE = 1.0


def _split_address(address: str) -> tuple[str | None, str]:
    user, sep, host = address.rpartition("@")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host:
        raise ValueError(f"{address!r}: no host")
    return (user if sep else None), host


class SSHTransport:
    """Runs each job as ``python3 -I -S -c BOOTSTRAP`` in an SSH session on ``address``.

    ``address`` is ``user@host`` (or ``host``, for the local user name). ``slack`` is
    added to the header's timeout to bound a whole run, upload included.
    """

    def __init__(
        self,
        address: str,
        port: int,
        identity: Path | str,
        known_hosts: Path | str,
        connect_timeout: float = 15.0,
        *,
        python: str = "python3",
        slack: float = 60.0,
        keepalive_interval: float = 15.0,
    ) -> None:
        self.address = address
        self.user, self.host = _split_address(address)
        self.port = port
        self.identity = Path(identity).expanduser()
        self.known_hosts = Path(known_hosts).expanduser()
        self.connect_timeout = connect_timeout
        self.python = python
        self.slack = slack
        self.keepalive_interval = keepalive_interval
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()

    @property
    def _hostspec(self) -> str:
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    def _trusted(self) -> asyncssh.SSHKnownHosts:
        """The known_hosts file as loaded now; a missing file trusts nothing."""
        try:
            text = self.known_hosts.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = ""
        return asyncssh.import_known_hosts(text)

    async def _connect(self) -> asyncssh.SSHClientConnection:
        trusted = self._trusted()
        try:
            return await asyncssh.connect(
                self.host,
                self.port,
                username=self.user if self.user is not None else (),
                known_hosts=trusted,
                client_keys=[str(self.identity)],
                config=[],
                agent_path=None,
                agent_forwarding=False,
                x11_forwarding=False,
                preferred_auth="publickey",
                public_key_auth=True,
                password_auth=False,
                kbdint_auth=False,
                host_based_auth=False,
                gss_auth=False,
                gss_kex=False,
                env=None,
                send_env=None,
                request_pty=False,
                encryption_algs=ENCRYPTION_ALGS,
                compression_algs=("none",),
                connect_timeout=self.connect_timeout,
                keepalive_interval=self.keepalive_interval,
                keepalive_count_max=3,
            )
        except asyncssh.HostKeyNotVerifiable:
            raise await self._host_key_error(trusted) from None
        except asyncssh.KeyExchangeFailed:
            if self._known_keys(trusted):
                raise await self._host_key_error(trusted) from None
            raise

    def _known_keys(self, trusted: asyncssh.SSHKnownHosts) -> list[asyncssh.SSHKey]:
        return list(asyncssh.match_known_hosts(trusted, self.host, self.host, self.port)[0])

    async def _host_key_error(self, trusted: asyncssh.SSHKnownHosts) -> HostKeyError:
        try:
            key = await asyncio.wait_for(
                asyncssh.get_server_host_key(self.host, self.port, config=[]),
                self.connect_timeout,
            )
        except (OSError, asyncssh.Error, TimeoutError):
            key = None
        fingerprint = key.get_fingerprint("sha256") if key is not None else None
        presented = f"{key.get_algorithm()} {fingerprint}" if key is not None else "a key (unreadable)"
        path = shlex.quote(str(self.known_hosts))
        keyscan = f"ssh-keyscan -p {self.port} {shlex.quote(self.host)} >> {path}"
        if self._known_keys(trusted):
            return HostKeyError(
                f"host key for {self._hostspec} has CHANGED: {self.known_hosts} holds "
                f"another key, the server presents {presented}. If the change is "
                f"expected, replace it: ssh-keygen -R {shlex.quote(self._hostspec)} "
                f"-f {path} && {keyscan}",
                fingerprint,
            )
        return HostKeyError(
            f"host key for {self._hostspec} is not in {self.known_hosts}: the server "
            f"presents {presented}. Check that fingerprint with the host's owner, then "
            f"trust it: {keyscan}",
            fingerprint,
        )

    async def _connection(self) -> asyncssh.SSHClientConnection:
        """The shared connection, opened on first use and reopened once closed."""
        async with self._lock:
            if self._conn is None or self._conn.is_closed():
                self._conn = None
                self._conn = await self._connect()
            return self._conn

    async def _start(self) -> asyncssh.SSHClientProcess[bytes]:
        """Open a session; if the shared connection turns out to be gone, reopen it once.

        A refused session on a live connection (the server's session limit, say) is an
        error for this job only: the connection other jobs use is left alone.
        """
        command = remote_command(self.python)
        conn = await self._connection()
        try:
            return await conn.create_process(command, encoding=None)
        except (asyncssh.ChannelOpenError, asyncssh.DisconnectError, OSError):
            # A connection that was just lost fails new sessions at once but reports itself
            # closed only a loop turn later: give it a moment before calling it live.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(conn.wait_closed(), CLOSE_GRACE)
            if not conn.is_closed():
                raise
        conn = await self._connection()
        return await conn.create_process(command, encoding=None)

    async def run(
        self,
        job: Awaitable[Prepared],
        on_result: ResultCallback,
        on_output: OutputCallback | None = None,
        cancel: asyncio.Event | None = None,
        *,
        on_start: StartCallback | None = None,
    ) -> RunOutcome:
        try:
            proc = await self._start()
        except (OSError, asyncssh.Error, asyncssh.KeyImportError) as exc:
            reason = str(exc)
            if isinstance(exc, OSError) and exc.errno:
                reason = os.strerror(exc.errno) + (f": {exc.filename}" if exc.filename else "")
            return RunOutcome(0, b"", None, f"ssh {self.address} port {self.port}: {reason}")

        async def wait() -> int | None:
            await proc.wait()
            return proc.returncode

        async def stop() -> None:
            """TERM if the server honours it, then close the channel: the runner sees EOF
            on stdin either way and kills its generator."""
            with contextlib.suppress(OSError, asyncssh.Error):
                proc.send_signal("TERM")
            proc.close()
            with contextlib.suppress(TimeoutError, OSError, asyncssh.Error):
                await asyncio.wait_for(proc.wait_closed(), STOP_WAIT)

        session = Session(
            stdin=proc.stdin,
            stdout=proc.stdout,
            stderr=proc.stderr,
            wait=wait,
            stop=stop,
            lost=(asyncssh.Error,),
            python=self.python,
        )
        try:
            return await drive(session, job, on_result, on_output, cancel, self.slack, on_start)
        finally:
            proc.close()

    async def close(self) -> None:
        async with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            await conn.wait_closed()
