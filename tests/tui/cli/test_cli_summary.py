"""`genjob ls --summary`: one line of counts of the open jobs, for a status bar."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from corekit import cli, dead_pid, mint, receive, write_jobs
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.store.layout import Layout
from core.store.queue import claim
from tui.cli.plain import plain_summary

GENJOB = Path(sys.executable).parent / "genjob"


def genjob(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real `genjob` program, as a status bar runs it."""
    return subprocess.run([str(GENJOB), *args], cwd=cwd, capture_output=True, text=True)


def every_open_state(repo: Layout, signer: Ed25519PrivateKey) -> None:
    """Two queued jobs, one running, one orphaned, one received, one failed, two applied."""
    write_jobs(repo, 2)
    running, orphaned, received, failed = (
        mint(repo, f"Job {n}.", [path])
        for n, path in enumerate(("src/app.py", "src/util.py", "README.md", "docs/guide.md"))
    )
    claim(repo, "w1", running.key)
    claim(repo, "w2", orphaned.key, pid=dead_pid())
    receive(repo, received.key, {"README.md": b"# better\n"}, signer)
    receive(repo, failed.key, {}, signer, status="rejected")
    write_jobs(repo, 2, folder="applied", prefix="closed")


def test_the_summary_counts_each_open_state_most_urgent_first(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    every_open_state(repo, signer)
    res = cli("ls", "--summary", root=repo.root)
    assert res.exit_code == 0, res.stderr
    assert res.stdout == "genjob: 1 orphaned · 1 received · 1 failed · 1 running · 2 queued\n"
    assert res.stderr == ""


def test_the_plain_summary_says_what_click_says_without_loading_click(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    every_open_state(repo, signer)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", str(GENJOB), "ls", "--summary"],
        cwd=repo.root,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0
    assert proc.stdout == cli("ls", "--summary", root=repo.root).stdout
    loaded = {
        line.rsplit("|", 1)[1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line
    }
    assert "core" in loaded and not loaded & {"click", "pydantic", "textual", "rich", "asyncssh"}


def test_an_empty_repository_says_so_in_one_stable_line(repo: Layout) -> None:
    proc = genjob(repo.root, "ls", "--summary")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "genjob: no open jobs\n", "")


def test_queued_jobs_are_counted_by_name_without_being_read(repo: Layout) -> None:
    """The queue may hold a million jobs: the summary lists it and reads none of its files
    (a file that does not parse shows as INVALID only once read, as on the board)."""
    [key] = write_jobs(repo, 1)
    repo.job_file("queue", key).write_bytes(b"{not json")
    assert genjob(repo.root, "ls", "--summary").stdout == "genjob: 1 queued\n"
    assert "INVALID" in genjob(repo.root, "ls").stdout


def test_outside_any_repository_the_summary_prints_nothing_and_exits_0(tmp_path: Path) -> None:
    """A status bar runs it in every pane's folder, most of which hold no repository."""
    plain = tmp_path / "plain"
    plain.mkdir()
    gitted = tmp_path / "gitted"
    gitted.mkdir()
    subprocess.run(["git", "init", "-q", str(gitted)], check=True)
    for folder in (plain, gitted):
        proc = genjob(folder, "ls", "--summary")
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def test_a_root_that_is_no_repository_is_one_error(tmp_path: Path) -> None:
    proc = genjob(tmp_path, "--root", str(tmp_path), "ls", "--summary")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"genjob: {tmp_path}: no .gen/ here (run `genjob init` there first)\n"


def test_summary_with_a_state_or_json_is_one_error(repo: Layout) -> None:
    for extra in (["--state", "QUEUED"], ["--json"]):
        res = cli("ls", "--summary", *extra, root=repo.root)
        assert res.exit_code == 2 and res.stdout == ""
        assert res.stderr == (
            "genjob: ls --summary counts every open state on one line: give it without --state or --json\n"
        )


def test_only_a_bare_summary_takes_the_plain_path(tmp_path: Path) -> None:
    assert plain_summary(["ls", "--summary"]) == (None,)
    assert plain_summary(["--root", str(tmp_path), "ls", "--summary"]) == (tmp_path,)
    for argv in (["ls", "--summary", "--json"], ["ls", "--summary", "--state", "queued"], ["ls"], ["--root"]):
        assert plain_summary(argv) is None, argv
