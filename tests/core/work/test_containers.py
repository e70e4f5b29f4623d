"""The hosts topic's Docker and Kubernetes lines, run for real: `docker run --rm -i` and
`docker exec -i` on a private Docker daemon (`dockerkit`), and `kubectl exec -i` through a
stand-in `kubectl` that parses its line strictly and runs it with `docker exec -i`
(`kubectl_standin`). What the runner says about the container (its id, the pod's name) is
recorded; a cancel ends the container's process and a `--rm` container is removed; a
host's `cleanup = "docker rm -f {container_id}"` removes a container a dead worker left.

The containers here run in their own pids (no `--pid=host`), as the topic's lines do: what
runs in them is seen with `docker top`, and a `--rm` container with `docker ps --all`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from corekit import cli, mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from dockerkit import DOCKER_GROUP, IMAGE, DockerDaemon, mounts, put_kubectl_first, run_daemon
from shipkit import (
    children_named,
    genjob,
    script,
    sleeper,
    start_genjob,
    stop_process,
    toml_str,
    wait_for,
    write_config,
)

from core.model.lifecycle import State
from core.read.snapshot import take_snapshot
from core.store.events import attempts
from core.store.layout import Layout
from core.store.scheduler import CLEANED_UP, STARTED
from core.work.ship import ship
from core.work.transport import CommandTransport, JobSpec, run_job
from tui.reference import topic_text

pytestmark = [pytest.mark.timeout(180), pytest.mark.xdist_group(DOCKER_GROUP)]

POD = "generator-7d4b9c8f5-x2k4q"
CONTAINER_ID = re.compile(r"[0-9a-f]{64}")


def topic_host(host: str) -> dict[str, object]:
    """`[hosts.HOST]` in the hosts topic, as written there."""
    for block in re.findall(r"```toml\n(.*?)```", topic_text("hosts"), re.DOTALL):
        table = tomllib.loads(block).get("hosts", {}).get(host)
        if table is not None:
            return dict(table)
    raise AssertionError(f"the hosts topic has no [hosts.{host}]")


def topic_command(host: str) -> list[str]:
    command = topic_host(host)["command"]
    assert isinstance(command, list)
    return [str(word) for word in command]


def docker_run_line() -> list[str]:
    """The topic's `docker run --rm -i` line, with the bind mounts the test image needs
    (it holds no Python of its own) put before its image, which the test image is named."""
    argv = topic_command("boxes")
    assert argv[:4] == ["docker", "run", "--rm", "-i"] and argv[-1] == IMAGE
    return [*argv[:-1], *mounts(), argv[-1]]


def host(name: str, command: list[str], generator: str, cleanup: str | None = None) -> str:
    lines = [
        f"[hosts.{name}]",
        'transport = "command"',
        f"command = [{', '.join(toml_str(a) for a in command)}]",
        f"python = {toml_str(sys.executable)}",
        f"generator = {toml_str(generator)}",
        "timeout = 120.0",
    ]
    if cleanup is not None:
        lines.append(f"cleanup = {toml_str(cleanup)}")
    return "\n".join(lines) + "\n"


def facts_of(layout: Layout, key: str) -> dict[str, str]:
    [record] = [r for r in attempts(layout, key) if r.get("event") == STARTED]
    facts = record["facts"]
    assert isinstance(facts, dict)
    return facts


# A generator that says which container it ran in: docker names it in /etc/hostname.
HOSTNAME = "import os, shutil\nos.mkdir('src')\nshutil.copyfile('/etc/hostname', 'src/where.txt')\n"


@pytest.mark.parametrize("options", [[], ["--cgroupns=private"]])
async def test_the_topics_docker_run_line_records_its_container_and_removes_it(
    repo: Layout, signer: Ed25519PrivateKey, docker: DockerDaemon, tmp_path: Path, options: list[str]
) -> None:
    """The container's id is recorded whether its cgroup names it or (with a cgroup
    namespace of its own, docker's default on cgroup v2) only the files docker binds into
    it from its data root, which here is the test daemon's own folder."""
    argv = docker_run_line()
    write_config(repo, host("boxes", [*argv[:-1], *options, argv[-1]], script(tmp_path, "where", HOSTNAME)))
    job = mint(repo, "say where it ran", [], new=["src/where.txt"])
    res = await ship(repo, job.key, "boxes", worker_id="tester")
    assert (res.status, res.reason) == ("ok", None)
    facts = facts_of(repo, job.key)
    assert set(facts) == {"container_id"} and CONTAINER_ID.fullmatch(facts["container_id"])
    hostname = (repo.out_dir(job.digest) / "src/where.txt").read_text().strip()
    assert facts["container_id"].startswith(hostname), "the id of the container the job ran in"
    wait_for(lambda: facts["container_id"] not in docker.containers(), "the --rm container to be removed")
    shown = cli("show", job.key, root=repo.root).output
    assert f"run     attempt 1 on boxes: container_id={facts['container_id']}" in shown


