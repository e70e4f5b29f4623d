"""The system-call filter a sandboxed command runs under: no unix socket of its own.

A read-only bind does not stop ``connect()`` on a socket file, and a unix socket outside
the sandbox is a way out of it (an ssh-agent's, a user's ``/run/user/<uid>/bus``, or
``docker.sock``, which is root on the machine). So a sandboxed command may not make an
``AF_UNIX`` socket at all:
 - ``socket(AF_UNIX, ...)`` fails with EPERM; every other family works as before (the
   sandbox's network namespace decides what those reach);
 - ``socketpair()`` still makes stream and seqpacket pairs (asyncio's self-pipe, a
   subprocess's pipes): they are born connected to each other and cannot be pointed
   elsewhere. A datagram pair could (``sendto()`` takes an address), so it fails too;
 - ``io_uring_setup`` fails with EPERM: io_uring makes sockets without ``socket()``;
 - a system call made through another ABI kills the process: on x86_64 the x32 calls
   (numbers with bit 0x40000000) and the i386 ones (``int 0x80``, whose ``socketcall``
   makes sockets under another number), on aarch64 the 32-bit ARM ones.

The limit that comes with it: a program that needs a unix socket of its own inside the
sandbox (a test that starts a server on one, ``multiprocessing.Manager``) fails there,
with "Operation not permitted" from ``socket()``.

The filter is classic BPF (``struct sock_filter``: 8 bytes an instruction), built here
for the architectures of `ARCHES`, and handed to bwrap (``--add-seccomp-fd``).
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

# Classic BPF instruction classes and modes (linux/bpf_common.h).
_LD_W_ABS = 0x00 | 0x00 | 0x20
_JEQ_K = 0x05 | 0x10 | 0x00
_JSET_K = 0x05 | 0x40 | 0x00
_AND_K = 0x04 | 0x50 | 0x00
_RET_K = 0x06 | 0x00
# What a filter returns (linux/seccomp.h).
_KILL_PROCESS = 0x80000000
_ALLOW = 0x7FFF0000
_DENY = 0x00050000 | errno.EPERM  # SECCOMP_RET_ERRNO with EPERM
# Offsets in struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6].
_NR, _ARCH, _ARGS = 0, 4, 16
_AF_UNIX = 1
_SOCK_TYPE_MASK = 0xF
_CONNECTED_PAIRS = (1, 5)  # SOCK_STREAM, SOCK_SEQPACKET
_X32_BIT = 0x40000000


@dataclass(frozen=True)
class Arch:
    """One architecture's numbers: its audit tag and the calls the filter judges."""

    machine: str
    audit: int
    socket: int
    socketpair: int
    io_uring_setup: int
    has_x32: bool = False


# AUDIT_ARCH_* is the ELF machine with the 64-bit and little-endian bits (linux/audit.h).
ARCHES = {
    "x86_64": Arch("x86_64", 0xC000003E, socket=41, socketpair=53, io_uring_setup=425, has_x32=True),
    "aarch64": Arch("aarch64", 0xC00000B7, socket=198, socketpair=199, io_uring_setup=425),
}
# Other names the same machines go by.
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def native() -> Arch | None:
    """This machine's architecture, or None when genjob has no filter for it."""
    machine = platform.machine().lower()
    return ARCHES.get(_ALIASES.get(machine, machine))


def _op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(arch: Arch) -> bytes:
    """The filter for `arch`, as bwrap reads it: the packed instructions, nothing else.

    Jumps count the instructions they skip, so each test below jumps to one of the
    three returns at the end, whose positions are counted back from the end.
    """
    body: list[tuple[int, int, str | None, str | None]] = [
        (_LD_W_ABS, _ARCH, None, None),
        (_JEQ_K, arch.audit, None, "kill"),
        (_LD_W_ABS, _NR, None, None),
    ]
    if arch.has_x32:
        body.append((_JSET_K, _X32_BIT, "kill", None))
    body += [
        (_JEQ_K, arch.io_uring_setup, "deny", None),
        (_JEQ_K, arch.socketpair, "pair", None),
        (_JEQ_K, arch.socket, None, "allow"),
        # socket(): its first argument, the family (an int: the low half on little-endian).
        (_LD_W_ABS, _ARGS, None, None),
        (_JEQ_K, _AF_UNIX, "deny", "allow"),
    ]
    pair = [
        # socketpair(): its second argument, the type, without SOCK_NONBLOCK | SOCK_CLOEXEC.
        (_LD_W_ABS, _ARGS + 8, None, None),
        (_AND_K, _SOCK_TYPE_MASK, None, None),
        (_JEQ_K, _CONNECTED_PAIRS[0], "allow", None),
        (_JEQ_K, _CONNECTED_PAIRS[1], "allow", "deny"),
    ]
    ends = {"allow": _ALLOW, "deny": _DENY, "kill": _KILL_PROCESS}
    steps = body + pair
    where = {"pair": len(body)} | {name: len(steps) + i for i, name in enumerate(ends)}
    out = []
    for at, (code, k, jt, jf) in enumerate(steps):
        out.append(_op(code, k, _skip(where, at, jt), _skip(where, at, jf)))
    out += [_op(_RET_K, value) for value in ends.values()]
    return b"".join(out)


def _skip(where: dict[str, int], at: int, target: str | None) -> int:
    """How many instructions a jump at `at` skips to reach `target` (None: the next one)."""
    if target is None:
        return 0
    return where[target] - at - 1
