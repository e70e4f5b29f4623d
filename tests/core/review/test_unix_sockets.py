"""No sandboxed command reaches a unix socket outside its sandbox.

A read-only bind does not stop ``connect()`` on a socket file: an ssh-agent's socket in
a folder a check may read was reachable, and ``/run/user/<uid>/bus`` or ``docker.sock``
would be a full escape. Each test here puts a real listening socket where a command
could find it and tries to reach it: from Python's `socket`, from libc through ctypes,
through i386's ``socketcall`` (``int 0x80``), through a datagram socketpair, by an
abstract name; what a sandbox still needs (socketpair, asyncio, subprocesses) keeps
working. Real bwrap, real sockets, real checks and local generators.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from checkkit import CALC_BETTER, check, configure, project, received
from corekit import mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import toml_str, write_config

from core.review import checks, sandbox
from core.review.sandbox import Confinement, SandboxError, launch, run
from core.store.layout import Layout
from core.work.ship import ship

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(sandbox.bwrap_problem() is not None, reason="bwrap cannot run here"),
]
X86_64 = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86_64's other ABIs")

# Tries to reach the socket at argv[1] ("@name": an abstract one) and prints what
# happened, as one JSON line.
CONNECT = """\
import json, socket, sys
address = sys.argv[1].replace("@", "\\0", 1) if sys.argv[1].startswith("@") else sys.argv[1]
try:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(address)
        s.sendall(b"hello from the sandbox")
    print(json.dumps("connected"))
except OSError as exc:
    print(json.dumps(type(exc).__name__))
"""
# The same through libc itself, as a C program would.
CONNECT_LIBC = """\
import ctypes, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0)
if fd < 0:
    print(json.dumps(os.strerror(ctypes.get_errno())))
    sys.exit()
path = os.fsencode(sys.argv[1])
address = socket.AF_UNIX.to_bytes(2, sys.byteorder) + path + b"\\0"
done = libc.connect(fd, ctypes.c_char_p(address), len(address))
print(json.dumps("connected" if done == 0 else os.strerror(ctypes.get_errno())))
"""
# i386's socketcall(SYS_SOCKET, ...) made from this 64-bit process by `int 0x80`, from
# machine code in memory below 4 GiB; the socket it makes is then connected as usual.
CONNECT_I386 = """\
import ctypes, json, mmap, socket, struct, sys
memory = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40,  # MAP_32BIT
                   prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
base = ctypes.addressof(ctypes.c_char.from_buffer(memory))
code = (b"\\x53" + b"\\xb8" + struct.pack("<I", 102) + b"\\xbb" + struct.pack("<I", 1)
        + b"\\xb9" + struct.pack("<I", base + 64) + b"\\xcd\\x80" + b"\\x5b\\xc3")
memory[: len(code)] = code  # push rbx; socketcall(SYS_SOCKET, base + 64); pop rbx; ret
memory[64:76] = struct.pack("<III", socket.AF_UNIX, socket.SOCK_STREAM, 0)
fd = ctypes.CFUNCTYPE(ctypes.c_int)(base)()
if fd < 0:
    print(json.dumps(f"socketcall failed: {-fd}"))
    sys.exit()
with socket.socket(fileno=fd) as s:
    s.connect(sys.argv[1])
print(json.dumps("connected"))
"""
# A datagram pair could be pointed anywhere: sendto() takes an address.
SEND_FROM_A_PAIR = """\
import json, socket, sys
try:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.sendto(b"hello from the sandbox", sys.argv[1])
    print(json.dumps("sent"))
except OSError as exc:
    print(json.dumps(type(exc).__name__))
"""
# What a sandbox keeps: stream and seqpacket pairs, an event loop (its self-pipe is a
# socketpair), a subprocess it talks to, and sockets of other families.
STILL_WORKS = """\
import asyncio, json, socket
found = {}
for kind in (socket.SOCK_STREAM, socket.SOCK_SEQPACKET):
    a, b = socket.socketpair(socket.AF_UNIX, kind)
    a.sendall(b"x")
    found[kind.name] = b.recv(1).decode()
