"""Checks on the board: run as receipts arrive, shown in the list and the Verify tab, run
again (`t`) and stopped (`T`), in the approve preflight and in a bulk approve.

The demo's `tests` check (its unittest suite, required by policy) ran at build time: it
passed on the `verified` job's receipt and failed on `checks_failed`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import signal
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from boardkit import Driver, plain, run_board
from checkkit import processes_left, processes_with, unique_sleep
from corekit import set_config
from textual.message import Message
from textual.widgets import Button, Static

from core.model.standing import Standing
from core.review import sandbox
from core.store.layout import Layout
from tui.demo import Demo
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.host_picker import HostPicker
from tui.dialogs.preflight import PreflightDialog
from tui.dialogs.ship import ShipDialog
from tui.messages import ChecksConfigured, ChecksFound, CheckStarted
from tui.services.check_runner import CheckRunner
from tui.services.feed import BoardFeed
from tui.widgets.detail import DetailPane

pytestmark = pytest.mark.skipif(sandbox.tools().bwrap is None, reason="bwrap is not installed")


def layout_of(demo: Demo) -> Layout:
    return Layout(demo.root)


def add_checks(demo: Demo, text: str) -> None:
    layout = layout_of(demo)
    set_config(layout, layout.config.read_text() + text)


def verify_tab(d: Driver) -> str:
    return plain(d.board.query_one("#detail-verify", Static))


def record(demo: Demo, key: str, name: str = "tests") -> dict[str, object]:
    return json.loads(layout_of(demo).check_record(key, name).read_bytes())


async def test_the_list_and_the_verify_tab_show_passed_and_failed_checks(demo: Demo) -> None:
    good, bad = demo.keys["verified"], demo.keys["checks_failed"]
    async with run_board(demo.root, key=bad) as d:
        await d.until(lambda: d.table.checks.get(bad) == "✘" and d.table.checks.get(good) == "✔", "the marks")
        lines = d.lines()
        assert "CHK" in lines[0]
        assert "✘" in next(line for line in lines if bad[:12] in line)
        assert "✔" in next(line for line in lines if good[:12] in line)
        await d.until(lambda: "✘ tests" in verify_tab(d), "the failed check in the Verify tab")
        text = verify_tab(d)
        assert "required" in text and "failed (exit 1)" in text and "sandboxed (bwrap)" in text
        assert "AssertionError: 3 != 3.5" in text  # the failure's last words, kept as evidence
        assert "the receipt verifies; apply waits for the required check(s) tests" in text
        tabs = d.board.query_one(DetailPane).query_one("#detail-tabs")
        assert "Verify ✔ ✘" in str(tabs.get_tab("tab-verify").label)  # type: ignore[attr-defined]
        await d.select(good)
        await d.until(lambda: "✔ tests" in verify_tab(d), "the passed check")
        assert "passed in" in verify_tab(d) and "apply waits" not in verify_tab(d)


async def ship_on_the_first_host(d: Driver) -> None:
    """`s` on the selected job, the first host picked, and the ship waited for."""
    await d.press("s")
    picker = await d.showing(HostPicker)
    picker.query_one("OptionList").highlighted = 0  # type: ignore[attr-defined]
    await d.press("enter")
    dialog = await d.showing(ShipDialog)
    await d.until(lambda: dialog.done, "the ship to end")


async def test_a_receipt_that_arrives_has_its_checks_run_by_the_board(demo: Demo) -> None:
    key = demo.keys["queued3"]
    async with run_board(demo.root, key=key) as d:
        await ship_on_the_first_host(d)
        await d.until(lambda: d.table.checks.get(key) == "✔", "the board to run the new receipt's check")
    doc = record(demo, key)
    assert doc["result"] == "passed" and doc["sandbox"] == "bwrap"


async def test_a_receipt_judged_before_the_config_is_read_still_has_its_checks_run(
    demo: Demo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The receipts' standings and the config's `[check_runs]` arrive from two workers, in
    either order: here the config is held back until the receipt was judged."""
    key = demo.keys["verified"]
    add_checks(demo, '\n[checks.quick]\nrun = "echo quick"\ntimeout = 60\n')
    judged = asyncio.Event()
    consider, read_checks = CheckRunner.consider, BoardFeed._read_checks

    def considered(runner: CheckRunner, standings: Mapping[str, Standing]) -> None:
        consider(runner, standings)
        if key in standings:
            judged.set()

    async def read_late(feed: BoardFeed) -> None:
        await judged.wait()
        await read_checks(feed)

    monkeypatch.setattr(CheckRunner, "consider", considered)
    monkeypatch.setattr(BoardFeed, "_read_checks", read_late)
    async with run_board(demo.root, key=key) as d:
        await d.until(lambda: d.inbox.said("check quick passed in"), "the check to run by itself")
    assert record(demo, key, "quick")["result"] == "passed"