async def test_docker_exec_records_the_running_containers_id(
    repo: Layout, signer: Ed25519PrivateKey, docker: DockerDaemon, tmp_path: Path
) -> None:
    write_config(
        repo, host("box", ["docker", "exec", "-i", docker.container], script(tmp_path, "where", HOSTNAME))
    )
    job = mint(repo, "say where it ran", [], new=["src/where.txt"])
    res = await ship(repo, job.key, "box", worker_id="tester")
    assert (res.status, res.reason) == ("ok", None)
    box = docker.docker("inspect", "--format", "{{.Id}}", docker.container).strip()
    assert facts_of(repo, job.key) == {"container_id": box}


async def test_the_topics_kubectl_line_records_the_pods_name(
    repo: Layout,
    signer: Ed25519PrivateKey,
    docker: DockerDaemon,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stand-in runs the line's command in the daemon's container as the pod
    `generator-...` of `deploy/generator`, container `generator`, in namespace `gen`."""
    put_kubectl_first(
        tmp_path / "bin", monkeypatch, docker.container, {"gen deploy/generator generator": POD}
    )
    write_config(repo, host("pods", topic_command("pods"), script(tmp_path, "where", HOSTNAME)))
    job = mint(repo, "say where it ran", [], new=["src/where.txt"])
    res = await ship(repo, job.key, "pods", worker_id="tester")
    assert (res.status, res.reason) == ("ok", None)
    box = docker.docker("inspect", "--format", "{{.Id}}", docker.container).strip()
    assert facts_of(repo, job.key) == {"pod_name": POD, "container_id": box}
    shown = cli("show", job.key, root=repo.root).output
    assert f"run     attempt 1 on pods: container_id={box} pod_name={POD}" in shown


@pytest.mark.parametrize(
    ("flags", "refusal"),
    [
        (["-it"], "error: flag '-it' refused (a terminal is never binary-clean) or unknown"),
        (["-i", "-t"], "error: flag '-t' refused (a terminal is never binary-clean) or unknown"),
        (
            ["--stdin", "--quiet"],
            "error: flag '--quiet' refused (a terminal is never binary-clean) or unknown",
        ),
        ([], "error: no -i: the command would get no stdin"),
    ],
)
def test_the_stand_in_kubectl_refuses_a_line_kubectl_would_run_otherwise(
    flags: list[str], refusal: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stand-in holds the topic's line to `kubectl exec -i` without a terminal: a line
    that asks for one, or that gives no stdin, fails in it rather than passing unseen."""
    put_kubectl_first(tmp_path / "bin", monkeypatch, "nothing", {"gen deploy/generator generator": POD})
    argv = ["kubectl", "exec", *flags, "-n", "gen", "deploy/generator", "-c", "generator", "--", "true"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr.strip()) == (1, refusal)


def spec(generator: str) -> JobSpec:
    return JobSpec(
        job_doc=json.dumps({"instruction": "x", "allowed_paths": ["a.py"]}).encode(),
        instruction="x",
        allowed_paths=["a.py"],
        files=lambda: {"a.py": b"a"},
        generator=generator,
        timeout=120,
    )


def sleeping_in(docker: DockerDaemon, container: str) -> bool:
    return any("time.sleep(600)" in line for line in docker.processes(container))


@pytest.mark.parametrize("line", ["run", "exec"])
async def test_a_cancel_ends_the_containers_process(line: str, docker: DockerDaemon, tmp_path: Path) -> None:
    """A cancel closes the client's stdin: the runner there stops its generator, and a
    `docker run --rm` container ends and is removed; a `docker exec` one runs on, with
    nothing of the job left in it."""
    gen, report = sleeper(tmp_path)
    argv = docker_run_line() if line == "run" else ["docker", "exec", "-i", docker.container]
    before = set(docker.containers())
    cancel = asyncio.Event()
    transport = CommandTransport(argv, python=sys.executable)
    running = asyncio.ensure_future(run_job(transport, spec(gen), tmp_path / "out", cancel=cancel))
    await asyncio.to_thread(wait_for, report.exists, "the generator to start")
    [container] = set(docker.containers()) - before if line == "run" else [docker.container]
    assert await asyncio.to_thread(sleeping_in, docker, container)
    cancel.set()
    outcome, info = await running
    assert outcome.error == "cancelled" and info is None
    if line == "run":
        await asyncio.to_thread(
            wait_for, lambda: container not in docker.containers(), "the container's removal"
        )
    else:
        await asyncio.to_thread(wait_for, lambda: not sleeping_in(docker, container), "the generator to end")
        assert not any(str(report) in line for line in docker.processes(container)), "its shell ended too"
        assert "sleep infinity" in docker.processes(container), "the container runs on"


@pytest.mark.parametrize("client", ["frozen", "killed"])
def test_a_container_its_killed_worker_left_is_removed_by_the_hosts_cleanup(
    repo: Layout, signer: Ed25519PrivateKey, docker: DockerDaemon, tmp_path: Path, client: str
) -> None:
    """A worker dies. Its `docker run` client, frozen with it (the machine hung), keeps
    the container's stdin open and the container runs on: the host's cleanup, run by the
    requeue, removes it. A client killed with it closes the stream, and the daemon ends
    and removes the `--rm` container by itself; the cleanup then finds it gone, and says
    nothing is wrong."""
    gen, report = sleeper(tmp_path)
    cleanup = topic_host("boxes")["cleanup"]
    assert cleanup == "docker rm -f {container_id}"
    write_config(repo, host("boxes", docker_run_line(), gen, cleanup=cleanup))
    job = mint(repo)
    worker = start_genjob("ship", job.key, "--host", "boxes", cwd=repo.root, log=tmp_path / "ship.log")
    try:
        wait_for(report.exists, "the generator to start")
        wait_for(lambda: bool([r for r in attempts(repo, job.key) if r.get("event") == STARTED]), "the facts")
        clients = children_named(worker.pid, "docker")
        assert clients, "docker runs the container"
        os.kill(worker.pid, signal.SIGSTOP)  # the worker dies with its clients: it sees none of them go
        for pid in clients:
            os.kill(pid, signal.SIGSTOP if client == "frozen" else signal.SIGKILL)
        os.kill(worker.pid, signal.SIGKILL)
    finally:
        stop_process(worker)
    container = facts_of(repo, job.key)["container_id"]
    try:
        if client == "frozen":
            assert container in docker.containers() and sleeping_in(docker, container), "it runs on"
        else:
            wait_for(lambda: container not in docker.containers(), "the daemon to remove the container")
        assert take_snapshot(repo, disk_cache=False).rows[job.key].state == State.ORPHANED
        done = genjob("requeue", job.key, cwd=repo.root)
        assert done.returncode == 0, done.stderr
        assert f"ran host boxes's cleanup for attempt 1: docker rm -f {container}" in done.stdout
        assert container not in docker.containers()
    finally:
        for pid in clients:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    cleaned = [(r["ok"], r["command"]) for r in attempts(repo, job.key) if r.get("event") == CLEANED_UP]
    assert cleaned == [(True, f"docker rm -f {container}")]


def test_a_daemon_that_cannot_start_is_named_in_its_own_last_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `docker_daemon` skips with, where dockerd cannot run (no privileges, cgroup
    trouble): the last line it printed, never a failure."""
    fake = tmp_path / "bin" / "dockerd"
    fake.parent.mkdir()
    said = ["level=info msg=Starting up", "failed to start daemon: Devices cgroup is not mounted", ""]
    fake.write_text("#!/bin/sh\n" + "".join(f"echo '{line}' >&2\n" for line in said) + "exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(RuntimeError) as caught, run_daemon():
        pass
    assert (
        str(caught.value)
        == "dockerd exited with status 1: failed to start daemon: Devices cgroup is not mounted"
    )
