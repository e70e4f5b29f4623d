"""The `genjob` command, one subcommand at a time (in process, and a few as real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from corekit import (
    cli,
    dead_pid,
    git,
    make_repo,
    mint,
    receive,
    set_config,
    tree_state,
    write_jobs,
    write_receipt,
)
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.model.lifecycle import STATE_ORDER
from core.store.layout import Layout
from core.store.queue import claim, locate
from core.store.signing import public_key_path

GENJOB = Path(sys.executable).parent / "genjob"


def keys_of(layout: Layout, state: str | None = None) -> list[str]:
    args = ["ls", "--json"] + (["--state", state] if state else [])
    return [row["key"] for row in json.loads(cli(*args, root=layout.root).stdout)]


def test_help_lists_the_core_commands() -> None:
    out = cli("--help").stdout
    for command in (
        "init",
        "mint",
        "ls",
        "show",
        "claim",
        "requeue",
        "verify",
        "apply",
        "reject",
        "replay",
        "recover",
        "cancel",
        "keygen",
        "trust",
        "schema",
    ):
        assert f"  {command} " in out


def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    res = cli("--version")
    assert (res.exit_code, res.stdout) == (0, f"genjob {version('genjob')}\n")


def test_init_is_idempotent_and_ignores_gen_in_git(tmp_path: Path) -> None:
    root = tmp_path / "r"
    root.mkdir()
    git(root, "init", "-q")
    first = cli("init", str(root))
    assert first.exit_code == 0
    assert "created .gen/config.toml" in first.stdout
    assert "/.gen/" in (root / ".git/info/exclude").read_text().splitlines()
    again = cli("init", str(root))
    assert again.exit_code == 0 and "created" not in again.stdout
    (root / "f.txt").write_text("x")
    cli("--root", str(root), "mint", "-m", "x", str(root / "f.txt"))
    assert git(root, "status", "--porcelain").split() == ["??", "f.txt"]


def test_commands_outside_a_repository_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = cli("ls")
    assert res.exit_code == 2
    assert res.stderr.startswith(f"genjob: {tmp_path}: not inside a genjob repository")


def test_mint_prints_the_key_and_collapses_duplicates(in_repo: Layout) -> None:
    res = cli("mint", "-m", "Add a timeout.", "src/app.py", "--new", "src/timeout.py")
    assert res.exit_code == 0
    key = res.stdout.strip()
    assert locate(in_repo, key).folder == "queue"
    again = cli("mint", "-m", "Add a timeout.", "src/app.py", "--new", "src/timeout.py")
    assert again.exit_code == 0 and again.stdout.strip() == key
    assert f"the same job exists already: .gen/queue/{key}.json (queue)" in again.stderr


def test_mint_from_a_file_or_stdin_and_as_v1(in_repo: Layout) -> None:
    (in_repo.root / "ask.md").write_text("Rename helper to double.\n")
    from_file = cli("mint", "-f", "ask.md", "src/util.py").stdout.strip()
    from_stdin = cli("mint", "-f", "-", "src/util.py", input="Rename helper to double.\n").stdout.strip()
    assert from_file == from_stdin
    v1 = cli("mint", "--schema", "v1", "-m", "x", "src/util.py").stdout.strip()
    assert locate(in_repo, v1).job.schema_name == "genjob.v1"
    res = cli("mint", "-m", "x", "-f", "ask.md", "src/util.py")
    assert res.exit_code == 2 and "exactly one of -m TEXT or -f FILE" in res.stderr


def test_mint_paths_are_relative_to_the_current_folder(
    in_repo: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(in_repo.root / "src")
    key = cli("mint", "-m", "x", "app.py", "../README.md").stdout.strip()
    assert locate(in_repo, key).job.allowed_paths == ["README.md", "src/app.py"]


def test_ls_filters_by_state_and_speaks_json(repo: Layout, signer: Ed25519PrivateKey) -> None:
    queued, running = write_jobs(repo, 2)
    claim(repo, "w1", running)
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"x"}, signer)
    assert keys_of(repo, "QUEUED") == [queued]
    assert keys_of(repo, "running") == [running]
    assert keys_of(repo, "RECEIVED") == [job.key]
    assert keys_of(repo, "APPLIED") == []
    both = cli("ls", "--json", "--state", "queued", "--state", "RECEIVED", root=repo.root)
    assert {r["key"] for r in json.loads(both.stdout)} == {queued, job.key}
    [row] = [r for r in json.loads(cli("ls", "--json", root=repo.root).stdout) if r["key"] == job.key]
    for field in (
        "key",
        "state",
        "schema",
        "digest",
        "instruction",
        "allowed_paths",
        "attempts",
        "worker",
        "problems",
    ):
        assert field in row
    assert row["state"] == "RECEIVED" and row["worker"] == "w1" and row["digest"] == job.digest
    assert row["allowed_paths"] == ["src/app.py"] and row["attempts"] == 1
    text = cli("ls", root=repo.root).stdout
    assert text.splitlines()[0].split()[:2] == ["KEY", "STATE"]
    assert "QUEUED=1" in text and "RECEIVED=1" in text
    assert cli("ls", "--state", "bogus", root=repo.root).exit_code == 2


def test_ls_on_a_repository_with_invalid_files_never_crashes(repo: Layout) -> None:
    write_jobs(repo, 1)
    (repo.queue / ("0" * 32 + ".json")).write_bytes(b"\x00\xff not json")
    (repo.running / ("1" * 32 + ".json")).write_bytes(b"[" * 10_000)
    (repo.running / ("1" * 32 + ".lease")).write_bytes(b"{")
    (repo.receipts / ("2" * 32 + ".json")).write_bytes(b'{"a": NaN}')
    (repo.applied / "garbage.json").write_bytes(b"{}")
    os.mkfifo(repo.rejected / ("3" * 32 + ".json"))
    for args in (["ls"], ["ls", "--json"], ["ls", "--state", "INVALID"], ["ls", "--state", "queued"]):
        res = cli(*args, root=repo.root)
        assert res.exit_code == 0, res.stderr
    invalid = keys_of(repo, "INVALID")
    assert set(invalid) >= {"0" * 32, "1" * 32, "3" * 32, "garbage"}
    assert len(keys_of(repo, "QUEUED")) == 1
    res = cli("ls", root=repo.root)
    assert "INVALID" in res.stdout


def test_ls_says_when_signatures_are_not_required_or_config_is_bad(repo: Layout) -> None:
    text = repo.config.read_text()
    set_config(repo, text.replace("require_signature = true", "require_signature = false"))
    assert "signatures NOT required" in cli("ls", root=repo.root).stderr
    set_config(repo, "[policy\n")
    res = cli("ls", root=repo.root)
    assert res.exit_code == 0 and f"warning: {repo.config}: not valid TOML" in res.stderr


def test_show_text_json_and_key_prefixes(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo, "Line one.\nLine two.")
    receive(repo, job.key, {"src/app.py": b"def main():\n    return 3\n"}, signer)
    res = cli("show", job.key[:8], root=repo.root)
    assert res.exit_code == 0
    assert res.stdout.startswith(f"job {job.key}  RECEIVED  (genjob.v2)")
    assert "=> apply may run" in res.stdout
    assert "+    return 3" in res.stdout
    data = json.loads(cli("show", "--json", job.key, root=repo.root).stdout)
    assert data["key"] == job.key and data["verification"]["ok"] is True
    assert data["document"]["digest"] == job.digest
    assert cli("show", "f" * 32, root=repo.root).exit_code == 2
    assert "not a job key" in cli("show", "xyz", root=repo.root).stderr


def test_an_ambiguous_prefix_is_refused(repo: Layout) -> None:
    keys = write_jobs(repo, 17)
    shared = Counter(k[0] for k in keys).most_common(1)[0][0]
    res = cli("show", shared, root=repo.root)
    assert res.exit_code == 2 and "ambiguous" in res.stderr


def every_state(layout: Layout, signer: Ed25519PrivateKey) -> dict[str, str]:
    """One job in each state a user can see, by the state's name."""
    from core.review.apply_job import apply_job
    from core.store.queue import reject

    queued, running, orphaned = write_jobs(layout, 3)
    claim(layout, "w1", running)
    claim(layout, "w1", orphaned, pid=dead_pid())
    received = mint(layout, "received", ["src/app.py"]).key
    receive(layout, received, {"src/app.py": b"x\n"}, signer)
    failed = mint(layout, "failed", ["README.md"]).key
    receive(layout, failed, {}, signer, status="rejected")
    stale = mint(layout, "stale", ["src/util.py"]).key
    receive(layout, stale, {"src/util.py": b"y\n"}, signer)
    applied = mint(layout, "applied", ["docs/guide.md"]).key
    receive(layout, applied, {"docs/guide.md": b"z\n"}, signer)
    apply_job(layout, applied)
    (layout.root / "src/util.py").write_text("edited by hand\n")  # after the apply: only `stale` goes stale
    rejected = mint(layout, "rejected", ["src/app.py", "README.md"]).key
    reject(layout, rejected, "no")
    invalid = "0" * 32
    (layout.queue / f"{invalid}.json").write_bytes(b"{")
    [inconsistent] = write_jobs(layout, 1, prefix="twice")
    (layout.running / f"{inconsistent}.json").write_bytes(
        (layout.queue / f"{inconsistent}.json").read_bytes()
    )
    return {
        "QUEUED": queued,
        "RUNNING": running,
        "ORPHANED": orphaned,
        "RECEIVED": received,
        "FAILED": failed,
        "STALE": stale,
        "APPLIED": applied,
        "REJECTED": rejected,
        "INVALID": invalid,
        "INCONSISTENT": inconsistent,
    }


