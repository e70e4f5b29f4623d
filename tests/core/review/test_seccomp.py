"""The seccomp filter itself, for every architecture genjob has one for.

`test_unix_sockets.py` runs the filter of this machine under bwrap against real sockets.
Here each architecture's program is run, as the kernel would, by a small classic-BPF
interpreter over made-up system calls, so that aarch64's is judged on an x86_64
machine too; and a machine without a filter runs nothing.
"""

from __future__ import annotations

import errno
import socket
import struct
from pathlib import Path

import pytest

from core.review import sandbox, seccomp
from core.review.sandbox import Confinement, SandboxError, launch

ALLOW, KILL = 0x7FFF0000, 0x80000000
DENY = 0x00050000 | errno.EPERM
I386, ARM = 0x40000003, 0x40000028  # AUDIT_ARCH_I386, AUDIT_ARCH_ARM: other ABIs of these machines


def verdict(program: bytes, nr: int, arch: int, *args: int) -> int:
    """What `program` returns for system call `nr` with `args` (a classic-BPF machine
    that knows the few instructions a seccomp filter here uses)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    ops = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = ops[pc]
        pc += 1
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x54:  # BPF_ALU | BPF_AND | BPF_K
            acc &= k
        elif code == 0x15:  # BPF_JMP | BPF_JEQ | BPF_K
            pc += jt if acc == k else jf
        elif code == 0x45:  # BPF_JMP | BPF_JSET | BPF_K
            pc += jt if acc & k else jf
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        else:
            raise AssertionError(f"an instruction this filter should not hold: {code:#x}")


@pytest.mark.parametrize("name", sorted(seccomp.ARCHES))
def test_unix_sockets_io_uring_and_datagram_pairs_are_denied_and_nothing_else(name: str) -> None:
    arch = seccomp.ARCHES[name]
    program = seccomp.program(arch)
    native = arch.audit
    flags = socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
    assert verdict(program, arch.socket, native, socket.AF_UNIX, socket.SOCK_STREAM) == DENY
    assert verdict(program, arch.socket, native, socket.AF_UNIX, socket.SOCK_DGRAM | flags) == DENY
    assert verdict(program, arch.socket, native, socket.AF_INET, socket.SOCK_STREAM) == ALLOW
    assert verdict(program, arch.socket, native, socket.AF_NETLINK, socket.SOCK_RAW) == ALLOW
    # The family is an int: what the upper half of the register holds does not count.
    assert verdict(program, arch.socket, native, (1 << 32) | socket.AF_UNIX) == DENY
    for kind in (socket.SOCK_STREAM, socket.SOCK_SEQPACKET):
        assert verdict(program, arch.socketpair, native, socket.AF_UNIX, kind | flags) == ALLOW
    for kind in (socket.SOCK_DGRAM, socket.SOCK_RAW):  # SOCK_RAW is a datagram unix socket
        assert verdict(program, arch.socketpair, native, socket.AF_UNIX, kind) == DENY
    assert verdict(program, arch.io_uring_setup, native, 8, 0) == DENY
    assert verdict(program, 63, native) == ALLOW  # read() on aarch64, uname() on x86_64
    for other in (I386, ARM):
        assert verdict(program, arch.socket, other, socket.AF_INET) == KILL


def test_x32_calls_kill_on_x86_64() -> None:
    arch = seccomp.ARCHES["x86_64"]
    program = seccomp.program(arch)
    assert verdict(program, 0x40000000 | arch.socket, arch.audit, socket.AF_UNIX) == KILL
    assert verdict(program, 0x40000000 | 39, arch.audit) == KILL  # even getpid()


@pytest.mark.parametrize("machine", ["x86_64", "AMD64", "aarch64", "arm64"])
def test_this_machine_is_known_by_each_of_its_names(machine: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seccomp.platform, "machine", lambda: machine)
    found = seccomp.native()
    assert found is not None and found.machine in ("x86_64", "aarch64")


@pytest.mark.skipif(sandbox.tools().bwrap is None, reason="bwrap is not installed")
def test_without_a_filter_for_this_machine_nothing_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(seccomp.platform, "machine", lambda: "riscv64")
    monkeypatch.setattr(sandbox.platform, "machine", lambda: "riscv64")
    sandbox.system_call_filter.cache_clear()
    try:
        with pytest.raises(SandboxError) as err:
            launch(Confinement(tmp_path), ["true"])
    finally:
        sandbox.system_call_filter.cache_clear()
    assert str(err.value).startswith("no system-call filter for this machine (riscv64; genjob has one for ")
    assert str(err.value).endswith("nothing was run")
