"""The fleet view: every configured host with its transport, concurrency, runs now, last
error and round trip, derived from real runs, leases and probes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from corekit import cli, mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import CommandHost, assert_stopped, host_block, read_report, sleeper, write_config

from core.store.config import load_config
from core.store.layout import Layout
from core.store.queue import request_cancel
from core.work.fleet import fleet, probe, runs_now
from core.work.ship import Hosts, ship
from core.work.transport import CommandTransport, LocalTransport

pytestmark = pytest.mark.timeout(120)


def hosts(repo: Layout, gen: str) -> None:
    write_config(
        repo,
        host_block("gen", None, gen, concurrency=3),
        host_block("pods", CommandHost(None), "true", concurrency=2),
    )


def view(repo: Layout) -> dict[str, object]:
    return {v.name: v for v in fleet(repo, load_config(repo.config))}


async def test_each_host_with_its_transport_target_and_concurrency(repo: Layout) -> None:
    hosts(repo, "true")
    views = fleet(repo, load_config(repo.config))
    assert [(v.name, v.transport, v.concurrency, v.running, v.last_error, v.rtt) for v in views] == [
        ("gen", "local", 3, (), None, None),
        ("pods", "command", 2, (), None, None),
    ]
    assert views[0].target == "this machine"
    assert views[1].target.startswith("bwrap --ro-bind / / ") and views[1].target.endswith(" --")


async def test_a_running_job_counts_on_its_host_until_it_ends_with_its_error(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gen, report = sleeper(tmp_path)
    hosts(repo, gen)
    job = mint(repo)
    running = asyncio.ensure_future(ship(repo, job.key, "gen", worker_id="tester"))
    await asyncio.to_thread(read_report, report)
    now = view(repo)
    assert now["gen"].running == (job.key,) and now["pods"].running == ()  # type: ignore[attr-defined]
    assert runs_now(repo) == {"gen": [job.key]}

    await asyncio.to_thread(request_cancel, repo, job.key)
    res = await running
    assert res.status == "aborted"
    assert_stopped(report)
    after = view(repo)["gen"]
    assert after.running == ()  # type: ignore[attr-defined]
    error = after.last_error  # type: ignore[attr-defined]
    assert (error.key, error.attempt, error.status) == (job.key, 1, "aborted")
    assert error.reason == "cancelled by the operator (genjob cancel)"
    assert view(repo)["pods"].last_error is None  # type: ignore[attr-defined]


async def test_a_success_is_noted_and_an_older_error_stays_shown(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    write_config(repo, host_block("gen", None, "exit 4"), host_block("good", None, "true"))
    first, second = mint(repo, "first"), mint(repo, "second")
    assert (await ship(repo, first.key, "gen", worker_id="t")).status == "rejected"
    assert (await ship(repo, second.key, "good", worker_id="t")).status == "ok"
    views = view(repo)
    gen, good = views["gen"], views["good"]
    assert gen.last_error.reason == "the generator exited with status 4"  # type: ignore[attr-defined]
    assert gen.last_ok is None  # type: ignore[attr-defined]
    assert good.last_error is None and good.last_ok.key == second.key  # type: ignore[attr-defined]


async def test_a_probe_times_the_round_trip_or_says_why_it_failed(repo: Layout, tmp_path: Path) -> None:
    write_config(
        repo,
        host_block("gen", None, "true"),
        host_block("pods", CommandHost(None), "true"),
    )
    fine = await probe(repo, "gen", LocalTransport())
    assert fine.error is None and fine.seconds is not None and fine.seconds > 0
    missing = await probe(repo, "pods", CommandTransport(["/nonexistent/kubectl", "exec", "-i", "pod"]))
    assert missing.seconds is None and missing.error == "/nonexistent/kubectl: not found on this machine"
    no_tmp = await probe(repo, "pods", CommandTransport(["bwrap", "--ro-bind", "/", "/", "--"]))
    assert no_tmp.error is not None and "No usable temporary directory" in no_tmp.error
    views = view(repo)
    assert views["gen"].rtt == fine.seconds and views["gen"].last_error is None  # type: ignore[attr-defined]
    pods = views["pods"]
    assert pods.rtt is None and pods.last_error.status == "probe"  # type: ignore[attr-defined]
    assert pods.last_error.key is None and pods.last_error.reason == no_tmp.error  # type: ignore[attr-defined]


async def test_notes_that_do_not_parse_read_as_none(repo: Layout) -> None:
    hosts(repo, "true")
    repo.fleet.mkdir(exist_ok=True)
    repo.fleet_file("gen").write_text('{"last_error": {"at": "yesterday"}, "probe": [1]')
    repo.fleet_file("pods").write_text('{"last_error": {"at": 1, "status": "aborted", "key": "../x"}}')
    views = view(repo)
    assert views["gen"].last_error is None and views["gen"].rtt is None  # type: ignore[attr-defined]
    assert views["pods"].last_error.key is None  # type: ignore[attr-defined]


def test_genjob_hosts_lists_and_probes(repo: Layout, tmp_path: Path) -> None:
    write_config(
        repo,
        host_block("gen", None, "true", concurrency=3),
        host_block("pods", CommandHost(None), "true", concurrency=2),
    )
    listed = cli("hosts", "--probe", root=repo.root)
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    assert lines[0].split() == ["HOST", "TRANSPORT", "CONC", "NOW", "RTT", "TARGET", "LAST", "ERROR"]
    gen = lines[1].split()
    assert gen[:4] == ["gen", "local", "3", "0"] and gen[4].endswith("s") and gen[-1] == "-"
    assert lines[2].split()[0] == "UNSANDBOXED", "a local host says what it can reach"
    assert lines[3].split()[:4] == ["pods", "command", "2", "0"] and "bwrap" in lines[3]
    as_json = json.loads(cli("hosts", "--json", "--host", "pods", root=repo.root).output)
    assert [h["name"] for h in as_json] == ["pods"] and as_json[0]["rtt"] > 0
    unknown = cli("hosts", "--host", "nope", root=repo.root)
    assert unknown.exit_code == 2 and "no host named 'nope'" in unknown.output


async def test_the_pool_makes_a_command_transport_from_config(repo: Layout) -> None:
    write_config(repo, host_block("pods", CommandHost(None), "true"))
    pool = Hosts(load_config(repo.config))
    transport = pool.transport("pods")
    assert isinstance(transport, CommandTransport) and transport.mode == "argv"
    assert transport.argv[0] == "bwrap" and transport.python == "python3"
    await pool.close()
