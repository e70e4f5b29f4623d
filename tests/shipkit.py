"""Helpers the worker-plane tests share: host configs, generators, processes, the CLI.

The SSH servers run on this machine, so a generator's absolute paths (interpreter,
scripts, report files) mean the same on every transport.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from corekit import receive, tree_state
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from ssh_servers import SSHServer

from core.errors import VerificationFailed
from core.model.models import Job
from core.plan.mint import build_job
from core.remote.rules import HELLO
from core.remote.runner import write_tar
from core.review.apply_job import apply_job
from core.review.consent import allow_as_written
from core.review.verify import verify
from core.store.config import load_config
from core.store.events import attempts
from core.store.layout import Layout
from core.store.overlaps import in_flight
from core.store.procfs import stat_fields
from core.store.queue import enqueue, locate

ROOT = Path(__file__).resolve().parents[1]
PY = shlex.quote(sys.executable)
GENJOB = str(Path(sys.executable).parent / "genjob")
# The demo generator on any host: PYTHONPATH is set in the command line itself, since an
# SSH session's environment is the server's, not ours.
DEMO = f"PYTHONPATH={shlex.quote(str(ROOT))} {PY} -m core.remote.demo_generator"
# The transports every worker-plane contract runs over: the local subprocess, asyncssh to
# an asyncssh server and to sshd, and the command transport through OpenSSH's own client
# (to sshd) and through bwrap (a local "remote shell" that execs an argv).
KINDS = ["local", "asyncssh", "openssh", "command-openssh", "command-bwrap"]
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "genjob tests",
    "GIT_AUTHOR_EMAIL": "tests@genjob.invalid",
    "GIT_COMMITTER_NAME": "genjob tests",
    "GIT_COMMITTER_EMAIL": "tests@genjob.invalid",
}


def toml_str(value: str) -> str:
    """A TOML basic string (JSON's escapes are valid TOML for ASCII-escaped text)."""
    return json.dumps(value, ensure_ascii=True)


def openssh_argv(server: SSHServer, known_hosts: Path | str | None = None) -> list[str]:
    """OpenSSH's client to `server`, reading no config file, with the test's identity and
    known_hosts, refusing any key it does not know."""
    return [
        "ssh",
        "-F",
        "/dev/null",
        "-i",
        str(server.identity),
        "-o",
        f"UserKnownHostsFile={known_hosts or server.known_hosts}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-p",
        str(server.port),
        "-T",
        server.address,
    ]


def bwrap_argv() -> list[str]:
    """bwrap as a local remote shell: the whole machine read-only, /tmp (where the tests'
    folders and the runner's workspaces are) writable, no network, gone with its parent.
    It shares this machine's pids, so the tests can see what it started."""
    return [
        "bwrap",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--bind",
        "/tmp",
        "/tmp",
        "--unshare-net",
        "--die-with-parent",
        "--",
    ]


@dataclass(frozen=True)
class CommandHost:
    """A generator host reached through the command transport: OpenSSH's client to
    `server`, or bwrap when `server` is None."""

    server: SSHServer | None

    def argv(self, known_hosts: Path | None = None) -> list[str]:
        return openssh_argv(self.server, known_hosts) if self.server else bwrap_argv()

    def drop(self) -> None:
        """Kill every live connection to the SSH server from its side."""
        assert self.server is not None, "bwrap has no connection to drop"
        self.server.drop()


def host_block(
    name: str,
    server: SSHServer | CommandHost | None,
    generator: str,
    *,
    timeout: float = 30.0,
    concurrency: int = 1,
    known_hosts: Path | None = None,
    python: str | None = None,
    sandbox: str = "none",
) -> str:
    """One `[hosts.NAME]` table: the local transport for `server=None`, SSH to an
    `SSHServer`, the command transport for a `CommandHost`.

    A local host runs unsandboxed unless `sandbox` says otherwise: these generators are
    scripts in the test's folder that report pids and paths there, which a sandbox hides
    (the sandbox has tests of its own)."""
    lines = [f"[hosts.{name}]"]
    if server is None:
        lines += ['transport = "local"', f"sandbox = {toml_str(sandbox)}"]
    elif isinstance(server, CommandHost):
        argv = ", ".join(toml_str(a) for a in server.argv(known_hosts))
        lines += ['transport = "command"', f"command = [{argv}]"]
    else:
        lines += [
            'transport = "ssh"',
            f"address = {toml_str(server.address)}",
            f"port = {server.port}",
            f"identity = {toml_str(str(server.identity))}",
            f"known_hosts = {toml_str(str(known_hosts or server.known_hosts))}",
        ]
    if python is not None:
        lines.append(f"python = {toml_str(python)}")
    lines += [
        f"generator = {toml_str(generator)}",
        f"timeout = {float(timeout)}",
        f"concurrency = {concurrency}",
    ]
    return "\n".join(lines) + "\n"


def gated_host(repo: Layout, tmp_path: Path, concurrency: int = 1) -> Path:
    """One local host whose generator says "started", then waits for the gate file before
    it edits src/app.py: the test decides when its runs end."""
    gate = tmp_path / "gate"
    generator = (
        f"echo started; while [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.05; done; "
        "echo '# edited' >> src/app.py; echo edited"
    )
    write_config(repo, host_block("local", None, generator, timeout=300, concurrency=concurrency))
    return gate


def write_config(
    layout: Layout,
    *hosts: str,
    lease_ttl: float = 30.0,
    max_file_bytes: int = 1 << 20,
    require_signature: bool = True,
) -> None:
    """Replace `.gen/config.toml` with a policy, limits and the given host tables."""
    text = (
        "[policy]\n"
        f"require_signature = {'true' if require_signature else 'false'}\n"
        f"lease_ttl = {float(lease_ttl)}\n\n"
        "[limits]\n"
        f"max_file_bytes = {max_file_bytes}\n"
        f"max_total_bytes = {max_file_bytes * 8}\n"
        "max_files = 100\n"
        "max_tail_bytes = 8192\n\n"
    )
    layout.config.write_text(text + "\n".join(hosts))
    allow_as_written(layout)
    load_config(layout.config)


def script(folder: Path, name: str, code: str) -> str:
    """A generator command running `code` as a script file with this interpreter."""
    path = folder / f"{name}.py"
    path.write_text(code)
    return f"{PY} {shlex.quote(str(path))}"


def sleeper(folder: Path) -> tuple[str, Path]:
    """A generator shell that starts a child, records both pids and its workspace, says
    "started", then waits; being a shell, it gets that far well inside any timeout."""
    report = folder / "sleeper.txt"
    gen = (
        f"{PY} -c 'import time; time.sleep(600)' & "
        f'echo "$$ $! $(pwd)" > {shlex.quote(str(report))}; echo started; wait'
    )
    return gen, report


def endless_line(folder: Path, megabytes: int = 80) -> str:
    """A generator that writes `megabytes` MB without a newline, then a line "done"."""
    code = (
        "import sys\n"
        f"for _ in range({megabytes}):\n"
        "    sys.stdout.write('x' * (1 << 20))\n"
        "sys.stdout.write('\\ndone\\n')\n"
    )
    return script(folder, "endless_line", code)


def hang_once(folder: Path, output: str) -> tuple[str, Path]:
    """A generator that hangs the first time it runs (recording itself like `sleeper`)
    and on every later run writes `output` to src/app.py."""
    report = folder / "hang.txt"
    flag = folder / "hung-once"
    code = (
        "import os, time\n"
        f"if not os.path.exists({str(flag)!r}):\n"
        f"    open({str(flag)!r}, 'w').close()\n"
        f"    open({str(report)!r}, 'w').write(f'{{os.getpid()}} {{os.getpid()}} {{os.getcwd()}}\\n')\n"
        "    print('started', flush=True)\n"
        "    time.sleep(600)\n"
        f"open('src/app.py', 'w').write({output!r})\n"
    )
    return script(folder, "hang_once", code), report


# A stand-in for genjob's runner: it reads the preflight and the runner's source from its
# stdin, answers with the hello (the nonce that came after them, and the facts in its
# second argument), then sends the file named in its first as its result.
FAKE_RUNNER = f"""
import sys
stdin = sys.stdin.buffer
for _source in range(2):
    stdin.read(int(stdin.readline()))
nonce = stdin.readline().strip()
hello = {HELLO!r} + nonce + b" " + sys.argv[2].encode() + b"\\n"
sys.stdout.buffer.write(hello + open(sys.argv[1], "rb").read())
"""


def hostile_host(tmp: Path, name: str, stdout: bytes, facts: str = "{}") -> str:
    """A `[hosts.NAME]` command host that says `facts` in its hello and sends `stdout`
    back as its runner's result."""
    sent = tmp / f"{name}.out"
    sent.write_bytes(stdout)
    program = tmp / f"{name}.py"
    program.write_text(FAKE_RUNNER)
    argv = ", ".join(toml_str(a) for a in (sys.executable, str(program), str(sent), facts))
    return (
        f"[hosts.{name}]\n"
        'transport = "command"\n'
        f"command = [{argv}]\n"
        'command_mode = "argv"\n'
        'generator = "true"\n'
        "timeout = 1.0\n"
    )


def runner_result(**fields: object) -> bytes:
    """A runner's result tar with no outputs: `result.json` alone, `fields` in it."""
    body = {"exit_code": 0, "timed_out": False, "cancelled": False, "violations": [], "tail": ""}
    body.update({"error": None, "outputs": {}, **fields})
    return write_tar([("result.json", json.dumps(body).encode())])


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_dead(pids: list[int], limit: float = 30.0) -> list[int]:
    """Wait up to `limit` seconds for every one of `pids` to end; those still alive then."""
    deadline = time.monotonic() + limit
    while (living := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return living


def wait_for(predicate, what: str, limit: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def read_report(report: Path) -> tuple[list[int], Path]:
    """The pids and workspace a `sleeper` recorded, once it has written them."""
    wait_for(lambda: report.exists() and report.read_text().endswith("\n"), f"{report}")
    pid, child, workdir = report.read_text().split()
    return [int(pid), int(child)], Path(workdir)


def assert_stopped(report: Path) -> None:
    """Every process the sleeper recorded is gone, and so is its workspace."""
    pids, workdir = read_report(report)
    wait_for(lambda: not any(alive(p) for p in pids), f"generator processes {pids} to end")
    wait_for(lambda: not workdir.exists(), f"workspace {workdir} to be removed")


def worktree(root: Path) -> dict[str, str]:
    """Every entry of the working tree (outside `.gen/` and `.git/`) by kind, mode and hash."""
    return {
        rel: state for rel, state in tree_state(root).items() if rel.split(os.sep)[0] not in (".gen", ".git")
    }


def finished(layout: Layout, key: str) -> list[dict[str, object]]:
    return [a for a in attempts(layout, key) if a.get("event") == "finished"]


def evidence(layout: Layout, key: str, attempt: int) -> tuple[dict[str, object], bytes]:
    """The attempt's summary and its output log from `.gen/logs/<key>/`."""
    stem = layout.log_dir(key) / f"attempt-{attempt}"
    return json.loads(stem.with_suffix(".json").read_bytes()), stem.with_suffix(".log").read_bytes()


def assert_not_applyable(layout: Layout, job: Job, before: Mapping[str, str]) -> None:
    """A job whose receipt is not ok: nothing in the tree or out/, verify fails, apply refuses."""
    assert worktree(layout.root) == before
    assert not layout.out_dir(job.digest).exists()
    assert [p.name for p in layout.out.iterdir()] == []
    v = verify(layout, job, load_config(layout.config))
    assert not v.ok and "status" in [c.name for c in v.failures]
    try:
        apply_job(layout, job.key)
    except VerificationFailed as exc:
        assert "does not verify" in str(exc)
    else:
        raise AssertionError(f"apply of {job.key} went through")
    assert worktree(layout.root) == before
    assert not layout.job_file("applied", job.key).exists()


def genjob_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, **GIT_IDENTITY, **(extra or {})}


def genjob(
    *args: str, cwd: Path, input: bytes | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run the real `genjob` command in a subprocess; output is text, never checked here."""
    return subprocess.run(
        [GENJOB, *args],
        cwd=cwd,
        env=genjob_env(),
        input=input.decode() if input is not None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_genjob(*args: str, cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    """Start `genjob ARGS` in its own session (as a shell would run a foreground job),
    its output going to `log`."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [GENJOB, *args],
            cwd=cwd,
            env=genjob_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_process(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """Make sure a test's process is gone (used in cleanups)."""
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.wait(timeout=30)


def moved_serialized_jobs(
    layout: Layout, signer: Ed25519PrivateKey, called: Path, paths: tuple[str, ...] = ("src/app.py",)
) -> list[str]:
    """Under `policy.overlapping = "serialize"`, one local host whose generator touches
    `called`, and a queued job over each of `paths` whose inputs the older job they waited
    for changed (that one applied): shipped any way, each must be replayed before any
    model call."""
    write_config(layout, host_block("local", None, f"touch {shlex.quote(str(called))}; echo x >> src/app.py"))
    text = layout.config.read_text().replace("[policy]\n", '[policy]\noverlapping = "serialize"\n', 1)
    layout.config.write_text(text)
    allow_as_written(layout)
    older = build_job(layout, "Older.", list(paths))
    enqueue(layout, older)
    # Received before the others are minted: minted in the same second, they could sort first.
    assert receive(layout, older.key, {rel: b"older\n" for rel in paths}, signer).won
    newer = [build_job(layout, f"Newer over {rel}.", [rel]) for rel in paths]
    for job in newer:
        enqueue(layout, job)
    apply_job(layout, older.key)
    return [job.key for job in newer]


def replayed_before_any_call(layout: Layout, key: str, called: Path) -> str:
    """That `key` was closed naming its replay, with no model call made; the replay's key."""
    loc = locate(layout, key)
    assert loc.folder == "rejected", f"{key} is {loc.folder}"
    assert not called.exists(), "the generator ran on a stale base"
    fresh = [k for k, job in in_flight(layout).items() if getattr(job, "replay_of", None) == key]
    assert len(fresh) == 1
    return fresh[0]


def children_named(pid: int, name: str) -> list[int]:
    """The processes named `name` whose parent is `pid` (a genjob's `srun` or `docker`
    clients, each started in a session of its own)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = stat_fields(entry.name)
        try:
            comm = (entry / "comm").read_text().rstrip("\n")
        except OSError:
            continue
        if fields is not None and comm == name and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found
