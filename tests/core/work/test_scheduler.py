"""Hosts behind a scheduler: what Slurm says about a run is recorded as it starts, the
generator gets what `pass_env` names of the step's environment, and a host's `cleanup`
stops a step that its killed worker left running (by `requeue`, `recover` or a stop).

The Slurm tests run on a real one-node cluster (`slurmkit`); the cleanup's own rules (a
command that fails, a fact missing or forged, a config that waits for approval) on
attempt records written the way a worker writes them.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from corekit import cli, mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import (
    alive,
    children_named,
    genjob,
    hostile_host,
    read_report,
    runner_result,
    script,
    sleeper,
    start_genjob,
    stop_process,
    toml_str,
    wait_dead,
    wait_for,
    write_config,
)
from slurmkit import SlurmCluster

from core.model.lifecycle import State
from core.read.snapshot import take_snapshot
from core.review.recover import recover
from core.store.events import attempts, record_attempt
from core.store.layout import Layout
from core.store.queue import claim, request_cancel, requeue
from core.store.scheduler import CLEANED_UP, STARTED
from core.work.ship import ship

pytestmark = pytest.mark.timeout(180)


def slurm_host(
    name: str,
    slurm: SlurmCluster,
    generator: str,
    *,
    cleanup: str | None = None,
    pass_env: tuple[str, ...] = (),
) -> str:
    lines = [
        f"[hosts.{name}]",
        'transport = "command"',
        f"command = [{', '.join(toml_str(a) for a in slurm.srun())}]",
        f"python = {toml_str(sys.executable)}",
        f"generator = {toml_str(generator)}",
        "timeout = 120.0",
    ]
    if cleanup is not None:
        lines.append(f"cleanup = {toml_str(cleanup)}")
    if pass_env:
        lines.append(f"pass_env = [{', '.join(toml_str(p) for p in pass_env)}]")
    return "\n".join(lines) + "\n"


def started(layout: Layout, key: str) -> list[dict[str, object]]:
    return [r for r in attempts(layout, key) if r.get("event") == STARTED]


def cleaned(layout: Layout, key: str) -> list[dict[str, object]]:
    return [r for r in attempts(layout, key) if r.get("event") == CLEANED_UP]


async def test_slurms_ids_are_recorded_shown_and_passed_as_named(
    repo: Layout, signer: Ed25519PrivateKey, slurm: SlurmCluster, tmp_path: Path
) -> None:
    code = "import json, os\nos.mkdir('src')\njson.dump(dict(os.environ), open('src/env.json', 'w'))\n"
    write_config(
        repo,
        slurm_host("hpc", slurm, script(tmp_path, "env", code), pass_env=("SLURM_JOB_ID", "SLURM_STEP_*")),
    )
    job = mint(repo, "report the environment", [], new=["src/env.json"])
    res = await ship(repo, job.key, "hpc", worker_id="tester")
    assert (res.status, res.reason) == ("ok", None)
    [record] = started(repo, job.key)
    facts = record["facts"]
    assert isinstance(facts, dict) and record["host"] == "hpc" and record["attempt"] == 1
    assert facts["slurm_job_id"].isdigit() and facts["slurm_step_id"] == "0"
    env = json.loads((repo.out_dir(job.digest) / "src/env.json").read_text())
    assert (env["SLURM_JOB_ID"], env["SLURM_STEP_ID"]) == (facts["slurm_job_id"], "0")
    slurms = {name for name in env if name.startswith("SLURM_")}
    assert all(name == "SLURM_JOB_ID" or name.startswith("SLURM_STEP_") for name in slurms)
    assert not {"SLURM_JOBID", "SLURM_NODELIST", "SLURM_CONF"} & slurms, (
        "what pass_env does not name stays out"
    )
    shown = cli("show", job.key, root=repo.root).output
    assert f"run     attempt 1 on hpc: slurm_job_id={facts['slurm_job_id']} slurm_step_id=0" in shown


@pytest.mark.parametrize("trigger", ["requeue", "recover", "cancel"])
def test_a_step_its_killed_worker_left_is_cancelled_by_the_hosts_cleanup(
    repo: Layout, signer: Ed25519PrivateKey, slurm: SlurmCluster, tmp_path: Path, trigger: str
) -> None:
    """The worker dies with the machine it ran on frozen or cut off: its `srun` never
    closes its connection (frozen here with SIGSTOP; a SIGKILLed one would, and slurmstepd
    would end the step), and Slurm at its default InactiveLimit=0 keeps the step running
    until its --time. `scancel {slurm_job_id}`, run by a requeue, a recover or a stop of the
    orphaned job, ends it (and the runner, on SIGTERM, its generator and workspace)."""
    gen, report = sleeper(tmp_path)
    write_config(repo, slurm_host("hpc", slurm, gen, cleanup="scancel {slurm_job_id}"))
    job = mint(repo)
    worker = start_genjob("ship", job.key, "--host", "hpc", cwd=repo.root, log=tmp_path / "ship.log")
    try:
        pids, _workdir = read_report(report)
        wait_for(lambda: bool(started(repo, job.key)), "the run's facts in the attempt records")
        clients = children_named(worker.pid, "srun")
        assert clients, "srun runs the step"
        os.kill(worker.pid, signal.SIGSTOP)  # the worker dies with its clients: it sees none of them go
        for pid in clients:  # each leads a group of its own, with the second srun it forks
            os.killpg(pid, signal.SIGSTOP)
        os.kill(worker.pid, signal.SIGKILL)
    finally:
        stop_process(worker)
    try:
        job_id = started(repo, job.key)[0]["facts"]["slurm_job_id"]  # type: ignore[index]
        assert slurm.running(job_id) and all(alive(p) for p in pids), "the step runs on without its worker"
        assert take_snapshot(repo, disk_cache=False).rows[job.key].state == State.ORPHANED
        argv = {"requeue": ["requeue", job.key], "recover": ["recover"], "cancel": ["cancel", job.key]}
        done = genjob(*argv[trigger], cwd=repo.root)
        assert done.returncode == 0, done.stderr
        assert f"ran host hpc's cleanup for attempt 1: scancel {job_id}" in done.stdout
        # The job stays COMPLETING while slurmstepd waits for the frozen srun: its tasks are gone.
        wait_for(lambda: not slurm.running(job_id), f"Slurm job {job_id} to stop running")
        assert wait_dead(pids) == []
    finally:
        for pid in clients:
            os.killpg(pid, signal.SIGKILL)
    assert wait_dead(clients) == []
    assert [(r["ok"], r["command"]) for r in cleaned(repo, job.key)] == [(True, f"scancel {job_id}")]
    if trigger == "recover":
        again = genjob("recover", cwd=repo.root)
        assert "R7" not in again.stdout, "a run is cleaned up once"
        assert len(cleaned(repo, job.key)) == 1


def orphan_with_facts(layout: Layout, facts: dict[str, str], host: str = "hpc") -> str:
    """A job claimed by a worker that died after its run on `host` said `facts`."""
    job = mint(layout, f"a job that ran on {host}")
    claimed = claim(layout, "gone", job.key, pid=_dead_pid())
    record_attempt(layout, job.key, STARTED, attempt=claimed.lease.token, host=host, facts=facts)
    return job.key


def _dead_pid() -> int:
    from corekit import dead_pid

    return dead_pid()


def cleanup_host(command: str, name: str = "hpc") -> str:
    return (
        f"[hosts.{name}]\n"
        'transport = "command"\n'
        'command = ["srun", "--quiet"]\n'
        'generator = "true"\n'
        f"cleanup = {toml_str(command)}\n"
    )


def test_a_cleanup_that_fails_says_so_and_the_requeue_stands(repo: Layout, tmp_path: Path) -> None:
    write_config(repo, cleanup_host("echo cannot reach the controller >&2; exit 3"))
    key = orphan_with_facts(repo, {"slurm_job_id": "41"})
    done = genjob("requeue", key, cwd=repo.root)
    assert done.returncode == 1
    assert done.stderr == (
        "host hpc's cleanup for attempt 1 failed: `echo cannot reach the controller >&2; exit 3` "
        "exited with status 3: cannot reach the controller\n"
    )
    assert take_snapshot(repo, disk_cache=False).rows[key].state == State.QUEUED
    [record] = cleaned(repo, key)
    assert record["ok"] is False and "exited with status 3" in str(record["detail"])


@pytest.mark.parametrize(
    ("facts", "fault"),
    [
        ({"slurm_step_id": "0"}, "not run: it needs {slurm_job_id}, which the run did not report"),
        (
            {"slurm_job_id": "41; touch pwned"},
            "not run: the recorded slurm_job_id '41; touch pwned' is not a plain word",
        ),
        (
            {"slurm_job_id": "$(touch pwned)"},
            "not run: the recorded slurm_job_id '$(touch pwned)' is not a plain word",
        ),
    ],
)
def test_a_fact_missing_or_forged_runs_no_cleanup(
    repo: Layout, tmp_path: Path, facts: dict[str, str], fault: str
) -> None:
    """An attempts file is a claim: a fact that is not a plain word never reaches a shell."""
    write_config(repo, cleanup_host("scancel {slurm_job_id}; touch cleaned"))
    key = orphan_with_facts(repo, facts)
    [cleanup] = requeue(repo, key).cleanups
    assert (cleanup.ok, cleanup.command, cleanup.detail) == (False, None, fault)
    assert not (repo.root / "pwned").exists() and not (repo.root / "cleaned").exists()


def test_a_cleanup_whose_host_waits_for_approval_or_is_gone_does_not_run(repo: Layout) -> None:
    write_config(repo, cleanup_host("touch cleaned"))
    key = orphan_with_facts(repo, {"slurm_job_id": "41"})
    set_config_unallowed(repo, cleanup_host("touch cleaned-too"))
    [held] = request_cancel(repo, key).cleanups
    assert not held.ok and held.detail.startswith(f"not run: {repo.config} changed since you allowed it")
    gone = orphan_with_facts(repo, {"slurm_job_id": "42"}, host="retired")
    [missing] = requeue(repo, gone).cleanups
    assert not missing.ok and missing.detail.endswith("no longer has a host 'retired'")
    assert not (repo.root / "cleaned").exists() and not (repo.root / "cleaned-too").exists()


def set_config_unallowed(layout: Layout, hosts: str) -> None:
    """Change the config as a pull would, without the operator allowing it."""
    layout.config.write_text(layout.config.read_text().split("[hosts.", 1)[0] + hosts)


def test_recover_cleans_up_only_orphans_and_each_run_once(repo: Layout) -> None:
    write_config(repo, cleanup_host("echo $0 >> cleaned"))
    key = orphan_with_facts(repo, {"slurm_job_id": "41"})
    live = mint(repo, "still running")
    held = claim(repo, "alive", live.key, pid=os.getpid())
    record_attempt(
        repo, live.key, STARTED, attempt=held.lease.token, host="hpc", facts={"slurm_job_id": "43"}
    )
    report = recover(repo)
    assert f"R7 {key}: ran host hpc's cleanup for attempt 1: echo $0 >> cleaned" in report.done
    assert not any(live.key in line for line in report.lines), "a live worker's run is its own"
    assert not any("R7" in line for line in recover(repo).lines)
    assert (repo.root / "cleaned").read_text() == "/bin/sh\n"


async def test_a_hello_whose_facts_are_not_plain_words_is_refused(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    facts = json.dumps({"slurm_job_id": "1; rm -rf ~"})
    write_config(repo, hostile_host(tmp_path, "evil", runner_result(), facts))
    job = mint(repo)
    res = await ship(repo, job.key, "evil", worker_id="tester")
    assert res.status == "aborted"
    assert res.reason == (
        "refused the runner's hello: facts: slurm_job_id: '1; rm -rf ~' "
        "is not letters, digits, '.', '_' and '-'; what it printed is kept in "
        f".gen/logs/{job.key}/attempt-1.login"
    )
    assert started(repo, job.key) == []


def test_a_requeue_cleans_up_the_attempt_it_took_back_not_the_next(
    repo: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that claims the job again between the requeue and its cleanup keeps its run."""
    import core.store.scheduler

    write_config(repo, cleanup_host("echo {slurm_job_id} >> cleaned"))
    key = orphan_with_facts(repo, {"slurm_job_id": "41"})
    clean_up = core.store.scheduler.clean_up

    def claimed_first(layout: Layout, key: str, attempt: int | None = None) -> list[object]:
        again = claim(layout, "next", key)
        record_attempt(
            layout, key, STARTED, attempt=again.lease.token, host="hpc", facts={"slurm_job_id": "42"}
        )
        return clean_up(layout, key, attempt)  # type: ignore[return-value]

    monkeypatch.setattr(core.store.scheduler, "clean_up", claimed_first)
    [cleanup] = requeue(repo, key).cleanups
    assert (cleanup.ok, cleanup.attempt, cleanup.command) == (True, 1, "echo 41 >> cleaned")
    assert (repo.root / "cleaned").read_text() == "41\n"