async def child():
    proc = await asyncio.create_subprocess_exec(
        "python3", "-c",
        "import socket; a, b = socket.socketpair(); a.sendall(b'y'); print(b.recv(1).decode())",
        stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    return out.decode().strip()
found["subprocess"] = asyncio.run(child())
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    s.bind(("127.0.0.1", 0))
    found["inet"] = "bound"
print(json.dumps(found, sort_keys=True))
"""
IO_URING = """\
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.syscall(425, 8, ctypes.create_string_buffer(128))  # io_uring_setup(8, &params)
print(json.dumps("made a ring" if fd >= 0 else os.strerror(ctypes.get_errno())))
"""
X32 = """\
import ctypes, json
ctypes.CDLL(None, use_errno=True).syscall(0x40000000 | 41, 1, 1, 0)  # x32 socket(AF_UNIX, ...)
print(json.dumps("survived"))
"""


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder a sandbox may read (short: a socket path has at most 107 bytes)."""
    path = Path("/tmp") / f"genjob-sock-{secrets.token_hex(4)}"
    path.mkdir()
    yield path
    for entry in path.iterdir():
        entry.unlink()
    path.rmdir()


@pytest.fixture
def box(tmp_path: Path) -> Path:
    path = tmp_path / "box"
    path.mkdir()
    return path


@contextlib.contextmanager
def listening(address: str, kind: socket.SocketKind = socket.SOCK_STREAM) -> Iterator[socket.socket]:
    """A unix socket at `address` (abstract when it starts with NUL) that nothing reads."""
    with socket.socket(socket.AF_UNIX, kind) as server:
        server.bind(address)
        if kind == socket.SOCK_STREAM:
            server.listen(8)
        server.setblocking(False)
        yield server


def reached(server: socket.socket) -> bool:
    """Whether anything connected to `server`, or sent to it."""
    try:
        if server.type == socket.SOCK_STREAM:
            conn, _ = server.accept()
            conn.close()
        else:
            server.recv(64)
    except BlockingIOError:
        return False
    return True


def python_in(box: Path, code: str, *args: str, **spec: Any) -> sandbox.Finished:
    how = launch(Confinement(box, **spec), ["python3", "-c", code, *args])
    return asyncio.run(run(how, 60))


def said(done: sandbox.Finished) -> Any:
    lines = done.tail.decode().strip().splitlines()
    assert lines, f"no output (exit {done.exit_code})"
    return json.loads(lines[-1])


@pytest.mark.parametrize("code", [CONNECT, CONNECT_LIBC], ids=["python", "libc"])
def test_a_socket_in_a_read_only_folder_cannot_be_connected_to(box: Path, folder: Path, code: str) -> None:
    address = str(folder / "agent.sock")
    with listening(address) as server:
        done = python_in(box, code, address, read_only=(folder,))
        assert said(done) in ("PermissionError", os.strerror(1)), done.tail
        assert not reached(server)


@X86_64
def test_i386_socketcall_kills_the_process_before_it_has_a_socket(box: Path, folder: Path) -> None:
    address = str(folder / "agent.sock")
    with listening(address) as server:
        outside = subprocess.run([sys.executable, "-c", CONNECT_I386, address], capture_output=True)
        if b"connected" not in outside.stdout:
            pytest.skip(f"no i386 system calls on this kernel: {outside.stdout!r}")
        assert reached(server), "unconfined, the same code connects"
        done = python_in(box, CONNECT_I386, address, read_only=(folder,))
        assert done.exit_code == 128 + signal.SIGSYS, done.tail
        assert not reached(server)


@X86_64
def test_an_x32_system_call_kills_the_process(box: Path) -> None:
    done = python_in(box, X32)
    assert done.exit_code == 128 + signal.SIGSYS, done.tail


def test_io_uring_cannot_be_set_up(box: Path) -> None:
    """io_uring makes sockets of its own (IORING_OP_SOCKET), without socket()."""
    assert said(python_in(box, IO_URING)) == os.strerror(1)


def test_a_datagram_socketpair_cannot_send_to_a_socket_outside(box: Path, folder: Path) -> None:
    address = str(folder / "log.sock")
    with listening(address, socket.SOCK_DGRAM) as server:
        done = python_in(box, SEND_FROM_A_PAIR, address, read_only=(folder,))
        assert said(done) == "PermissionError", done.tail
        assert not reached(server)


@pytest.mark.parametrize("network", [False, True])
def test_an_abstract_socket_is_out_of_reach_shared_network_or_not(box: Path, network: bool) -> None:
    """Abstract names belong to a network namespace: a sandbox with no network has one of
    its own, where the name is not even listed; one that shares the machine's network
    sees it listed, and the filter alone keeps it out."""
    name = f"genjob-test-{secrets.token_hex(8)}"
    with listening(f"\0{name}") as server:
        listed = python_in(box, "print(open('/proc/net/unix').read())", network=network)
        assert (f"@{name}" in listed.tail.decode()) == network
        done = python_in(box, CONNECT, f"@{name}", network=network)
        assert said(done) == "PermissionError", done.tail
        assert not reached(server)


def test_socketpairs_asyncio_subprocesses_and_other_families_still_work(box: Path) -> None:
    done = python_in(box, STILL_WORKS)
    assert done.exit_code == 0, done.tail
    assert said(done) == {"SOCK_SEQPACKET": "x", "SOCK_STREAM": "x", "inet": "bound", "subprocess": "y"}


def test_a_socket_named_as_a_read_only_path_is_refused(box: Path, folder: Path) -> None:
    address = folder / "agent.sock"
    with listening(str(address)) as server:
        with pytest.raises(
            SandboxError, match=rf"read-only path {address} is not a folder or a regular file"
        ):
            python_in(box, CONNECT, str(address), read_only=(address,))
        assert not reached(server)


def test_the_sandbox_says_it_has_no_unix_sockets(box: Path) -> None:
    how = launch(Confinement(box), ["true"])
    how.close()
    assert "no unix sockets" in how.describe


# --- checks and local generators ------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Layout:
    return project(tmp_path / "repo")


def check_said(repo: Layout, key: str) -> Any:
    [ran] = check(repo, key)
    assert ran.record is not None
    return json.loads(ran.record.tail.strip().splitlines()[-1])


def test_a_check_cannot_connect_to_a_socket_in_its_read_only_folder(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    run_dir = repo.root / "run"
    run_dir.mkdir()
    (repo.root / "probe.py").write_text(CONNECT)
    with listening(str(run_dir / "s")) as server:
        configure(repo, {"tests": 'run = "python3 probe.py run/s"\nread_only = ["run", "probe.py"]'})
        job = received(repo, signer, {"calc.py": CALC_BETTER})
        assert check_said(repo, job.key) == "PermissionError"
        assert not reached(server)


@pytest.mark.parametrize("mode", ["overlay", "copy"])
def test_a_check_cannot_connect_to_a_socket_put_in_its_scratch_tree(
    repo: Layout, signer: Ed25519PrivateKey, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """A socket bound in the scratch tree from outside, as the check starts: reached by a
    path from the tree the check runs in."""
    if mode == "copy":
        monkeypatch.setattr(sandbox, "overlay_problem", lambda near: "no overlay in this test")
    made_tree = checks.scratch_tree
    servers: list[socket.socket] = []

    @contextlib.contextmanager
    def with_a_socket(*args: Any, **kwargs: Any) -> Iterator[Any]:
        with made_tree(*args, **kwargs) as made:
            short = Path("/tmp") / f"genjob-tree-{secrets.token_hex(4)}"  # a socket path is short
            short.symlink_to(made.tree)
            try:
                with listening(str(short / "s")) as server:
                    servers.append(server)
                    yield made
                    assert not reached(server)
            finally:
                short.unlink()

    monkeypatch.setattr(checks, "scratch_tree", with_a_socket)
    configure(repo, {"tests": 'run = "python3 probe.py s"'})
    job = received(repo, signer, {"calc.py": CALC_BETTER, "probe.py": CONNECT.encode()}, new=["probe.py"])
    assert check_said(repo, job.key) == "PermissionError"
    assert len(servers) == 1


async def test_a_local_generator_cannot_connect_to_a_socket_in_its_read_only_folder(
    repo: Layout, signer: Ed25519PrivateKey, folder: Path
) -> None:
    script = folder / "probe.py"
    script.write_text(CONNECT)
    generator = f"python3 {script} {folder / 's'} > calc.py"
    write_config(
        repo,
        f'[hosts.gen]\ntransport = "local"\nsandbox = "bwrap"\ngenerator = {toml_str(generator)}\n'
        f"read_only = [{toml_str(str(folder))}]\ntimeout = 60\n",
    )
    job = mint(repo, paths=["calc.py"])
    with listening(str(folder / "s")) as server:
        res = await ship(repo, job.key, "gen", worker_id="tester")
        assert res.status == "ok", res.reason
        assert json.loads((repo.out_dir(job.digest) / "calc.py").read_text()) == "PermissionError"
        assert not reached(server)
