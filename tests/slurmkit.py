"""A one-node Slurm cluster on 127.0.0.1 for the tests that run jobs through `srun`.

Debian's `slurm-wlm` 22.05 and `munge`: `munged` (as the munge user, with a key of its
own), `slurmctld -i` and `slurmd -N localhost`, each with PID, spool, state, log and socket
paths in a folder of the cluster's own, and ports picked free. One cluster per test
session (per pytest-xdist worker): it starts in well under a second. The node has this
machine's CPUs, and its one partition `gen` shares them (`OverSubscribe=FORCE:8`), so a
test's steps never wait for each other. The daemons listen on every address (22.05 has no
setting for that); nothing but loopback traffic is ever sent to them.

`slurm_cluster` skips when the daemons are not installed, and fails under CI, where
`.ci/run` installs them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "srun", "squeue", "scancel")
PARTITION = "gen"
# The memory the node offers: what this machine has, less 1 GiB (slurmd refuses a node
# that claims more than it finds).
RESERVED_MB = 1024


@dataclass(frozen=True)
class SlurmCluster:
    folder: Path
    conf: Path

    @property
    def env(self) -> dict[str, str]:
        """This process's environment, pointed at the cluster: what `srun` and `scancel` need."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def srun(self, *options: str) -> list[str]:
        """The argv of a host's `command` that runs each job as one step on the partition."""
        return ["srun", "--quiet", f"--partition={PARTITION}", "--ntasks=1", *options]

    def run(self, *argv: str) -> str:
        """Run a Slurm client (`squeue`, `scancel`, ...) against the cluster; its stdout."""
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
        return done.stdout

    def jobs(self) -> list[str]:
        """The ids of the cluster's jobs that have not ended."""
        return self.run("squeue", "--noheader", "--format=%i").split()

    def running(self, job_id: str) -> bool:
        """Whether the job is RUNNING (not only still listed while it completes)."""
        return self.run("squeue", "--noheader", "--format=%T", f"--jobs={job_id}").strip() == "RUNNING"


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _node_memory_mb() -> int:
    with open("/proc/meminfo") as meminfo:
        total_kb = int(next(line for line in meminfo if line.startswith("MemTotal:")).split()[1])
    return max(total_kb // 1024 - RESERVED_MB, 512)


def _slurm_conf(folder: Path, munge_socket: Path) -> str:
    controller, node = _free_ports(2)
    return "\n".join(
        [
            f"ClusterName=genjob{os.getpid()}",
            "SlurmctldHost=localhost(127.0.0.1)",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={munge_socket}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SlurmUser=root",
            "MpiDefault=none",
            "ReturnToService=2",
            f"SlurmctldPort={controller}",
            f"SlurmdPort={node}",
            f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
            f"SlurmdPidFile={folder / 'slurmd.pid'}",
            f"SlurmdSpoolDir={folder / 'spool'}",
            f"StateSaveLocation={folder / 'state'}",
            f"SlurmctldLogFile={folder / 'slurmctld.log'}",
            f"SlurmdLogFile={folder / 'slurmd.log'}",
            f"NodeName=localhost NodeAddr=127.0.0.1 NodeHostname={socket.gethostname()} "
            f"CPUs={os.cpu_count() or 1} RealMemory={_node_memory_mb()} State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes=localhost Default=YES MaxTime=INFINITE State=UP "
            "OverSubscribe=FORCE:8",
            "",
        ]
    )


def _start_munge(folder: Path) -> Path:
    """munged as the munge user, with a fresh key; its socket."""
    munge = folder / "munge"
    munge.mkdir(mode=0o755)
    shutil.chown(munge, "munge", "munge")
    key = munge / "munge.key"
    subprocess.run(["mungekey", "--create", "--force", f"--keyfile={key}"], check=True, capture_output=True)
    shutil.chown(key, "munge", "munge")
    key.chmod(0o400)
    sock = munge / "munge.socket"
    subprocess.run(
        [
            "munged",
            f"--key-file={key}",
            f"--socket={sock}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={munge / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        ],
        check=True,
        capture_output=True,
        user="munge",
        group="munge",
    )
    return sock


def _wait_idle(cluster: SlurmCluster) -> None:
    """Wait for the node to take jobs; resume it if it came up drained."""
    deadline = time.monotonic() + 30
    state = ""
    while time.monotonic() < deadline:
        with contextlib.suppress(RuntimeError):
            state = cluster.run("sinfo", "--noheader", "--format=%T").strip()
        if state == "idle":
            return
        if state.startswith(("drain", "down")):
            with contextlib.suppress(RuntimeError):
                cluster.run("scontrol", "update", "NodeName=localhost", "State=RESUME")
        time.sleep(0.05)
    logs = "\n".join((cluster.folder / name).read_text()[-2000:] for name in ("slurmctld.log", "slurmd.log"))
    raise RuntimeError(f"the Slurm node never became idle (last state {state!r}):\n{logs}")


def _cancel_all(cluster: SlurmCluster) -> None:
    """Cancel every job and wait for them to end, so that no step outlives the cluster."""
    with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
        cluster.run("scancel", "--full", "--quiet", f"--partition={PARTITION}")
        deadline = time.monotonic() + 15
        while cluster.jobs() and time.monotonic() < deadline:
            time.sleep(0.05)


def _kill(pid_file: Path) -> None:
    """The daemon's state is thrown away with its folder: SIGKILL, not a slow shutdown."""
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
        os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)


@contextlib.contextmanager
def run_cluster() -> Iterator[SlurmCluster]:
    """Start a one-node cluster in a folder of its own; stop it and remove the folder after.

    The folder is outside pytest's temp folders, which only root may enter: munged runs as
    its own user and must reach its key and socket."""
    folder = Path(tempfile.mkdtemp(prefix="genjob-slurm-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        for name in ("spool", "state"):
            (folder / name).mkdir()
        conf = folder / "slurm.conf"
        conf.write_text(_slurm_conf(folder, _start_munge(folder)))
        cluster = SlurmCluster(folder, conf)
        try:
            subprocess.run(["slurmctld", "-i"], env=cluster.env, check=True, capture_output=True)
            subprocess.run(["slurmd", "-N", "localhost"], env=cluster.env, check=True, capture_output=True)
            _wait_idle(cluster)
            yield cluster
        finally:
            _cancel_all(cluster)
            for pid_file in ("slurmd.pid", "slurmctld.pid", "munge/munged.pid"):
                _kill(folder / pid_file)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing or os.geteuid() != 0:
        message = (
            f"{', '.join(missing)} missing: install slurm-wlm and munge"
            if missing
            else "a test Slurm cluster needs root (slurmd runs its steps as their users)"
        )
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with run_cluster() as cluster:
        yield cluster


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch) -> SlurmCluster:
    """The session's cluster, with SLURM_CONF set for this test: `srun` and `scancel`,
    and every genjob the test starts, reach it."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    return slurm_cluster
