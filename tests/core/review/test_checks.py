"""Checks end to end: a real project, a real test suite, real bwrap, records and policy."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
from pathlib import Path

import pytest
from checkkit import (
    CALC,
    CALC_BETTER,
    CALC_BROKEN,
    PYTEST,
    check,
    configure,
    hard_links,
    processes_left,
    project,
    received,
    refuse_git,
    unique_sleep,
)
from corekit import sha, tree_files, tree_state, write_receipt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import BadInput, GenjobError, Stale, VerificationFailed, WrongState
from core.model.check_record import CheckResult
from core.model.models import Job
from core.model.standing import CheckState
from core.review import sandbox
from core.review.apply_job import apply_job
from core.review.check_status import ChecksRequired, check_statuses
from core.review.checks import run_check, run_checks
from core.review.verify import verify
from core.store.check_records import read_record, running_since
from core.store.config import load_config
from core.store.layout import Layout
from core.store.queue import locate
from core.store.signing import private_key_path

pytestmark = pytest.mark.skipif(sandbox.tools().bwrap is None, reason="bwrap is not installed")


@pytest.fixture
def repo(tmp_path: Path) -> Layout:
    return project(tmp_path / "repo")


def user_files(layout: Layout) -> dict[str, str]:
    """Everything in the repository but genjob's own folder: files, modes, links, `.git/`."""
    return {k: v for k, v in tree_state(layout.root).items() if k != ".gen" and not k.startswith(".gen/")}


def states(layout: Layout, job: Job) -> dict[str, tuple[CheckState, str]]:
    config = load_config(layout.config)
    v = verify(layout, locate(layout, job.key).job, config)
    return {s.name: (s.state, s.detail) for s in check_statuses(layout, job, config, v)}


def test_a_passing_and_a_failing_test_suite(repo: Layout, signer: Ed25519PrivateKey) -> None:
    configure(repo, {"tests": f'run = "{PYTEST}"\ntimeout = 120'})
    good = received(repo, signer, {"calc.py": CALC_BETTER})
    bad = received(repo, signer, {"calc.py": CALC_BROKEN})

    [passed] = check(repo, good.key)
    assert passed.passed and passed.record is not None
    assert passed.record.exit_code == 0 and "2 passed" in passed.record.tail
    assert passed.record.sandboxed and passed.scratch == "overlay"
    [failed] = check(repo, bad.key)
    assert not failed.passed and failed.record is not None
    assert failed.record.result == "failed" and failed.record.exit_code == 1
    assert "assert -1 == 5" in failed.record.tail and "1 failed, 1 passed" in failed.record.tail

    assert states(repo, good)["tests"][0] is CheckState.PASSED
    state, detail = states(repo, bad)["tests"]
    assert state is CheckState.FAILED and "exit 1" in detail
    assert (repo.root / "calc.py").read_bytes() == CALC


def test_the_record_names_what_it_checked(repo: Layout, signer: Ed25519PrivateKey) -> None:
    configure(repo, {"lint": 'run = "echo checking {paths}; exit 3"'})
    job = received(
        repo,
        signer,
        {"calc.py": CALC_BETTER, "it's new.py": b"X = 1\n"},
        paths=["calc.py"],
        new=["it's new.py"],
    )
    check(repo, job.key)
    record = read_record(repo, job.key, "lint")
    assert record is not None
    doc = json.loads(repo.check_record(job.key, "lint").read_bytes())
    assert doc["schema"] == "genjob.check.v1"
    assert doc["command"] == "echo checking {paths}; exit 3"
    assert doc["ran"] == "echo checking calc.py 'it'\"'\"'s new.py'; exit 3"
    assert doc["outputs"] == {"calc.py": sha(CALC_BETTER), "it's new.py": sha(b"X = 1\n")}
    assert doc["base"] == {"calc.py": sha(CALC), "it's new.py": None}
    assert doc["exit_code"] == 3 and doc["result"] == "failed"
    assert record.result is CheckResult.FAILED
    assert doc["sandbox"] == "bwrap" and doc["scratch"] == "overlay"
    assert doc["tail"] == "checking calc.py it's new.py\n"
    assert doc["duration"] >= 0 and doc["timeout"] == 600
    assert len(doc["head"]) == 40


def test_the_output_tail_is_capped(repo: Layout, signer: Ed25519PrivateKey) -> None:
    configure(
        repo, {"noisy": 'run = "python3 -c \'print(\\"x\\" * 300000)\'"'}, "[limits]\nmax_tail_bytes = 4096\n"
    )
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    [run] = check(repo, job.key)
    assert run.record is not None
    assert len(run.record.tail) == 4096 and run.record.output_bytes == 300001