async def test_a_running_check_streams_its_output_and_t_capital_stops_it(demo: Demo) -> None:
    marker = unique_sleep()
    add_checks(demo, f'\n[checks.slow]\nrun = "echo started the slow one; sleep {marker}"\ntimeout = 600\n')
    key = demo.keys["verified"]
    async with run_board(demo.root, key=key) as d:
        await d.until(lambda: "●" in d.table.checks.get(key, ""), "the slow check to start by itself")
        await d.until(lambda: "started the slow one" in verify_tab(d), "its output in the Verify tab")
        text = verify_tab(d)
        assert "● slow" in text and "running for" in text
        assert processes_with(marker)
        await d.press("T")
        await d.until(lambda: not d.board.checks.running(key), "the stop")
        await d.until(lambda: d.inbox.said("check slow stopped; no record kept"), "the report")
        await d.until(lambda: d.table.checks.get(key) == "✔·", "the marks without it")
        await d.until(lambda: "· slow" in verify_tab(d), "the Verify tab without it")
        assert "not run yet" in verify_tab(d)
        d.board.checks.stop([demo.keys["checks_failed"]])
        await d.until(lambda: not d.board.checks.live, "every check to stop")
    assert processes_left(marker) == []
    assert not layout_of(demo).check_record(key, "slow").exists()
    assert not any(p.is_dir() for p in layout_of(demo).scratch.iterdir())


async def test_a_check_stopped_with_t_capital_is_not_started_again_by_itself(demo: Demo) -> None:
    """Stopping holds: the receipt is judged again after the stop, and the stopped check,
    not run, would be one to run by itself; it waits for `t` instead."""
    marker = unique_sleep()
    add_checks(demo, f'\n[checks.slow]\nrun = "echo started; sleep {marker}"\ntimeout = 600\n')
    key = demo.keys["verified"]
    async with run_board(demo.root, key=key) as d:
        await d.until(lambda: d.board.checks.running(key), "the slow check to start by itself")
        await d.press("T")
        await d.until(lambda: not d.board.checks.running(key), "the stop")
        await d.press("t")
        await d.until(lambda: d.board.checks.running(key), "t to start it again")
        await d.press("T")
        await d.until(lambda: not d.board.checks.running(key), "the second stop")
        for _ in range(2):
            seen = len(d.inbox.kinds)
            d.board.feed.judge([key])
            await d.until(lambda seen=seen: ChecksFound in d.inbox.kinds[seen:], "the receipt judged again")
            await d.pilot.pause()
            assert not d.board.checks.running(key), "a stopped check started again by itself"
    assert processes_left(marker) == []
    assert not layout_of(demo).check_record(key, "slow").exists()


