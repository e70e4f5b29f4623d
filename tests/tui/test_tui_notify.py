"""The board's notifications: a receipt that arrives while it watches, a job waiting for
approval, a failed check and a failed run, each told to the channels the operator chose."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from boardkit import Driver, run_board
from corekit import mint, receive
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import host_block, write_config

from core.store.layout import Layout, user_config_dir
from core.store.queue import claim
from tui.dialogs.bulk_ship import BulkShipDialog
from tui.dialogs.ship import ShipDialog
from tui.messages import CheckEnded
from tui.services.notices import Notices


def operator_notify(text: str) -> None:
    user_config_dir().mkdir(parents=True, exist_ok=True)
    (user_config_dir() / "config.toml").write_text(text)


def hook_into(path: Path, events: list[str]) -> str:
    """`[notify.command]` running a program that appends its stdin to `path`."""
    run = [sys.executable, "-c", f"import sys; open({str(path)!r}, 'ab').write(sys.stdin.buffer.read())"]
    return f"[notify.command]\nrun = {json.dumps(run)}\nevents = {json.dumps(events)}\n"


def heard(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    return [(d["event"], d["key"]) for d in map(json.loads, path.read_text().splitlines())]


async def notifier_ready(d: Driver) -> Notices:
    notices = d.board.query_one(Notices)
    await d.until(lambda: notices.notifier is not None, "the operator's [notify] read")
    return notices


async def test_a_receipt_that_arrives_rings_the_bell(repo: Layout, signer: Ed25519PrivateKey) -> None:
    operator_notify('[notify.bell]\nevents = ["receipt"]\n')
    key = mint(repo, "Make it better.").key
    async with run_board(repo.root) as d:
        rung: list[int] = []
        d.app.bell = lambda: rung.append(1)  # type: ignore[method-assign]
        await notifier_ready(d)
        receive(repo, key, {"src/app.py": b"def main():\n    return 2\n"}, signer)
        await d.until(lambda: rung == [1], "the bell")
        assert d.state_of(key) == "RECEIVED"


async def test_the_command_hears_of_receipts_and_approvals_but_not_of_what_was_there(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    out = tmp_path / "heard.jsonl"
    operator_notify(hook_into(out, ["receipt", "approval"]))
    there = mint(repo, "There before.", ["README.md"]).key
    receive(repo, there, {"README.md": b"# before\n"}, signer)
    arrives, fails = mint(repo, "Arrives.").key, mint(repo, "Fails.", ["src/util.py"]).key
    claim(repo, "w1", fails)
    async with run_board(repo.root) as d:
        await notifier_ready(d)
        receive(repo, arrives, {"src/app.py": b"def main():\n    return 2\n"}, signer)
        await d.until(lambda: len(heard(out)) == 2, "a receipt and an approval")
        assert heard(out) == [("receipt", arrives), ("approval", arrives)]
    docs = [json.loads(line) for line in out.read_text().splitlines()]
    assert docs[0]["source"] == "board" and docs[0]["state"] == "RECEIVED" and docs[0]["status"] == "ok"


async def test_a_failed_check_is_told(repo: Layout, tmp_path: Path) -> None:
    out = tmp_path / "heard.jsonl"
    operator_notify(hook_into(out, ["check_failed"]))
    key = mint(repo).key
    async with run_board(repo.root) as d:
        await notifier_ready(d)
        d.board.post_message(CheckEnded(key, "tests", True, "tests passed", manual=True))
        d.board.post_message(CheckEnded(key, "lint", False, "lint failed (exit 1)", manual=True))
        await d.until(lambda: heard(out) == [("check_failed", key)], "the failed check")
    [doc] = [json.loads(line) for line in out.read_text().splitlines()]
    assert doc["check"] == "lint" and doc["text"] == "lint failed (exit 1)"


async def test_a_run_the_board_shipped_that_its_host_failed_is_told(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    out = tmp_path / "heard.jsonl"
    operator_notify(hook_into(out, ["host_failed"]))
    write_config(repo, host_block("local", None, "echo the model is down >&2; exit 3"))
    key = mint(repo).key
    async with run_board(repo.root, key=key) as d:
        await notifier_ready(d)
        await d.press("s")
        dialog = await d.showing(ShipDialog)
        await d.until(lambda: dialog.done, "the ship to end")
        await d.until(lambda: heard(out) == [("host_failed", key)], "the host's failure")
    [doc] = [json.loads(line) for line in out.read_text().splitlines()]
    assert doc["host"] == "local" and doc["attempt"] == 1


async def test_a_failing_command_is_said_on_the_board(repo: Layout, signer: Ed25519PrivateKey) -> None:
    fails = [sys.executable, "-c", "import sys; sys.stderr.write('webhook down'); sys.exit(4)"]
    operator_notify(f'[notify.command]\nrun = {json.dumps(fails)}\nevents = ["receipt"]\n')
    key = mint(repo).key
    async with run_board(repo.root) as d:
        await notifier_ready(d)
        receive(repo, key, {"src/app.py": b"def main():\n    return 2\n"}, signer)
        await d.until(lambda: d.inbox.said("exit 4: webhook down"), "the command's failure, said")


async def test_a_job_of_a_batch_that_its_host_failed_is_told(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    out = tmp_path / "heard.jsonl"
    operator_notify(hook_into(out, ["host_failed"]))
    write_config(repo, host_block("local", None, "echo the model is down >&2; exit 3"))
    keys = [mint(repo, "One.").key, mint(repo, "Two.", ["src/util.py"]).key]
    async with run_board(repo.root) as d:
        await notifier_ready(d)
        await d.ship_marked(keys)
        dialog = await d.showing(BulkShipDialog)
        await d.until(lambda: dialog.board_batch.done, "the batch to end")
        await d.until(lambda: sorted(heard(out)) == sorted(("host_failed", k) for k in keys), "both failures")
