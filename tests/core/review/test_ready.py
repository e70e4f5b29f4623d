"""A queue that pulls: `apply --ready [--watch]`, its order, what it leaves, its policies, crashes."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from corekit import cli, receive, set_config, tree_files
from crashkit import every_crash
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from lineskit import LINES, commit_lines, edit, received

from core.model.lifecycle import State
from core.plan.mint import build_job
from core.read.snapshot import take_snapshot
from core.review.consent import consent
from core.review.ready import pull, receipt_order
from core.review.recover import recover
from core.store.config import DEFAULT_CONFIG, load_config
from core.store.layout import Layout
from core.store.queue import enqueue, locate

GENJOB = str(Path(sys.executable).parent / "genjob")


@pytest.fixture
def lines(repo: Layout) -> Layout:
    return commit_lines(repo)


def policy(layout: Layout, *settings: str) -> None:
    set_config(layout, DEFAULT_CONFIG.replace("[policy]\n", "[policy]\n" + "".join(settings), 1))


def state(layout: Layout, key: str) -> State:
    return take_snapshot(layout, disk_cache=False).rows[key].state


def test_ready_applies_oldest_receipt_first_and_leaves_the_stale_one(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    late = received(lines, signer, "Late.", edit(12, "twelve"), 2_000_000_000)
    early = received(lines, signer, "Early.", edit(1, "one"), 1_900_000_000)
    assert receipt_order(lines) == [early, late]
    res = cli("apply", "--ready", root=lines.root)
    assert res.exit_code == 0
    out = res.stdout.splitlines()
    assert out[0] == f"applied {early}: 1 file(s) changed"
    assert out[1].startswith(f"left {late}: STALE") and f"genjob apply {late} --merge" in out[1]
    assert (lines.root / "src/lines.py").read_bytes() == edit(1, "one")


def test_ready_with_merge_merges_the_stale_one(lines: Layout, signer: Ed25519PrivateKey) -> None:
    late = received(lines, signer, "Late.", edit(12, "twelve"), 2_000_000_000)
    early = received(lines, signer, "Early.", edit(1, "one"), 1_900_000_000)
    res = cli("apply", "--ready", "--merge", root=lines.root)
    assert res.stdout.splitlines() == [
        f"applied {early}: 1 file(s) changed",
        f"merged {late}: 1 file(s) changed",
    ]
    assert (lines.root / "src/lines.py").read_bytes() == edit(1, "one").replace(b"line 12\n", b"twelve\n")


def test_ready_names_the_conflict_it_leaves(lines: Layout, signer: Ed25519PrivateKey) -> None:
    late = received(lines, signer, "Late.", edit(1, "uno"), 2_000_000_000)
    early = received(lines, signer, "Early.", edit(1, "one"), 1_900_000_000)
    res = cli("apply", "--ready", "--merge", root=lines.root)
    assert res.stdout.splitlines()[0] == f"applied {early}: 1 file(s) changed"
    assert "the three-way merge conflicts in src/lines.py" in res.stdout and f"left {late}" in res.stdout
    assert state(lines, late) is State.STALE


def test_ready_leaves_a_job_whose_required_check_has_not_passed(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    policy(lines, 'require_checks = ["tests"]\n')
    lines.config.write_text(lines.config.read_text() + '\n[checks.tests]\nrun = "true"\nsandbox = "none"\n')
    set_config(lines, lines.config.read_text())
    key = received(lines, signer, "Checked.", edit(3, "three"), 1_900_000_000)
    res = cli("apply", "--ready", root=lines.root)
    assert f"left {key}: " in res.stdout and "required check not passed" in res.stdout
    assert (lines.root / "src/lines.py").read_bytes() == LINES


def test_ready_never_writes_a_protected_path(repo: Layout, signer: Ed25519PrivateKey) -> None:
    (repo.root / "tests").mkdir()
    (repo.root / "tests/test_app.py").write_bytes(b"def test(): pass\n")
    job = build_job(repo, "Loosen the test.", ["tests/test_app.py"])
    enqueue(repo, job)
    assert receive(repo, job.key, {"tests/test_app.py": b"pass\n"}, signer).won
    res = cli("apply", "--ready", root=repo.root)
    assert f"left {job.key}" in res.stdout and "protected" in res.stdout
    assert (repo.root / "tests/test_app.py").read_bytes() == b"def test(): pass\n"


def test_a_cloned_config_cannot_switch_auto_apply_or_auto_merge_on(lines: Layout) -> None:
    text = DEFAULT_CONFIG.replace("[policy]\n", '[policy]\nauto_apply = "checked"\nauto_merge = true\n', 1)
    lines.config.write_text(text)  # as a clone brings it: not allowed
    held = load_config(lines.config)
    assert held.policy.auto_apply == "never" and held.policy.auto_merge is False
    shown = "\n".join(consent(lines).lines)
    assert 'policy.auto_apply to "checked"' in shown and "policy.auto_merge to true" in shown
    set_config(lines, text)  # the operator allowed it
    allowed = load_config(lines.config)
    assert allowed.policy.auto_apply == "checked" and allowed.policy.auto_merge is True


def test_held_auto_merge_does_not_merge(lines: Layout, signer: Ed25519PrivateKey) -> None:
    late = received(lines, signer, "Late.", edit(12, "twelve"), 2_000_000_000)
    received(lines, signer, "Early.", edit(1, "one"), 1_900_000_000)
    lines.config.write_text(DEFAULT_CONFIG.replace("[policy]\n", "[policy]\nauto_merge = true\n", 1))
    done = {p.key: p.done for p in pull(lines)}
    assert done[late] == "left"


def watch(layout: Layout) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [GENJOB, "--root", str(layout.root), "apply", "--ready", "--watch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_watch_under_never_lists_what_is_ready_and_applies_nothing(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    key = received(lines, signer, "Ready.", edit(2, "two"), 1_900_000_000)
    proc = watch(lines)
    assert proc.stdout is not None
    assert proc.stdout.readline() == f"ready {key}: verifies, and its required checks passed\n"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate()
    assert 'policy.auto_apply = "never"' in err
    assert locate(lines, key).folder == "running"
    assert (lines.root / "src/lines.py").read_bytes() == LINES


def test_watch_under_checked_applies_receipts_as_they_arrive(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    policy(lines, 'auto_apply = "checked"\n')
    first = received(lines, signer, "First.", edit(2, "two"), 1_900_000_000)
    proc = watch(lines)
    assert proc.stdout is not None
    assert proc.stdout.readline() == f"applied {first}: 1 file(s) changed\n"
    second = received(lines, signer, "Second.", edit(2, "two").replace(b"line 9\n", b"nine\n"), 1_900_000_001)
    assert proc.stdout.readline() == f"applied {second}: 1 file(s) changed\n"
    proc.send_signal(signal.SIGTERM)
    proc.communicate()
    assert proc.returncode == 0


def test_a_pass_killed_anywhere_loses_nothing_after_recover(
    lines: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    late = received(lines, signer, "Late.", edit(12, "twelve"), 2_000_000_000)
    early = received(lines, signer, "Early.", edit(1, "one"), 1_900_000_000)
    final = {**tree_files(lines.root), "src/lines.py": edit(1, "one").replace(b"line 12\n", b"twelve\n")}
    steps = (LINES, edit(1, "one"), final["src/lines.py"])
    runs = 0
    for root, _ in every_crash(lines.root, tmp_path / "work", lambda r: pull(Layout(r), merge=True)):
        runs += 1
        layout = Layout(root)
        assert (root / "src/lines.py").read_bytes() in steps, "a half-written file"
        assert not recover(layout).left
        assert (root / "src/lines.py").read_bytes() in steps
        assert {p.done for p in pull(layout, merge=True)} <= {"applied", "merged"}
        assert tree_files(root) == final
        assert [locate(layout, k).folder for k in (early, late)] == ["applied", "applied"]
    assert runs >= 10


def test_a_watch_killed_mid_queue_then_recover_loses_nothing(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    policy(lines, 'auto_apply = "checked"\n', "auto_merge = true\n")
    spaced = range(1, 12, 2)  # lines apart: each merges clean over the others
    keys = [received(lines, signer, f"Edit {i}.", edit(i, f"edited {i}"), 1_900_000_000 + i) for i in spaced]
    final = LINES
    for i in spaced:
        final = final.replace(f"line {i}\n".encode(), f"edited {i}\n".encode())
    proc = watch(lines)
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith(f"applied {keys[0]}")
    proc.kill()  # SIGKILL, wherever the queue is
    proc.wait()
    assert cli("recover", root=lines.root).exit_code == 0
    again = cli("apply", "--ready", root=lines.root)
    assert again.exit_code == 0 and "left" not in again.stdout, again.stdout
    assert (lines.root / "src/lines.py").read_bytes() == final
    assert all(locate(lines, k).folder == "applied" for k in keys)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), "apply: name a job KEY, or give --ready"),
        (("--watch",), "apply --watch: give --ready too"),
        (("--ready", "0" * 32), "apply --ready: applies every ready job; name no KEY"),
    ],
)
def test_apply_without_what_to_apply_says_so(repo: Layout, args: tuple[str, ...], said: str) -> None:
    res = cli("apply", *args, root=repo.root)
    assert res.exit_code == 2 and res.stderr.startswith(f"genjob: {said}")


def test_watch_notifies_of_receipts_that_arrive_and_jobs_that_turn_ready(
    lines: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """What was there when the watch began is not news; a receipt after is, and under
    `auto_apply = "never"` it waits for approval: the operator's command hears of both."""
    import json

    from core.store.layout import user_config_dir

    heard = tmp_path / "heard.jsonl"
    hook = [sys.executable, "-c", f"import sys; open({str(heard)!r}, 'ab').write(sys.stdin.buffer.read())"]
    user_config_dir().mkdir(parents=True, exist_ok=True)
    (user_config_dir() / "config.toml").write_text(
        f'[notify.command]\nrun = {json.dumps(hook)}\nevents = ["receipt", "approval"]\n'
    )
    there = received(lines, signer, "There before.", edit(2, "two"), 1_900_000_000)
    proc = watch(lines)
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith(f"ready {there}:")
    arrived = received(lines, signer, "Arrived.", edit(3, "three"), 1_900_000_001)
    assert proc.stdout.readline().startswith(f"ready {arrived}:")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate()
    assert proc.returncode == 0, err
    events = [(d["event"], d["key"], d["source"]) for d in map(json.loads, heard.read_text().splitlines())]
    assert events == [("receipt", arrived, "apply"), ("approval", arrived, "apply")]