async def test_a_check_run_with_t_and_stopped_is_not_started_by_itself_by_any_later_judging(
    demo: Demo,
) -> None:
    """`T` holds whoever started the check: here `t`, on a board that runs no check by
    itself until the config, read again, says it should. Neither that rescan, nor a file
    event on the receipt, nor the receipt judged again, nor the preflight opened, starts it."""
    marker = unique_sleep()
    slow = f'\n[checks.slow]\nrun = "echo started; sleep {marker}"\ntimeout = 600\n'
    add_checks(demo, slow + "\n[check_runs]\non_receipt = false\n")
    layout = layout_of(demo)
    key = demo.keys["verified"]
    async with run_board(demo.root, key=key) as d:
        runner = d.board.checks
        await d.until(lambda: ChecksConfigured in d.inbox.kinds, "the config's [check_runs]")
        await d.press("t")
        await d.until(lambda: runner.running(key) and processes_with(marker), "t to start the slow check")
        await d.press("T")
        await d.until(lambda: not runner.running(key), "the stop")

        async def judged_after(trigger: Callable[[], object], kind: type[Message], what: str) -> None:
            seen = len(d.inbox.kinds)
            trigger()
            await d.until(lambda: kind in d.inbox.kinds[seen:], what)
            await d.pilot.pause()
            assert not runner.running(key), f"the stopped check started again after {what}"

        config = layout.config.read_text().replace("on_receipt = false", "on_receipt = true")
        await judged_after(lambda: set_config(layout, config), ChecksConfigured, "the config read again")
        assert runner.on_receipt is True
        tests_record = layout.check_record(key, "tests")

        def rewrite_record() -> None:  # another check's record written again: its folder's event
            tests_record.with_suffix(".again").write_bytes(tests_record.read_bytes())
            os.replace(tests_record.with_suffix(".again"), tests_record)

        await judged_after(rewrite_record, ChecksFound, "a file event in its checks")
        await judged_after(lambda: d.board.feed.judge([key]), ChecksFound, "the receipt judged again")
        await d.press("a")
        await d.showing(PreflightDialog)
        await judged_after(lambda: d.board.feed.judge([key]), ChecksFound, "the preflight opened")
        await d.press("escape")
        # A receipt with other outputs (a new attempt's) has its checks run by themselves.
        renewed = dataclasses.replace(d.board.standings[key], outputs="a new receipt's outputs")
        d.board.post_message(ChecksFound({key: renewed}))
        await d.until(lambda: runner.running(key), "the check to run by itself on the new receipt")
        runner.stop(d.board.view.rows)
        await d.until(lambda: not runner.live, "every check to stop")
    assert processes_left(marker) == []
    assert not layout.check_record(key, "slow").exists()


async def test_t_runs_the_checks_again(demo: Demo) -> None:
    key = demo.keys["verified"]
    before = record(demo, key)["started_at"]
    async with run_board(demo.root, key=key) as d:
        await d.until(lambda: d.table.checks.get(key) == "✔", "the marks")
        await d.press("t")
        await d.until(lambda: d.inbox.said("check tests passed in"), "the run's report")
    assert record(demo, key)["started_at"] != before


async def test_the_preflight_shows_the_checks_and_refuses_while_a_required_one_failed(demo: Demo) -> None:
    bad, good = demo.keys["checks_failed"], demo.keys["verified"]
    async with run_board(demo.root, key=bad) as d:
        await d.press("a")
        dialog = await d.showing(PreflightDialog)
        body = plain(d.screen.query_one("#preflight-body", Static))
        assert "apply would be refused" in body
        assert "required check(s) not passed on these outputs: tests" in body
        assert "✘ tests (required) failed (exit 1)" in body
        assert dialog.query_one("#yes", Button).disabled
        await d.press("y")
        await d.until(lambda: d.inbox.said("required checks have not passed (tests)"), "the refusal")
        assert d.screen is dialog
        await d.press("n")
        await d.select(good)
        await d.press("a")
        await d.showing(PreflightDialog)
        body = plain(d.screen.query_one("#preflight-body", Static))
        assert "every check passed" in body and "✔ tests (required) passed in" in body
    assert not layout_of(demo).job_file("applied", bad).exists()


