"""A private Docker daemon for the tests that run jobs through `docker exec -i` and
`docker run --rm -i`.

Debian's `docker.io` 20.10: `dockerd` with its data, its exec root (where it starts its
own containerd), its config file and its one unix socket in a folder of its own, never
the machine's /var/lib/docker or /var/run/docker.sock and never a TCP address; no
iptables, no bridge (every container runs with `--network=none`), the cgroupfs driver.
One daemon per test session (per pytest-xdist worker; the tests that take it share one
worker, `DOCKER_GROUP`): it answers in about a second.

There is no registry. The image is imported from a root filesystem of a few empty
folders and the merged-/usr links (`bin -> usr/bin`, ...), and each container gets this
machine's `/usr` and `/etc`, the tests' Python and the checkout read-only and `/tmp`
writable, as bwrap gets them in `shipkit.bwrap_argv`: a generator's absolute paths (the
interpreter, a report file, the runner's workspace) mean the same on both sides.

`docker_daemon` skips, with dockerd's own last words, when the daemon cannot start here
(not installed, no privileges, cgroup trouble): a machine without it never fails.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# The xdist group of every test that takes the daemon: one worker runs them all, so one
# daemon starts in a whole run (`--dist loadgroup`, the project's default).
DOCKER_GROUP = "docker"
IMAGE = "gen-image:1"  # the name the hosts topic's Docker example runs
ROOT = Path(__file__).resolve().parents[1]
# The top-level links of a merged-/usr Debian: the image's, so that /bin/sh and
# /lib64's loader resolve into the /usr bound from this machine.
USR_LINKS = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}
EMPTY_FOLDERS = ("usr", "etc", "tmp", "proc", "sys", "dev", "root", "run", "var/tmp")
START_WAIT = 30.0
STOP_WAIT = 20.0
# containerd, started by dockerd, refuses to run under a very high nofile limit on some
# kernels; this is the limit it is known to start with.
NOFILE = 20000


@dataclass(frozen=True)
class DockerDaemon:
    folder: Path
    socket: Path
    container: str  # a long-running container for `docker exec -i`, in this machine's pids

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    @property
    def env(self) -> dict[str, str]:
        """This process's environment, pointed at the daemon: what `docker` needs."""
        return {**os.environ, "DOCKER_HOST": self.host, "DOCKER_CONFIG": str(self.folder / "client")}

    def docker(self, *args: str) -> str:
        """Run the docker client against the daemon; its stdout."""
        done = subprocess.run(["docker", *args], env=self.env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def containers(self) -> list[str]:
        """The full ids of every container the daemon holds, running or not."""
        return self.docker("ps", "--all", "--no-trunc", "--quiet").split()

    def processes(self, container: str) -> list[str]:
        """The command lines running in `container` (`docker top`), its init's included."""
        lines = self.docker("top", container, "-o", "pid,args").splitlines()[1:]
        return [line.split(None, 1)[1] for line in lines if len(line.split(None, 1)) == 2]


def mounts() -> list[str]:
    """`docker run` options binding what a generator of the tests' needs: this machine's
    /usr and /etc, the tests' Python (its venv and the interpreter under it) and the
    checkout read-only, /tmp writable."""
    wanted = {Path("/usr"), Path("/etc"), Path(sys.prefix), Path(sys.base_prefix), ROOT}
    shared = sorted(path for path in wanted if not any(other in path.parents for other in wanted))
    return [*(f"--volume={path}:{path}:ro" for path in shared), "--volume=/tmp:/tmp"]


def run_argv(*options: str, image: str = IMAGE) -> list[str]:
    """The hosts topic's `docker run --rm -i` line for the test image, with `options`
    (the bind mounts, `--pid=host`, ...) before the image."""
    return ["docker", "run", "--rm", "-i", "--network=none", *mounts(), *options, image]


def exec_argv(container: str) -> list[str]:
    return ["docker", "exec", "-i", container]


def _rootfs() -> bytes:
    """A tar of the image's root: empty folders and the merged-/usr links."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in EMPTY_FOLDERS:
            folder = tarfile.TarInfo(name)
            folder.type, folder.mode = tarfile.DIRTYPE, 0o1777 if "tmp" in name else 0o755
            tar.addfile(folder)
        for name, target in USR_LINKS.items():
            link = tarfile.TarInfo(name)
            link.type, link.linkname = tarfile.SYMTYPE, target
            tar.addfile(link)
    return buffer.getvalue()


def _last_words(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1] if lines else "(it printed nothing)"


def _dockerd_argv(folder: Path) -> list[str]:
    config = folder / "daemon.json"
    config.write_text("{}\n")
    dockerd = [
        "dockerd",
        f"--config-file={config}",
        f"--data-root={folder / 'data'}",
        f"--exec-root={folder / 'exec'}",
        f"--pidfile={folder / 'dockerd.pid'}",
        f"--host=unix://{folder / 'docker.sock'}",
        "--iptables=false",
        "--ip-masq=false",
        "--bridge=none",
        "--exec-opt=native.cgroupdriver=cgroupfs",
        "--shutdown-timeout=1",
    ]
    lower = f'[ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -le {NOFILE} ] || ulimit -n {NOFILE}'
    return ["/bin/sh", "-c", f'{lower}; exec "$@"', "dockerd", *dockerd]


def _wait_ready(daemon: DockerDaemon, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Wait for the daemon to answer on its socket; RuntimeError with its last words if
    it exits or never does."""
    deadline = time.monotonic() + START_WAIT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"dockerd exited with status {proc.returncode}: {_last_words(log)}")
        if daemon.socket.exists():
            with contextlib.suppress(RuntimeError, subprocess.SubprocessError):
                daemon.docker("version", "--format", "{{.Server.Version}}")
                return
        time.sleep(0.05)
    raise RuntimeError(f"dockerd did not answer within {START_WAIT:.0f} s: {_last_words(log)}")