def test_ls_state_lists_each_job_of_that_state_once(repo: Layout, signer: Ed25519PrivateKey) -> None:
    from core.model.lifecycle import State

    jobs = every_state(repo, signer)
    assert sorted(jobs) == sorted(s.value for s in State)
    for name, key in jobs.items():
        for given in (name, name.lower()):
            assert keys_of(repo, given) == [key], (given, keys_of(repo))
            text = cli("ls", "--state", given, root=repo.root).stdout.splitlines()
            header, *rows, summary = text
            assert header.split()[:2] == ["KEY", "STATE"]
            assert [row.split()[:2] for row in rows] == [[key, name]]
            assert f"{name}=1" in summary.split()
    listing = cli("ls", root=repo.root).stdout.splitlines()
    assert sorted(line.split()[0] for line in listing[1:-1]) == sorted(jobs.values())
    assert listing[-1].split() == [f"{s.value}=1" for s in STATE_ORDER]


INVALID_SHOW_CASES = ["not-json", "too-deep-with-a-bad-lease", "a-fifo", "unknown-field", "bad-receipt"]


def make_invalid(layout: Layout, case: str) -> tuple[str, str]:
    """A job that reads as INVALID, and its fault as the listing gives it."""
    if case == "not-json":
        key = "0" * 32
        (layout.queue / f"{key}.json").write_bytes(b"\x00\xff not json")
    elif case == "too-deep-with-a-bad-lease":
        key = "1" * 32
        (layout.running / f"{key}.json").write_bytes(b"[" * 10_000)
        (layout.running / f"{key}.lease").write_bytes(b"{")
    elif case == "a-fifo":
        key = "3" * 32
        os.mkfifo(layout.rejected / f"{key}.json")
    elif case == "unknown-field":
        key = mint(layout, "An extra field.").key
        path = layout.queue / f"{key}.json"
        path.write_text(path.read_text().replace("{", '{"priority": 1,', 1))
    else:
        key = mint(layout, "A bad receipt.").key
        claim(layout, "w1", key)
        write_receipt(layout, key, {"schema": "genjob.v0"})
    [row] = json.loads(cli("ls", "--json", "--state", "INVALID", root=layout.root).stdout)
    assert row["key"] == key
    [fault] = row["problems"]
    return key, fault