async def test_the_open_preflight_follows_a_required_check_as_it_ends(demo: Demo) -> None:
    marker = unique_sleep()
    layout = layout_of(demo)
    text = layout.config.read_text().replace(
        'require_checks = ["tests"]', 'require_checks = ["tests", "gate"]'
    )
    set_config(layout, text + f'\n[checks.gate]\nrun = "sleep {marker}; true"\ntimeout = 600\n')
    key = demo.keys["verified"]
    async with run_board(demo.root, key=key) as d:
        await d.until(lambda: bool(processes_with(marker)), "the gate check to start by itself")
        await d.press("a")
        dialog = await d.showing(PreflightDialog)
        assert dialog.query_one("#yes", Button).disabled
        assert "gate" in dialog.preflight.checks_missing
        for pid in processes_with(marker):  # the sleep ends, and its shell goes on to `true`
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"sleep"):
                os.kill(pid, signal.SIGTERM)
        await d.until(lambda: not dialog.query_one("#yes", Button).disabled, "apply to be offered")
        assert "every check passed" in d.text("#preflight-body")
        assert d.screen is dialog


async def test_bulk_approve_takes_the_jobs_whose_required_checks_passed_and_says_why_not_the_others(
    demo: Demo,
) -> None:
    keys = {role: demo.keys[role] for role in ("verified", "checks_failed", "untrusted", "queued")}
    async with run_board(demo.root) as d:
        await d.until(lambda: keys["checks_failed"] in d.table.checks, "the check marks")
        for key in keys.values():
            await d.select(key)
            await d.press("space")
        await d.press("a")
        dialog = await d.showing(ConfirmDialog)
        body = plain(dialog.query_one(".dialog-body Static", Static))
        assert "Approve 1 of 4 marked jobs" in body
        assert "3 left out" in body
        assert "1: not RECEIVED" in body
        assert f"1: required checks failed: {keys['checks_failed'][:12]}" in body
        assert f"1: the receipt does not verify: {keys['untrusted'][:12]}" in body
        await d.press("y")
        await d.until(lambda: d.state_of(keys["verified"]) == "APPLIED", "the apply")
        assert d.state_of(keys["checks_failed"]) == "RECEIVED" and d.state_of(keys["untrusted"]) == "RECEIVED"


async def test_bulk_approve_with_nothing_approvable_says_why_and_asks_nothing(demo: Demo) -> None:
    async with run_board(demo.root) as d:
        for role in ("checks_failed", "untrusted"):
            await d.select(demo.keys[role])
            await d.press("space")
        await d.press("a")
        await d.until(lambda: d.inbox.said("None of the 2 marked jobs may be approved now"), "the refusal")
        assert d.inbox.said("1: required checks failed") and d.inbox.said("1: the receipt does not verify")
        assert d.screen is d.board


async def test_a_read_only_board_runs_no_check(demo: Demo) -> None:
    add_checks(demo, '\n[checks.quick]\nrun = "true"\n')
    key = demo.keys["verified"]
    async with run_board(demo.root, key=key, readonly=True) as d:
        await d.until(lambda: d.table.checks.get(key) == "✔·", "the marks")
        assert not d.board.checks.live
        await d.press("t")
        await d.until(lambda: d.inbox.said("read-only board: run checks refused"), "the refusal")
    assert not layout_of(demo).check_record(key, "quick").exists()


async def test_unsandboxed_checks_are_said_to_be_on_the_board(demo: Demo) -> None:
    layout = layout_of(demo)
    set_config(layout, layout.config.read_text().replace('sandbox = "bwrap"', 'sandbox = "none"'))
    key = demo.keys["verified"]
    async with run_board(demo.root, key=key) as d:
        await d.until(
            lambda: "checks UNSANDBOXED: tests" in plain(d.board.query_one("#status", Static)), "status"
        )
        await d.until(lambda: "UNSANDBOXED" in verify_tab(d), "the Verify tab")