def _stop(daemon: DockerDaemon, proc: subprocess.Popen[bytes]) -> None:
    """Remove every container (so that no mount or shim outlives the daemon), then stop
    dockerd, which stops its containerd."""
    with contextlib.suppress(RuntimeError, OSError, subprocess.SubprocessError):
        if ids := daemon.containers():
            daemon.docker("rm", "--force", "--volumes", *ids)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(STOP_WAIT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _unmount_left(folder: Path) -> None:
    """Lazily unmount whatever a killed daemon left mounted under `folder`, deepest first,
    so that the folder can be removed."""
    with open("/proc/self/mountinfo") as mountinfo:
        points = [line.split()[4] for line in mountinfo]
    for point in sorted((p for p in points if p.startswith(f"{folder}/")), reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


@contextlib.contextmanager
def run_daemon() -> Iterator[DockerDaemon]:
    """Start a daemon in a folder of its own with the test image and a long-running
    container; stop it and remove the folder after. RuntimeError when it cannot start.

    The folder is under /tmp with a short name: a unix socket's path is at most 107 bytes,
    and containerd's sockets live under the exec root."""
    folder = Path(tempfile.mkdtemp(prefix="genjob-docker-", dir="/tmp"))
    (folder / "client").mkdir()
    log = folder / "dockerd.log"
    daemon = DockerDaemon(folder, folder / "docker.sock", "genjob-box")
    try:
        with log.open("wb") as out:
            proc = subprocess.Popen(
                _dockerd_argv(folder),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        try:
            _wait_ready(daemon, proc, log)
            subprocess.run(
                ["docker", "import", "-", IMAGE],
                input=_rootfs(),
                env=daemon.env,
                capture_output=True,
                check=True,
            )
            box = ["--detach", f"--name={daemon.container}", "--network=none", "--pid=host", *mounts()]
            daemon.docker("run", *box, IMAGE, "sleep", "infinity")
            yield daemon
        finally:
            _stop(daemon, proc)
    finally:
        _unmount_left(folder)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def docker_daemon() -> Iterator[DockerDaemon]:
    missing = [name for name in ("dockerd", "docker") if shutil.which(name) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} missing: install docker.io")
    try:
        with run_daemon() as daemon:
            yield daemon
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        reason = (
            exc.stderr.decode(errors="replace").strip()
            if isinstance(exc, subprocess.CalledProcessError)
            else exc
        )
        pytest.skip(f"no Docker daemon here: {reason}")


@pytest.fixture
def docker(docker_daemon: DockerDaemon, monkeypatch: pytest.MonkeyPatch) -> DockerDaemon:
    """The session's daemon, with DOCKER_HOST set for this test: `docker`, and every
    genjob the test starts (a host's cleanup among them), reach it."""
    for name, value in docker_daemon.env.items():
        if name in ("DOCKER_HOST", "DOCKER_CONFIG"):
            monkeypatch.setenv(name, value)
    return docker_daemon


STANDIN = Path(__file__).with_name("kubectl_standin.py")


def put_kubectl_first(
    folder: Path, monkeypatch: pytest.MonkeyPatch, container: str, pods: dict[str, str]
) -> None:
    """Put the stand-in `kubectl` (`kubectl_standin`) first on PATH, running its commands
    in `container`; `pods` maps "NAMESPACE TARGET CONTAINER" to the pod name it says
    the command ran in."""
    folder.mkdir(exist_ok=True)
    (folder / "kubectl").symlink_to(STANDIN)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STANDIN_CONTAINER", container)
    monkeypatch.setenv("STANDIN_PODS", json.dumps(pods))
