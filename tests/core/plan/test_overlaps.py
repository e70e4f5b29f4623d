"""The forecast at mint: overlapping jobs in flight are said, refused or serialized."""

from __future__ import annotations

import json

import pytest
from corekit import FILES, cli, mint, receive, set_config, tree_state
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import WrongState
from core.model.lifecycle import State
from core.plan.overlaps import replay_waiting
from core.read.snapshot import take_snapshot
from core.review.apply_job import apply_job
from core.store.config import DEFAULT_CONFIG, load_config
from core.store.layout import Layout
from core.store.overlaps import overlap_map, overlaps_of
from core.store.queue import Claimer, locate, reject

NEW_APP = b"def main():\n    return 2\n"


@pytest.fixture(autouse=True)
def in_root(repo: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    """Paths given to `genjob mint` are relative to the repository's root."""
    monkeypatch.chdir(repo.root)


def policy(layout: Layout, overlapping: str) -> None:
    set_config(layout, DEFAULT_CONFIG.replace("[policy]\n", f'[policy]\noverlapping = "{overlapping}"\n', 1))


def state(layout: Layout, key: str) -> State:
    row = take_snapshot(layout).rows.get(key)
    assert row is not None
    return row.state


def test_mint_names_the_queued_job_it_overlaps(repo: Layout) -> None:
    first = mint(repo, "One.", paths=["src/app.py", "README.md"])
    res = cli("mint", "-m", "Two.", "src/app.py", "src/util.py", root=repo.root)
    assert res.exit_code == 0
    assert f"overlaps {first.key[:12]} on src/app.py" in res.stderr
    assert "src/util.py" not in res.stderr


def test_mint_names_running_and_received_jobs_but_not_finished_ones(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    running = mint(repo, "Running.", paths=["src/app.py"])
    Claimer(repo, "w1").claim(running.key)
    received = mint(repo, "Received.", paths=["src/util.py"])
    assert receive(repo, received.key, {"src/util.py": b"x = 1\n"}, signer).won
    applied = mint(repo, "Applied.", paths=["README.md"])
    assert receive(repo, applied.key, {"README.md": b"# new\n"}, signer).won
    apply_job(repo, applied.key)
    rejected = mint(repo, "Rejected.", paths=["docs/guide.md"])
    reject(repo, rejected.key, "no")
    res = cli("mint", "-m", "All.", "src/app.py", "src/util.py", "README.md", "docs/guide.md", root=repo.root)
    assert res.exit_code == 0
    lines = [line for line in res.stderr.splitlines() if line.startswith("overlaps")]
    expected = sorted([(running.key, "src/app.py"), (received.key, "src/util.py")])
    assert lines == [f"overlaps {k[:12]} on {p}" for k, p in expected]


def test_a_new_path_overlaps_too(repo: Layout) -> None:
    first = mint(repo, "Create.", paths=["src/app.py"], new=["src/new.py"])
    res = cli("mint", "-m", "Also create.", "--new", "src/new.py", root=repo.root)
    assert f"overlaps {first.key[:12]} on src/new.py" in res.stderr


def test_refuse_mints_nothing_and_says_why(repo: Layout) -> None:
    first = mint(repo, "One.")
    policy(repo, "refuse")
    before = tree_state(repo.root)
    res = cli("mint", "-m", "Two.", "src/app.py", root=repo.root)
    assert res.exit_code == 2 and res.stdout == ""
    assert f"overlaps {first.key[:12]} on src/app.py" in res.stderr and 'overlapping = "refuse"' in res.stderr
    assert str(repo.config) in res.stderr
    assert tree_state(repo.root) == before


def test_refuse_mints_a_job_that_overlaps_nothing(repo: Layout) -> None:
    mint(repo, "One.")
    policy(repo, "refuse")
    assert cli("mint", "-m", "Two.", "src/util.py", root=repo.root).exit_code == 0


def test_show_lists_the_overlapping_keys(repo: Layout) -> None:
    first = mint(repo, "One.", paths=["src/app.py", "src/util.py"])
    second = mint(repo, "Two.", paths=["src/util.py"])
    text = cli("show", first.key, root=repo.root).stdout
    assert f"overlaps {second.key[:12]} on src/util.py" in text
    shown = json.loads(cli("show", second.key, "--json", root=repo.root).stdout)
    assert shown["overlaps"] == [{"key": first.key, "paths": ["src/util.py"]}]


def test_the_map_gives_each_job_in_flight_its_overlaps(repo: Layout) -> None:
    a = mint(repo, "A.", paths=["src/app.py"])
    b = mint(repo, "B.", paths=["src/app.py", "src/util.py"])
    c = mint(repo, "C.", paths=["README.md"])
    found = overlap_map(repo)
    assert {k: [o.key for o in v] for k, v in found.items()} == {a.key: [b.key], b.key: [a.key]}
    assert c.key not in found and overlaps_of(repo, c.key) == []


def test_serialize_claims_the_older_job_and_holds_back_the_newer(repo: Layout) -> None:
    policy(repo, "serialize")
    older = mint(repo, "Older.", paths=["src/app.py"])
    newer = mint(repo, "Newer.", paths=["src/app.py"])
    waits = f"waits for the older jobs it overlaps \\(overlaps {older.key[:12]}"
    with pytest.raises(WrongState, match=waits):
        Claimer(repo, "w1").claim(newer.key)
    assert Claimer(repo, "w1").claim().key == older.key
    with pytest.raises(Exception, match="nothing left to claim; skipped 1"):
        Claimer(repo, "w1").claim()
    assert state(repo, newer.key) is State.QUEUED


def test_serialize_claims_it_as_is_once_the_older_is_closed_unchanged(repo: Layout) -> None:
    policy(repo, "serialize")
    older = mint(repo, "Older.", paths=["src/app.py"])
    newer = mint(repo, "Newer.", paths=["src/app.py"])
    reject(repo, older.key, "not needed")
    assert Claimer(repo, "w1", replay=replay_waiting).claim().key == newer.key


def test_serialize_replays_it_before_its_claim_when_the_older_changed_its_inputs(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    policy(repo, "serialize")
    older = mint(repo, "Older.", paths=["src/app.py"])
    newer = mint(repo, "Newer.", paths=["src/app.py", "src/util.py"])
    assert receive(repo, older.key, {"src/app.py": NEW_APP}, signer).won
    apply_job(repo, older.key)
    claimed = Claimer(repo, "w1", replay=replay_waiting).claim()
    assert claimed.key != newer.key
    assert claimed.job.replay_of == newer.key  # type: ignore[union-attr]
    assert claimed.job.input_digest("src/app.py") != newer.input_digest("src/app.py")
    assert claimed.job.input_digest("src/util.py") == newer.input_digest("src/util.py")
    closed = locate(repo, newer.key)
    assert closed.folder == "rejected" and claimed.key in str(closed.record)


def test_serialize_without_a_replayer_leaves_a_moved_job_queued(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    policy(repo, "serialize")
    older = mint(repo, "Older.", paths=["src/app.py"])
    newer = mint(repo, "Newer.", paths=["src/app.py"])
    assert receive(repo, older.key, {"src/app.py": NEW_APP}, signer).won
    apply_job(repo, older.key)
    with pytest.raises(WrongState, match=r"changed its inputs \(src/app\.py\)"):
        Claimer(repo, "w1").claim(newer.key)
    assert locate(repo, newer.key).folder == "queue"


def test_the_cli_claim_replays_a_moved_serialized_job(repo: Layout, signer: Ed25519PrivateKey) -> None:
    policy(repo, "serialize")
    older = mint(repo, "Older.", paths=["src/app.py"])
    newer = mint(repo, "Newer.", paths=["src/app.py"])
    assert receive(repo, older.key, {"src/app.py": NEW_APP}, signer).won
    apply_job(repo, older.key)
    res = cli("claim", "--worker", "w1", root=repo.root)
    assert res.exit_code == 0
    assert locate(repo, res.stdout.strip()).job.replay_of == newer.key  # type: ignore[union-attr]


def test_warn_never_holds_a_claim_back(repo: Layout) -> None:
    mint(repo, "Older.", paths=["src/app.py"])
    newer = mint(repo, "Newer.", paths=["src/app.py"])
    assert Claimer(repo, "w1").claim(newer.key).key == newer.key


def test_a_cloned_repository_may_raise_the_policy_without_consent(repo: Layout) -> None:
    repo.config.write_text(DEFAULT_CONFIG.replace("[policy]\n", '[policy]\noverlapping = "refuse"\n', 1))
    assert load_config(repo.config).policy.overlapping == "refuse"


def test_an_unknown_policy_names_the_file_and_setting(repo: Layout) -> None:
    repo.config.write_text(DEFAULT_CONFIG.replace("[policy]\n", '[policy]\noverlapping = "merge"\n', 1))
    res = cli("mint", "-m", "One.", "src/app.py", root=repo.root)
    assert res.exit_code == 2 and f"{repo.config}: policy.overlapping" in res.stderr
    assert FILES  # the tree is the fixture's