@pytest.mark.parametrize("case", INVALID_SHOW_CASES)
def test_show_on_an_invalid_job_says_its_fault_once_and_no_empty_fields(repo: Layout, case: str) -> None:
    key, fault = make_invalid(repo, case)
    res = cli("show", key, root=repo.root)
    assert res.exit_code == 0 and res.stderr == ""
    lines = res.stdout.splitlines()
    assert lines[0].split()[:3] == ["job", key, "INVALID"]
    assert res.stdout.count(fault) == 1, res.stdout
    assert f"! {fault}" in lines
    assert f"  it cannot be run or applied; set it aside with: genjob discard {key}" in lines
    for i, line in enumerate(lines):
        assert line.strip() and line == line.rstrip(), f"an empty or padded line {i}: {line!r}"
        assert "None" not in line and "()" not in line and "''" not in line, line
        if line.endswith(":"):  # a heading: something must follow it, indented
            assert i + 1 < len(lines) and lines[i + 1].startswith("  "), f"empty field {line!r}"


def test_claim_and_exit_1_when_the_queue_is_empty(repo: Layout) -> None:
    [key] = write_jobs(repo, 1)
    res = cli("claim", "--worker", "w1", root=repo.root)
    assert res.exit_code == 0 and res.stdout.strip() == key
    assert "claimed by w1, attempt 1" in res.stderr
    empty = cli("claim", "--worker", "w1", root=repo.root)
    assert empty.exit_code == 1
    assert "nothing left to claim" in empty.stderr