def test_the_demo_checks_ran_sandboxed(demo: Demo) -> None:
    for role, result in (("verified", "passed"), ("checks_failed", "failed"), ("applied", "passed")):
        doc = record(demo, demo.keys[role])
        assert doc["result"] == result and doc["sandbox"] == "bwrap", role
    assert Path(demo.root / ".gen/config.toml").read_text().count('require_checks = ["tests"]') == 1


def started_checks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, int, int]]:
    """Each check the board starts, as it starts: (key, name, how many checks had started
    and not ended then, this one included, and how many were under way or waiting)."""
    seen: list[tuple[str, str, int, int]] = []
    post = CheckRunner.post_message

    def observed(runner: CheckRunner, message: Message) -> bool:
        if isinstance(message, CheckStarted):
            running = sum(1 for live in runner.live.values() if live.started_at is not None)
            seen.append((message.key, message.name, running, len(runner.live)))
        return post(runner, message)

    monkeypatch.setattr(CheckRunner, "post_message", observed)
    return seen


async def test_with_on_receipt_off_an_arriving_receipt_gets_no_check_and_t_still_runs_them(
    demo: Demo, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_checks(
        demo, '\n[checks.quick]\nrun = "echo quick"\ntimeout = 60\n\n[check_runs]\non_receipt = false\n'
    )
    started = started_checks(monkeypatch)
    key, verified = demo.keys["queued3"], demo.keys["verified"]
    async with run_board(demo.root, key=key) as d:
        await d.until(lambda: ChecksConfigured in d.inbox.kinds, "the config's [check_runs]")
        assert d.board.checks.on_receipt is False
        await d.until(lambda: d.table.checks.get(verified) == "✔·", "a receipt whose quick check never ran")
        await ship_on_the_first_host(d)
        await d.press("escape")
        # The new receipt is judged (its marks shown) in the same step that would start its checks.
        await d.until(lambda: d.table.checks.get(key) == "··", "the new receipt's marks: nothing run")
        assert d.state_of(key) == "RECEIVED"
        assert not d.board.checks.live and started == []
        await d.select(key)
        await d.press("t")
        await d.until(
            lambda: d.inbox.said("check quick passed in") and d.inbox.said("check tests passed in"),
            "the checks run by hand",
        )
    assert sorted((k, name) for k, name, _, _ in started) == [(key, "quick"), (key, "tests")]
    assert record(demo, key, "quick")["result"] == "passed"
    assert not layout_of(demo).check_record(verified, "quick").exists()


async def test_with_concurrency_1_one_check_runs_at_a_time(
    demo: Demo, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_checks(demo, '\n[checks.slow]\nrun = "sleep 1"\ntimeout = 60\n\n[check_runs]\nconcurrency = 1\n')
    started = started_checks(monkeypatch)
    async with run_board(demo.root) as d:
        runner = d.board.checks
        await d.until(lambda: len(started) >= 2, "two receipts' slow checks to start, one after the other")
        await d.until(lambda: not runner.live, "every check the board started by itself to end")
        ended = [note for note in d.inbox.notes if note.startswith("check slow ")]
    assert runner.concurrency == 1
    keys = {key for key, name, _, _ in started if name == "slow"}
    assert len(keys) >= 2 and len(ended) == len(keys)
    # When the first started, the others were already asked for and waiting for the slot.
    assert started[0][3] >= 2
    assert [running for _, _, running, _ in started] == [1] * len(started)
    docs = [record(demo, key, "slow") for key in keys]
    spans = sorted(
        (float(doc["started_at"]), float(doc["started_at"]) + float(doc["duration"])) for doc in docs
    )
    for (_, first_end), (second_start, _) in itertools.pairwise(spans):
        assert second_start >= first_end
