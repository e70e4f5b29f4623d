"""Commits that can be retried (`core.review.commit`): an `apply --commit` whose commit git
refused, or that was killed, stays "applied, not committed" until `apply --commit` or
`recover` commits it, with the same trailers, and only bytes the job wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from corekit import cli, git, mint, receive, sha
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from rich.console import Console

from core.errors import GenjobError
from core.model.canonical import canonical
from core.model.lifecycle import State
from core.model.models import Job
from core.read.inspect_job import job_detail
from core.read.snapshot import take_snapshot
from core.review import commit as commit_module
from core.review.apply_job import apply_job
from core.review.recover import recover
from core.store.layout import Layout
from core.store.queue import locate
from tui.render import job_text

NEW_APP = b"def main():\n    return 2\n"


@pytest.fixture
def received(repo: Layout, signer: Ed25519PrivateKey) -> Job:
    job = mint(repo, "Return two.")
    assert receive(repo, job.key, {"src/app.py": NEW_APP}, signer).won
    return job


def refusing_hook(repo: Layout) -> Path:
    hook = repo.root / ".git" / "hooks" / "pre-commit"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text("#!/bin/sh\necho 'pre-commit: lint says no' >&2\nexit 1\n")
    hook.chmod(0o755)
    return hook


def commits(repo: Layout) -> list[str]:
    return git(repo.root, "log", "--format=%H").split()


def staged(repo: Layout) -> list[str]:
    return git(repo.root, "diff", "--cached", "--name-only").split()


def show(repo: Layout, key: str) -> dict[str, object]:
    res = cli("show", key, "--json", root=repo.root)
    assert res.exit_code == 0, res.output
    data: dict[str, object] = json.loads(res.stdout)
    return data


def test_a_commit_the_hook_refused_stays_applied_not_committed_and_apply_commit_retries_it(
    repo: Layout, received: Job
) -> None:
    hook = refusing_hook(repo)
    before = commits(repo)
    with pytest.raises(
        GenjobError, match=r"lint says no.*applied, not committed: `genjob apply .* --commit`"
    ):
        apply_job(repo, received.key, commit=True)
    assert (repo.root / "src/app.py").read_bytes() == NEW_APP
    assert take_snapshot(repo, disk_cache=False).rows[received.key].state is State.APPLIED
    assert commits(repo) == before and staged(repo) == []
    assert show(repo, received.key)["commit"] == "pending"
    text = cli("show", received.key, root=repo.root).stdout
    assert "applied, not committed" in text
    board = Console(width=200, record=True)
    board.print(job_text(job_detail(repo, received.key)))
    assert "applied, NOT committed" in board.export_text()
    plain = cli("apply", received.key, root=repo.root)
    assert plain.exit_code == 0 and "applied, not committed" in plain.stderr
    hook.unlink()
    again = cli("apply", received.key, "--commit", root=repo.root)
    assert again.exit_code == 0, again.output
    assert "committed " in again.stdout
    assert len(commits(repo)) == len(before) + 1
    message = git(repo.root, "log", "-1", "--format=%B")
    assert f"Genjob-Key: {received.key}" in message and f"Genjob-Digest: {received.digest}" in message
    data = show(repo, received.key)
    assert data["commit"] == "committed" and data["commit_sha"] == commits(repo)[0]
    third = cli("apply", received.key, "--commit", root=repo.root)
    assert third.exit_code == 0 and "nothing to do" in third.stdout and len(commits(repo)) == len(before) + 1


def test_recover_commits_an_applied_job_whose_commit_did_not_happen(repo: Layout, received: Job) -> None:
    hook = refusing_hook(repo)
    with pytest.raises(GenjobError):
        apply_job(repo, received.key, commit=True)
    refused = recover(repo)
    assert any(line.startswith(f"R8 {received.key}: cannot finish") for line in refused.left)
    hook.unlink()
    report = recover(repo)
    assert report.left == [] and any(line.startswith(f"R8 {received.key}: committed") for line in report.done)
    assert f"Genjob-Key: {received.key}" in git(repo.root, "log", "-1", "--format=%B")
    assert recover(repo).lines == []


def test_a_retry_after_git_committed_but_the_record_was_not_written_makes_no_second_commit(
    repo: Layout, received: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    def killed(*args: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(commit_module, "_mark_committed", killed)
        with pytest.raises(KeyboardInterrupt):
            apply_job(repo, received.key, commit=True)
    made = commits(repo)
    assert show(repo, received.key)["commit"] == "pending"
    res = apply_job(repo, received.key, commit=True)
    assert res.commit == made[0] and commits(repo) == made
    assert show(repo, received.key)["commit"] == "committed"


def test_an_apply_commit_killed_mid_apply_is_finished_and_committed_by_recover(
    repo: Layout, received: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    def killed(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr("core.review.apply.close_applied", killed)  # after the tree is written, before the cleanup
        with pytest.raises(KeyboardInterrupt):
            apply_job(repo, received.key, commit=True)
    before = commits(repo)
    report = recover(repo)
    assert report.left == [], report.lines
    assert commits(repo)[1:] == before and f"Genjob-Key: {received.key}" in git(
        repo.root, "log", "-1", "--format=%B"
    )
    assert show(repo, received.key)["commit"] == "committed"


def test_an_interrupted_apply_journal_that_asked_for_a_commit_is_committed_when_finished(
    repo: Layout, received: Job
) -> None:
    targets = [{"path": "src/app.py", "before": received.input_digest("src/app.py"), "after": sha(NEW_APP)}]
    journal = {"key": received.key, "digest": received.digest, "targets": targets, "commit": {"sign": False}}
    repo.journal.mkdir(exist_ok=True)
    repo.journal_file(received.key).write_bytes(canonical(journal))
    before = commits(repo)
    report = recover(repo)
    assert report.left == [], report.lines
    assert len(commits(repo)) == len(before) + 1
    assert show(repo, received.key)["commit"] == "committed"


def test_a_retry_refuses_to_commit_a_path_edited_since_the_apply(repo: Layout, received: Job) -> None:
    hook = refusing_hook(repo)
    with pytest.raises(GenjobError):
        apply_job(repo, received.key, commit=True)
    hook.unlink()
    (repo.root / "src/app.py").write_bytes(b"the user's own edit\n")
    before = commits(repo)
    with pytest.raises(GenjobError, match=r"src/app\.py: changed since genjob applied job .* not committed"):
        apply_job(repo, received.key, commit=True)
    assert commits(repo) == before and staged(repo) == []
    assert locate(repo, received.key).record is not None
    assert show(repo, received.key)["commit"] == "pending"