def test_claim_a_given_key(repo: Layout) -> None:
    _, b = write_jobs(repo, 2)
    assert cli("claim", b, "--worker", "w1", "--ttl", "5", root=repo.root).stdout.strip() == b
    res = cli("claim", b, "--worker", "w2", root=repo.root)
    assert res.exit_code == 2 and "is RUNNING, not QUEUED" in res.stderr


def test_requeue_needs_force_for_a_live_lease(repo: Layout) -> None:
    [key] = write_jobs(repo, 1)
    claim(repo, "w1")
    res = cli("requeue", key, root=repo.root)
    assert res.exit_code == 2 and "use --force" in res.stderr
    res = cli("requeue", "--force", key, root=repo.root)
    assert res.exit_code == 0 and res.stdout.strip() == f"requeued: .gen/queue/{key}.json"


def test_verify_exit_status_says_whether_apply_may_run(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"new\n"}, signer)
    ok = cli("verify", job.key, root=repo.root)
    assert ok.exit_code == 0 and "=> apply may run" in ok.stdout
    data = json.loads(cli("verify", "--json", job.key, root=repo.root).stdout)
    assert data["ok"] is True and [c["status"] for c in data["checks"]] == ["passed"] * 12
    (repo.root / "src/app.py").write_text("moved on\n")
    stale = cli("verify", job.key, root=repo.root)
    assert stale.exit_code == 1 and "[FAIL] base" in stale.stdout and "=> apply refused" in stale.stdout
    queued = mint(repo, "other")
    assert cli("verify", queued.key, root=repo.root).exit_code == 1


def test_apply_commit_and_apply_again(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo, "Return three.")
    receive(repo, job.key, {"src/app.py": b"def main():\n    return 3\n"}, signer)
    res = cli("apply", job.key, "--commit", root=repo.root)
    assert res.exit_code == 0, res.stderr
    assert f"applied {job.key}: 1 file(s) changed" in res.stdout
    assert "committed " in res.stdout
    assert f"Genjob-Key: {job.key}" in git(repo.root, "log", "-1", "--format=%B")
    again = cli("apply", job.key, root=repo.root)
    assert again.exit_code == 0 and "applied already; nothing to do" in again.stdout


def test_apply_under_a_policy_without_signatures_says_so(repo: Layout) -> None:
    text = repo.config.read_text()
    set_config(repo, text.replace("require_signature = true", "require_signature = false"))
    job = mint(repo)
    receive(repo, job.key, {"src/app.py": b"new\n"})
    res = cli("apply", job.key, root=repo.root)
    assert res.exit_code == 0 and "applied under require_signature = false" in res.stderr


