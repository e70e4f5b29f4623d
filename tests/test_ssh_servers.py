"""The suite's own SSH servers are safe to start from several test processes at once."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import ssh_servers
from ssh_servers import HOST, SSHD, run_sshd


@pytest.fixture
def impostor() -> Iterator[int]:
    """A port held by another process's SSH server: it answers each connection with a banner."""
    stop = threading.Event()
    with socket.create_server((HOST, 0)) as server:
        server.settimeout(0.1)

        def answer() -> None:
            while not stop.is_set():
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                with conn:
                    conn.sendall(b"SSH-2.0-another-test\r\n")

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        try:
            yield server.getsockname()[1]
        finally:
            stop.set()
            thread.join()


@pytest.mark.skipif(not os.access(SSHD, os.X_OK), reason=f"{SSHD} is missing")
def test_sshd_given_a_port_another_process_took_listens_on_another(
    tmp_path: Path, impostor: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    free = ssh_servers._free_port
    offered = iter([impostor])
    monkeypatch.setattr(ssh_servers, "_free_port", lambda: next(offered, None) or free())
    with run_sshd(tmp_path / "sshd") as server:
        assert server.port != impostor
        with socket.create_connection((HOST, server.port), timeout=10) as conn:
            assert conn.recv(64).startswith(b"SSH-2.0-OpenSSH")
        assert f"[{HOST}]:{server.port} " in server.known_hosts.read_text()