def test_generated_code_cannot_read_keys_or_untracked_files_or_reach_the_network(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY\n")
    monkeypatch.setenv("HOME", str(home))
    worker_key = private_key_path()
    assert worker_key.exists()
    (repo.root / "untracked.env").write_text("API_TOKEN=hunter2\n")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.setblocking(False)
    port = server.getsockname()[1]
    targets = [
        home / ".ssh" / "id_ed25519",
        worker_key,
        repo.root / "untracked.env",
        repo.root / ".gen/config.toml",
    ]
    attack = (
        "import socket\n"
        f"for path in {[str(t) for t in targets]!r}:\n"
        "    try:\n"
        "        print('READ', path, open(path).read()[:30])\n"
        "    except OSError as exc:\n"
        "        print('could not read', path, type(exc).__name__)\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
        "    print('CONNECTED')\n"
        "except OSError as exc:\n"
        "    print('no network', type(exc).__name__)\n"
        "def test_nothing():\n"
        "    pass\n"
    )
    configure(repo, {"tests": f'run = "{PYTEST} -s"\ntimeout = 120'})
    job = received(
        repo, signer, {"tests/test_attack.py": attack.encode()}, paths=[], new=["tests/test_attack.py"]
    )
    [run] = check(repo, job.key)
    assert run.record is not None
    tail = run.record.tail
    assert "READ" not in tail and "CONNECTED" not in tail, tail
    assert tail.count("could not read") == len(targets) and "no network" in tail
    assert "hunter2" not in tail and "PRIVATE KEY" not in tail
    with pytest.raises(BlockingIOError):
        server.accept()
    server.close()


def test_a_hanging_check_is_killed_at_its_timeout_and_nothing_is_left(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    marker = unique_sleep()
    configure(
        repo, {"hangs": f'run = "sleep {marker} & setsid sleep {marker} & sleep {marker}"\ntimeout = 1'}
    )
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    [run] = check(repo, job.key)
    assert run.finished.timed_out and run.record is not None
    assert run.record.result == "timed out" and run.record.exit_code is None
    assert processes_left(marker) == []
    state, detail = states(repo, job)["hangs"]
    assert state is CheckState.FAILED and "timed out after 1s" in detail
    assert os.listdir(repo.scratch) == []


def test_a_record_goes_stale_when_the_output_changes(repo: Layout, signer: Ed25519PrivateKey) -> None:
    configure(repo, {"tests": f'run = "{PYTEST}"'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    check(repo, job.key)
    assert states(repo, job)["tests"][0] is CheckState.PASSED

    # Another receipt for the job, signed, with other bytes: verification passes, the record does not.
    out = repo.out_dir(job.digest) / "calc.py"
    out.write_bytes(CALC_BROKEN)
    doc = json.loads(repo.receipt(job.key).read_bytes())
    write_receipt(repo, job.key, {**doc, "outputs": {"calc.py": sha(CALC_BROKEN)}}, signer)
    state, detail = states(repo, job)["tests"]
    assert state is CheckState.STALE and "other outputs" in detail

    # The output's bytes drifting under the receipt: stale too.
    write_receipt(repo, job.key, doc, signer)
    assert states(repo, job)["tests"][0] is CheckState.STALE
    out.write_bytes(CALC_BETTER)
    assert states(repo, job)["tests"][0] is CheckState.PASSED


def test_a_record_goes_stale_when_the_base_changes(repo: Layout, signer: Ed25519PrivateKey) -> None:
    configure(repo, {"tests": f'run = "{PYTEST}"'})
    job = received(repo, signer, {"calc.py": CALC_BETTER}, paths=["calc.py", "README.md"])
    check(repo, job.key)
    readme = repo.root / "README.md"
    original = readme.read_bytes()
    readme.write_text("# edited after the check\n")
    state, detail = states(repo, job)["tests"]
    assert state is CheckState.STALE and "tree changed" in detail
    with pytest.raises(Stale):
        check(repo, job.key)
    readme.write_bytes(original)
    assert states(repo, job)["tests"][0] is CheckState.PASSED


def test_a_record_goes_stale_when_its_command_or_sandbox_changes(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    configure(repo, {"tests": 'run = "true"'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    check(repo, job.key)
    configure(repo, {"tests": 'run = "true --strict"'})
    assert "command changed" in states(repo, job)["tests"][1]
    configure(repo, {"tests": 'run = "true"\nsandbox = "none"'})
    assert "sandbox" in states(repo, job)["tests"][1]


def test_apply_is_refused_then_allowed_by_require_checks(repo: Layout, signer: Ed25519PrivateKey) -> None:
    configure(repo, {"tests": f'run = "{PYTEST}"', "lint": 'run = "true"'}, require=["tests"])
    bad = received(repo, signer, {"calc.py": CALC_BROKEN})
    with pytest.raises(ChecksRequired, match=rf"tests \(not run\).*genjob check {bad.key} --name tests"):
        apply_job(repo, bad.key)
    check(repo, bad.key)
    with pytest.raises(ChecksRequired, match=r"tests \(failed\)"):
        apply_job(repo, bad.key)
    assert (repo.root / "calc.py").read_bytes() == CALC

    good = received(repo, signer, {"calc.py": CALC_BETTER}, paths=["calc.py", "README.md"])
    check(repo, good.key, "lint")  # an optional check alone is not enough
    with pytest.raises(ChecksRequired):
        apply_job(repo, good.key)
    check(repo, good.key, "tests")
    res = apply_job(repo, good.key)
    assert res.changed == ["calc.py"] and (repo.root / "calc.py").read_bytes() == CALC_BETTER


def test_a_record_another_user_could_have_written_does_not_count(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    configure(repo, {"tests": 'run = "true"'}, require=["tests"])
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    check(repo, job.key)
    repo.check_record(job.key, "tests").chmod(0o666)
    state, detail = states(repo, job)["tests"]
    assert state is CheckState.NOT_RUN and "chmod go-w" in detail
    with pytest.raises(ChecksRequired):
        apply_job(repo, job.key)


@pytest.mark.parametrize("kind", ["bwrap", "none"])
def test_the_users_files_are_never_modified_by_a_check_that_writes_everything(
    repo: Layout, signer: Ed25519PrivateKey, kind: str
) -> None:
    (repo.root / "untracked.txt").write_text("mine\n")
    vandal = (
        'find . -type f -exec sh -c \'for f; do echo vandalised > "$f"; chmod 600 "$f"; done\' sh {} + ; '
        "find . -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} + ; touch new-file; ls -la"
    )
    configure(repo, {"vandal": f'run = """{vandal}"""\nsandbox = "{kind}"'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    before, links = user_files(repo), hard_links(repo.root)
    [run] = check(repo, job.key)
    assert run.record is not None and run.record.exit_code == 0, run.record.tail
    assert "vandalised" not in run.record.tail and "new-file" in run.record.tail
    assert run.scratch == ("overlay" if kind == "bwrap" else "copy")
    assert user_files(repo) == before
    assert hard_links(repo.root) == links
    assert not (repo.root / "new-file").exists()


def test_a_check_that_is_running_shows_as_running_and_cannot_start_twice(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    marker = unique_sleep()
    configure(repo, {"slow": f'run = "echo started; sleep {marker}"'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})

    async def scenario() -> None:
        config = load_config(repo.config)
        receipt = verify(repo, job, config).receipt
        assert receipt is not None
        stop, seen = asyncio.Event(), asyncio.Event()
        task = asyncio.ensure_future(
            run_check(repo, job, receipt, "slow", config, on_output=lambda c: seen.set(), cancel=stop)
        )
        await seen.wait()
        assert running_since(repo, job.key, "slow") is not None
        assert states(repo, job)["slow"][0] is CheckState.RUNNING
        with pytest.raises(WrongState, match="running already"):
            await run_check(repo, job, receipt, "slow", config)
        stop.set()
        run = await task
        assert run.finished.cancelled and run.record is None

    asyncio.run(scenario())
    assert processes_left(marker) == []
    assert running_since(repo, job.key, "slow") is None
    assert states(repo, job)["slow"][0] is CheckState.NOT_RUN


def test_a_check_whose_runner_died_is_not_running(repo: Layout, signer: Ed25519PrivateKey) -> None:
    configure(repo, {"tests": 'run = "true"'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    repo.check_dir(job.key).mkdir(parents=True)
    info = {"pid": 1, "pid_start": -1, "host": socket.gethostname(), "started_at": 0.0, "timeout": 5}
    (repo.check_dir(job.key) / "tests.run").write_text(json.dumps(info))
    assert running_since(repo, job.key, "tests") is None
    assert states(repo, job)["tests"][0] is CheckState.NOT_RUN


def test_without_bwrap_checks_refuse_unless_unsandboxed_and_say_so(
    repo: Layout, signer: Ed25519PrivateKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure(repo, {"tests": f'run = "{PYTEST}"'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    monkeypatch.setattr(sandbox, "tools", lambda: sandbox.Tools(None, None, None, "/bin/sh"))
    monkeypatch.setattr(sandbox, "bwrap_problem", lambda: "bwrap (bubblewrap) is not installed")
    with pytest.raises(sandbox.SandboxError, match='sandbox = "none"'):
        check(repo, job.key)
    assert not repo.check_dir(job.key).joinpath("tests.json").exists()
    configure(repo, {"tests": f'run = "{PYTEST}"\nsandbox = "none"'})
    [run] = check(repo, job.key)
    assert run.passed and run.record is not None and not run.record.sandboxed
    assert "UNSANDBOXED" in run.sandbox
    state, detail = states(repo, job)["tests"]
    assert state is CheckState.PASSED and "UNSANDBOXED" in detail


def test_without_an_overlay_the_tree_is_copied(
    repo: Layout, signer: Ed25519PrivateKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure(repo, {"tests": f'run = "{PYTEST}"'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    monkeypatch.setattr(sandbox, "overlay_problem", lambda near: "overlay refused")
    [run] = check(repo, job.key)
    assert run.passed and run.scratch == "copy" and run.record is not None and run.record.sandboxed


def test_checks_run_only_on_a_receipt_that_verifies(repo: Layout, signer: Ed25519PrivateKey) -> None:
    from corekit import mint

    configure(repo, {"tests": 'run = "true"'})
    queued = mint(repo, "Not shipped yet", ["calc.py"])
    with pytest.raises(WrongState, match="QUEUED"):
        check(repo, queued.key)
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    (repo.out_dir(job.digest) / "calc.py").write_bytes(b"drifted\n")
    with pytest.raises(VerificationFailed, match="does not verify"):
        check(repo, job.key)
    with pytest.raises(BadInput, match=r"no check named nope \(configured: tests\)"):
        check(repo, job.key, "nope")


def test_no_checks_configured(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    with pytest.raises(BadInput, match=r"no checks configured"):
        check(repo, job.key)


def test_several_checks_of_several_jobs_at_once(repo: Layout, signer: Ed25519PrivateKey) -> None:
    configure(repo, {"tests": f'run = "{PYTEST}"', "touch": 'run = "echo changed > calc.py; cat calc.py"'})
    jobs = [received(repo, signer, {"calc.py": data}) for data in (CALC_BETTER, CALC_BROKEN)]

    async def all_at_once() -> list[list[bool]]:
        runs = await asyncio.gather(*(run_checks(repo, j.key) for j in jobs))
        return [[r.passed for r in rs] for rs in runs]

    assert asyncio.run(all_at_once()) == [[True, True], [False, True]]
    assert tree_files(repo.root)["calc.py"] == CALC
    assert os.listdir(repo.scratch) == []


def test_read_only_extras_are_visible_and_relative_ones_are_in_the_repository(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    (repo.root / "vendor").mkdir()
    (repo.root / "vendor" / "tool.txt").write_text("untracked, but named\n")
    configure(
        repo,
        {"tests": 'run = "cat vendor/tool.txt; touch vendor/x || echo read-only"\nread_only = ["vendor"]'},
    )
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    [run] = check(repo, job.key)
    assert run.record is not None
    assert run.record.tail.startswith("untracked, but named\n") and "read-only" in run.record.tail
    assert not (repo.root / "vendor" / "x").exists()


def test_a_thread_reading_states_while_checks_run(repo: Layout, signer: Ed25519PrivateKey) -> None:
    """Views read records while a run writes them: always a whole record or none."""
    configure(repo, {"tests": 'run = "true"'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    seen: set[CheckState] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.add(states(repo, job)["tests"][0])

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for _ in range(3):
            check(repo, job.key)
    finally:
        done.set()
        watcher.join()
    assert seen <= {CheckState.NOT_RUN, CheckState.RUNNING, CheckState.PASSED}


@pytest.mark.parametrize("how", ["dubious", "broken"])
def test_a_check_refuses_to_run_when_git_cannot_say_which_files_it_tracks(
    repo: Layout, signer: Ed25519PrivateKey, how: str
) -> None:
    """Never a fallback to every file: the untracked `.env` would be in the check's tree."""
    (repo.root / ".env").write_text("API_TOKEN=hunter2\n")
    configure(repo, {"tests": 'run = "cat .env"'})
    job = received(repo, signer, {"calc.py": CALC_BETTER})
    refuse_git(repo.root, how)
    before = user_files(repo)
    try:
        [run] = check(repo, job.key)
    except GenjobError as exc:
        message = str(exc)
    else:
        pytest.fail(f"the check ran, and its output was: {run.finished.tail.decode()!r}")
    assert message.startswith(f"{repo.root}: git ls-files failed") and "the check did not run" in message
    assert read_record(repo, job.key, "tests") is None
    assert os.listdir(repo.scratch) == []
    assert user_files(repo) == before
    assert locate(repo, job.key).folder == "running"