def test_reject_and_replay(repo: Layout, signer: Ed25519PrivateKey) -> None:
    job = mint(repo, "Try this.")
    receive(repo, job.key, {"src/app.py": b"new\n"}, signer)
    assert cli("reject", job.key, root=repo.root).exit_code == 2
    res = cli("reject", job.key, "--reason", "not like that", root=repo.root)
    assert res.exit_code == 0 and res.stdout.strip() == f"rejected: .gen/rejected/{job.key}.json"
    replayed = cli("replay", job.key, root=repo.root)
    assert replayed.exit_code == 0
    new_key = replayed.stdout.strip()
    assert new_key != job.key
    new = locate(repo, new_key).job
    assert new.instruction == "Try this." and getattr(new, "replay_of", None) == job.key
    again = cli("replay", job.key, root=repo.root)
    assert again.stdout.strip() == new_key and "the same replay exists already" in again.stderr
    res = cli("replay", new_key, root=repo.root)
    assert res.exit_code == 2 and "is QUEUED; replay is for" in res.stderr


def test_cancel(repo: Layout) -> None:
    [key] = write_jobs(repo, 1)
    assert cli("cancel", key, root=repo.root).exit_code == 2
    claim(repo, "w1")
    res = cli("cancel", key, root=repo.root)
    assert res.exit_code == 0 and (repo.running / f"{key}.cancel").exists()


def test_recover(repo: Layout) -> None:
    assert cli("recover", root=repo.root).stdout.strip() == "nothing to recover"
    [key] = write_jobs(repo, 1)
    data = (repo.queue / f"{key}.json").read_bytes()
    claim(repo, "w1")
    (repo.queue / f"{key}.json").write_bytes(data)
    res = cli("recover", root=repo.root)
    assert res.exit_code == 0 and res.stdout.strip() == f"R4 {key}: running wins; removed the copy in queue/"


def test_keygen_honours_xdg_config_home_and_trust_pins_it(repo: Layout, private_config: Path) -> None:
    before = tree_state(repo.root)
    res = cli("keygen")
    assert res.exit_code == 0
    assert Path(res.stdout.strip()) == private_config / "genjob" / "worker_ed25519.pub" == public_key_path()
    assert tree_state(repo.root) == before, "keygen writes nothing into the repository"
    again = cli("keygen")
    assert again.exit_code == 2 and "a worker key exists already" in again.stderr
    assert cli("keygen", "--force").exit_code == 0
    trusted = cli("trust", str(public_key_path()), root=repo.root)
    assert trusted.exit_code == 0 and trusted.stdout.startswith("trusted SHA256:")
    assert len(list(repo.trusted_keys.glob("*.pub"))) == 1


def test_schema_prints_json_schemas() -> None:
    job = json.loads(cli("schema", "job").stdout)
    assert {"JobV1", "JobV2"} <= set(job["$defs"])
    receipt = json.loads(cli("schema", "receipt").stdout)
    assert set(receipt["properties"]) == {
        "schema",
        "job_digest",
        "idempotency_key",
        "status",
        "outputs",
        "worker_id",
    }
    assert cli("schema", "lease").exit_code == 2


def test_the_installed_command_exit_codes(tmp_path: Path, private_config: Path) -> None:
    layout = make_repo(tmp_path / "r")
    env = {**os.environ, "XDG_CONFIG_HOME": str(private_config)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(GENJOB), *args], cwd=layout.root, env=env, capture_output=True, text=True)

    minted = run("mint", "-m", "Real process.", "src/app.py")
    assert minted.returncode == 0
    assert run("claim", "--worker", "w").returncode == 0
    empty = run("claim", "--worker", "w")
    assert empty.returncode == 1 and empty.stderr.startswith("genjob: ")
    bad = run("mint", "-m", "x", "../outside")
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "../outside: outside the repository" in bad.stderr


def test_init_outside_git_warns_that_commit_will_not_work(tmp_path: Path) -> None:
    res = cli("init", str(tmp_path))
    assert res.exit_code == 0
    assert "is not a git repository: `apply --commit`" in res.stderr
    inside = tmp_path / "g"
    inside.mkdir()
    git(inside, "init", "-q")
    assert "not a git repository" not in cli("init", str(inside)).stderr


