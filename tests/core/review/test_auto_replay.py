"""`policy.auto_replay`: `apply --ready` replays a job it cannot merge, up to a cap down its chain."""

from __future__ import annotations

import json
import os

import pytest
from corekit import cli, receive, set_config
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from lineskit import commit_lines, edit, received

from core.errors import BadInput
from core.model.models import JobV2
from core.plan.replay import replay_unmergeable
from core.review.consent import consent
from core.review.ready import pull
from core.store.blobs import blobs_dir
from core.store.config import DEFAULT_CONFIG, load_config
from core.store.layout import Layout
from core.store.queue import locate


@pytest.fixture
def lines(repo: Layout) -> Layout:
    return commit_lines(repo)


def policy(layout: Layout, *settings: str) -> None:
    set_config(layout, DEFAULT_CONFIG.replace("[policy]\n", "[policy]\n" + "".join(settings), 1))


def receive_as_is(layout: Layout, key: str, signer: Ed25519PrivateKey, out: bytes, at: int) -> None:
    assert receive(layout, key, {"src/lines.py": out}, signer).won
    os.utime(layout.receipt(key), (at, at))


def clashing_pair(layout: Layout, signer: Ed25519PrivateKey) -> tuple[str, str]:
    late = received(layout, signer, "Late.", edit(1, "uno"), 2_000_000_000)
    early = received(layout, signer, "Early.", edit(1, "one"), 1_900_000_000)
    return early, late


ON = ("auto_merge = true\n", "auto_replay = true\n", "auto_replay_attempts = 1\n")


def test_a_conflicting_merge_is_replayed_and_the_old_job_closed_naming_it(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    policy(lines, *ON)
    early, late = clashing_pair(lines, signer)
    done = {p.key: p for p in pull(lines, replay=replay_unmergeable)}
    assert done[early].done == "applied" and done[late].done == "replayed"
    fresh = done[late].why.split("replayed as ")[1].split()[0]
    job = locate(lines, fresh)
    assert job.folder == "queue" and isinstance(job.job, JobV2) and job.job.replay_of == late
    assert job.job.inputs["src/lines.py"] is not None
    closed = json.loads(lines.job_file("rejected", late).read_bytes())
    assert fresh in json.dumps(closed) and "auto_replay" in json.dumps(closed)
    assert late not in {p.key for p in pull(lines, replay=replay_unmergeable)}  # recorded: not again


def test_a_replay_whose_chain_reached_the_cap_is_left_saying_so(
    lines: Layout, signer: Ed25519PrivateKey
) -> None:
    policy(lines, *ON)
    _, late = clashing_pair(lines, signer)
    fresh = pull(lines, replay=replay_unmergeable)[1].why.split("replayed as ")[1].split()[0]
    now = (lines.root / "src/lines.py").read_bytes()
    receive_as_is(lines, fresh, signer, edit(2, "dos", base=now).replace(b"one\n", b"uno\n"), 2_100_000_000)
    received(lines, signer, "Again.", now.replace(b"one\n", b"eins\n"), 2_050_000_000)
    done = {p.key: p for p in pull(lines, replay=replay_unmergeable)}
    assert done[fresh].done == "left"
    assert "not replayed: 1 replay(s) down its chain already" in done[fresh].why
    assert "policy.auto_replay_attempts = 1" in done[fresh].why
    assert locate(lines, fresh).folder == "running" and locate(lines, late).folder == "rejected"


def test_a_higher_cap_replays_again_down_the_chain(lines: Layout, signer: Ed25519PrivateKey) -> None:
    policy(lines, *ON[:2], "auto_replay_attempts = 2\n")
    clashing_pair(lines, signer)
    fresh = pull(lines, replay=replay_unmergeable)[1].why.split("replayed as ")[1].split()[0]
    now = (lines.root / "src/lines.py").read_bytes()
    receive_as_is(lines, fresh, signer, edit(2, "dos", base=now).replace(b"one\n", b"uno\n"), 2_100_000_000)
    received(lines, signer, "Again.", now.replace(b"one\n", b"eins\n"), 2_050_000_000)
    done = {p.key: p for p in pull(lines, replay=replay_unmergeable)}
    assert done[fresh].done == "replayed" and "(auto_replay, 2 of 2)" in done[fresh].why


def test_a_stale_receipt_whose_base_is_not_kept_is_replayed(lines: Layout, signer: Ed25519PrivateKey) -> None:
    policy(lines, *ON)
    late = received(lines, signer, "Late.", edit(12, "twelve"), 2_000_000_000)
    received(lines, signer, "Early.", edit(1, "one"), 1_900_000_000)
    for blob in blobs_dir(lines).iterdir():
        blob.unlink()
    done = {p.key: p for p in pull(lines, replay=replay_unmergeable)}
    assert done[late].done == "replayed" and "cannot be merged" in done[late].why


def test_without_auto_replay_a_conflict_is_left(lines: Layout, signer: Ed25519PrivateKey) -> None:
    policy(lines, "auto_merge = true\n")
    _, late = clashing_pair(lines, signer)
    done = {p.key: p for p in pull(lines, replay=replay_unmergeable)}
    assert done[late].done == "left" and locate(lines, late).folder == "running"


def test_the_cli_says_what_it_replayed(lines: Layout, signer: Ed25519PrivateKey) -> None:
    policy(lines, *ON[1:])
    _, late = clashing_pair(lines, signer)
    res = cli("apply", "--ready", "--merge", root=lines.root)
    assert res.exit_code == 0, res.stderr
    assert any(line.startswith(f"replayed {late}: ") for line in res.stdout.splitlines())


def test_a_cloned_config_cannot_switch_auto_replay_on(lines: Layout, signer: Ed25519PrivateKey) -> None:
    text = DEFAULT_CONFIG.replace("[policy]\n", "[policy]\n" + "".join(ON), 1)
    lines.config.write_text(text)  # as a clone brings it: not allowed
    assert load_config(lines.config).policy.auto_replay is False
    assert any("policy.auto_replay to true" in line for line in consent(lines).lines)
    _, late = clashing_pair(lines, signer)
    done = {p.key: p for p in pull(lines, merge=True, replay=replay_unmergeable)}
    assert done[late].done == "left" and locate(lines, late).folder == "running"


def test_raising_the_cap_needs_consent_again(lines: Layout) -> None:
    policy(lines, *ON)
    lines.config.write_text(
        lines.config.read_text().replace("auto_replay_attempts = 1", "auto_replay_attempts = 9")
    )
    assert load_config(lines.config).policy.auto_replay is False
    assert any("up to 9 replay(s)" in line for line in consent(lines).lines)


@pytest.mark.parametrize("value", ["0", "11", '"2"', "true"])
def test_a_bad_cap_is_one_clear_message_naming_the_file(lines: Layout, value: str) -> None:
    lines.config.write_text(
        DEFAULT_CONFIG.replace("[policy]\n", f"[policy]\nauto_replay_attempts = {value}\n", 1)
    )
    with pytest.raises(BadInput, match=r"config\.toml.*auto_replay_attempts"):
        load_config(lines.config)