def test_ls_names_the_states_as_it_shows_them_and_takes_either_case(repo: Layout) -> None:
    [queued] = write_jobs(repo, 1)
    names = "QUEUED|RUNNING|ORPHANED|RECEIVED|FAILED|STALE|APPLIED|REJECTED|INVALID|INCONSISTENT"
    assert f"--state [{names}]" in cli("ls", "--help").stdout
    bad = cli("ls", "--state", "bogus", root=repo.root)
    assert bad.exit_code == 2 and "'bogus' is not one of 'QUEUED', 'RUNNING'," in bad.stderr
    for given in ("QUEUED", "queued", "Queued"):
        assert keys_of(repo, given) == [queued]  # through click
    assert "no jobs in RECEIVED" in cli("ls", "--state", "received", root=repo.root).stdout
    # A plain `genjob ls` is answered without click, and takes either case the same way.
    from tui.cli.plain import plain_ls

    assert plain_ls(["ls", "--state", "queued", "--state=Received"]) == (None, ["queued", "Received"], False)
    for args in (["--state", "queued"], ["--state=Queued"]):
        proc = subprocess.run(
            [str(GENJOB), "ls", "--json", *args], cwd=repo.root, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        assert [row["key"] for row in json.loads(proc.stdout)] == [queued]


def test_apply_commit_without_a_git_identity_says_how_in_one_line_and_applies_nothing(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh machine: git knows no user.name or user.email (and may not guess one)."""
    home = tmp_path / "empty-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_CONFIG_GLOBAL", "EMAIL", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL"):
        monkeypatch.delenv(name, raising=False)
    for name in ("GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(name, raising=False)
    # Where git could guess an address from the host name, it is told not to, as it cannot here.
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "user.useConfigOnly")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "true")
    git(repo.root, "config", "--unset", "user.name")
    git(repo.root, "config", "--unset", "user.email")
    job = mint(repo, "Return three.")
    receive(repo, job.key, {"src/app.py": b"def main():\n    return 3\n"}, signer)
    before = tree_state(repo.root)
    head = git(repo.root, "rev-parse", "HEAD")

    res = cli("apply", job.key, "--commit", root=repo.root)
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith("genjob: git does not know who you are, so nothing was applied: run ")
    assert 'git config --global user.name "Your Name"' in res.stderr and "user.email" in res.stderr
    assert tree_state(repo.root) == before and git(repo.root, "status", "--porcelain", "src") == ""
    assert git(repo.root, "rev-parse", "HEAD") == head
    assert keys_of(repo, "RECEIVED") == [job.key]

    git(repo.root, "config", "user.name", "Your Name")
    git(repo.root, "config", "user.email", "you@example.com")
    done = cli("apply", job.key, "--commit", root=repo.root)
    assert done.exit_code == 0, done.stderr
    assert f"Genjob-Key: {job.key}" in git(repo.root, "log", "-1", "--format=%B")


def test_a_queued_job_whose_input_moved_says_so_in_ls_show_and_ship(repo: Layout, tmp_path: Path) -> None:
    """STALE in `ls`, `ls --json` and `show`; `ship` refuses it, naming replay, with no attempt spent."""
    mark = tmp_path / "generator-ran"
    policy = "[policy]\nrequire_signature = false\n"
    set_config(
        repo, policy + f'[hosts.local]\ntransport = "local"\nsandbox = "none"\ngenerator = "touch {mark}"\n'
    )
    job = mint(repo, "x", ["src/app.py"])
    (repo.root / "src/app.py").write_text("moved on\n")
    line = next(x for x in cli("ls", root=repo.root).stdout.splitlines() if x.startswith(job.key))
    assert line.split()[1] == "STALE"
    [row] = json.loads(cli("ls", "--json", "--state", "STALE", root=repo.root).stdout)
    assert row["key"] == job.key and row["state"] == "STALE"
    assert row["problems"] == ["src/app.py: changed since the job was minted"]
    assert json.loads(cli("ls", "--json", "--state", "QUEUED", root=repo.root).stdout) == []
    shown = cli("show", job.key, root=repo.root)
    assert (
        shown.stdout.startswith(f"job {job.key}  STALE")
        and "changed since the job was minted" in shown.stdout
    )
    res = cli("ship", job.key, "--host", "local", root=repo.root)
    assert res.exit_code != 0 and f"genjob replay {job.key}" in res.stderr and "nothing claimed" in res.stderr
    assert not mark.exists() and repo.job_file("queue", job.key).exists()
    assert not repo.attempts_file(job.key).exists()
