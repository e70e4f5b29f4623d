"""The board against a real demo repository: what it shows, and what each key changes on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from boardkit import (
    Notes,
    app_for,
    board_at,
    loaded,
    plain,
    screen_lines,
    select,
    showing,
    state_of,
    wait_for,
)
from textual.widgets import Log, OptionList, Static

from core.layout import Layout
from core.mint import build_job
from core.queue import claim, enqueue
from tui.demo import Demo
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.host_picker import HostPicker
from tui.dialogs.new_job import NewJobDialog
from tui.dialogs.preflight import PreflightDialog
from tui.dialogs.reason import ReasonDialog
from tui.dialogs.ship import ShipDialog
from tui.screens.diff import DiffScreen
from tui.screens.help import HelpScreen
from tui.widgets.detail import DetailPane

SIZE = (160, 48)
GENJOB = str(Path(sys.executable).with_name("genjob"))


def layout_of(demo: Demo) -> Layout:
    return Layout(demo.root)


async def test_every_state_shows_with_counts(demo: Demo) -> None:
    async with app_for(demo.root).run_test(size=SIZE) as pilot:
        b = await loaded(pilot)
        states = {state_of(pilot, k) for k in demo.keys.values()}
        assert states >= {
            "QUEUED",
            "RUNNING",
            "ORPHANED",
            "RECEIVED",
            "STALE",
            "FAILED",
            "APPLIED",
            "REJECTED",
            "INVALID",
        }
        assert state_of(pilot, demo.keys["running"]) == "RUNNING"
        assert state_of(pilot, demo.keys["orphan"]) == "ORPHANED"
        text = "\n".join(screen_lines(b.table))
        assert "INVALID" in text and "malformed JSON" in text
        counts = b.query_one("CountsBar").render().plain
        assert "QUEUED 5" in counts and "RECEIVED 3" in counts


async def test_markup_and_escapes_in_instructions_show_literally(demo: Demo) -> None:
    async with app_for(demo.root).run_test(size=(200, 50)) as pilot:
        b = await loaded(pilot)
        key = demo.keys["spoof"]
        await select(pilot, key)
        line = next(ln for ln in screen_lines(b.table) if ln.strip().startswith(key[:12]))
        assert "[bold red]x[/]" in line
        assert "[link=" in line
        detail = b.query_one(DetailPane)
        shown = plain(detail.query_one("#detail-job", Static))
        assert "[bold red]x[/]" in shown
        assert "[link=http://evil.example]the docs[/link]" in shown
        assert "␛[31mthis red␛[0m" in shown
        assert "<U+202E>" in shown
        assert "\x1b" not in shown and "\u202e" not in shown


async def test_invalid_file_shows_its_error(demo: Demo) -> None:
    async with app_for(demo.root).run_test(size=SIZE) as pilot:
        b = await loaded(pilot)
        await select(pilot, demo.keys["invalid"])
        title = plain(b.query_one("#detail-title", Static))
        assert "INVALID" in title
        assert "malformed JSON" in plain(b.query_one("#detail-job", Static))


async def test_change_by_another_process_appears(demo: Demo) -> None:
    async with app_for(demo.root).run_test(size=SIZE) as pilot:
        await loaded(pilot)
        proc = subprocess.run(
            [GENJOB, "--root", str(demo.root), "mint", "-m", "Add a docstring", "README.md"],
            capture_output=True,
            text=True,
            cwd=demo.root,
        )
        assert proc.returncode == 0, proc.stderr
        key = proc.stdout.strip()
        await wait_for(pilot, lambda: state_of(pilot, key) == "QUEUED", "the minted job")


async def test_change_from_a_thread_keeps_the_cursor_on_its_job(demo: Demo) -> None:
    layout = layout_of(demo)

    def mint(prefix: str, n: int) -> list[str]:
        jobs = [build_job(layout, f"{prefix} job {i}", ["README.md"]) for i in range(n)]
        thread = threading.Thread(target=lambda: [enqueue(layout, j) for j in jobs])
        thread.start()
        thread.join()
        return [j.key for j in jobs]

    async with app_for(demo.root).run_test(size=(160, 30)) as pilot:
        b = await loaded(pilot)
        first = mint("early", 40)
        await wait_for(pilot, lambda: all(k in b.view.rows for k in first), "40 new jobs")
        target = first[20]
        await select(pilot, target)
        line_before = b.table.cursor_index - int(b.table.scroll_y)
        later = mint("later", 40)
        await wait_for(pilot, lambda: all(k in b.view.rows for k in later), "40 more jobs")
        assert b.table.cursor_key == target
        assert b.table.cursor_index - int(b.table.scroll_y) == line_before


async def test_claim(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["queued"]
    async with board_at(demo.root, key, SIZE) as (pilot, _):
        await pilot.press("c")
        await wait_for(pilot, lambda: state_of(pilot, key) == "RUNNING", "the claim")
        assert layout.job_file("running", key).exists()
        assert not layout.job_file("queue", key).exists()
        lease = json.loads(layout.lease(key).read_bytes())
        assert lease["pid"] == os.getpid()


async def test_claim_lost_to_another_operator_is_a_message_not_a_crash(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["queued2"]
    notes = Notes()
    async with app_for(demo.root).run_test(size=SIZE, message_hook=notes) as pilot:
        await loaded(pilot)
        await select(pilot, key)
        claim(layout, "someone-else", key)  # between selection and keypress
        await pilot.press("c")
        await wait_for(pilot, lambda: notes.any("not QUEUED") or notes.any("is RUNNING"), "the refusal")
        await wait_for(pilot, lambda: state_of(pilot, key) == "RUNNING", "the other claim")
        lease = json.loads(layout.lease(key).read_bytes())
        assert lease["worker"] == "someone-else"


async def test_action_not_allowed_in_state_says_why(demo: Demo) -> None:
    notes = Notes()
    async with app_for(demo.root).run_test(size=SIZE, message_hook=notes) as pilot:
        await loaded(pilot)
        await select(pilot, demo.keys["queued"])
        await pilot.press("a")
        await wait_for(pilot, lambda: notes.any("approve is for RECEIVED"), "the refusal")
        await pilot.press("r")
        await wait_for(pilot, lambda: notes.any("requeue is for ORPHANED"), "the refusal")


async def test_reject_with_reason(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["drifted"]
    async with board_at(demo.root, key, SIZE) as (pilot, _):
        await pilot.press("x")
        await showing(pilot, ReasonDialog, "the reason dialog")
        await pilot.press("enter")  # an empty reason is refused
        assert isinstance(pilot.app.screen, ReasonDialog)
        await pilot.press(*"output drifted")
        await pilot.press("enter")
        await wait_for(pilot, lambda: state_of(pilot, key) == "REJECTED", "the rejection")
        record = json.loads(layout.job_file("rejected", key).read_bytes())
        assert record["rejection"]["reason"] == "output drifted"
        assert layout.receipt(key).exists()  # evidence stays


async def test_requeue_orphan_after_confirm(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["orphan"]
    async with board_at(demo.root, key, SIZE) as (pilot, _):
        await pilot.press("r")
        await showing(pilot, ConfirmDialog, "the confirm")
        await pilot.press("n")
        assert layout.job_file("running", key).exists()
        await pilot.press("r")
        await showing(pilot, ConfirmDialog, "the confirm")
        await pilot.press("y")
        await wait_for(pilot, lambda: state_of(pilot, key) == "QUEUED", "the requeue")
        assert layout.job_file("queue", key).exists()


async def test_replay_stale(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["stale"]
    async with board_at(demo.root, key, SIZE) as (pilot, b):
        await pilot.press("R")
        await wait_for(pilot, lambda: b.table.cursor_key not in (None, key), "the replayed job")
        new = b.table.cursor_key
        assert state_of(pilot, new) == "QUEUED"
        doc = json.loads(layout.job_file("queue", new).read_bytes())
        assert doc["replay_of"] == key


async def test_cancel_running_after_confirm(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["running"]
    async with board_at(demo.root, key, SIZE) as (pilot, _):
        await pilot.press("k")
        await showing(pilot, ConfirmDialog, "the confirm")
        await pilot.press("y")
        await wait_for(pilot, lambda: (layout.running / f"{key}.cancel").exists(), "the cancel request")


async def test_approve_preflight_then_apply(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["verified"]
    target = demo.root / "calc/__init__.py"
    before = target.read_bytes()
    async with board_at(demo.root, key, SIZE) as (pilot, _):
        await pilot.press("a")
        await showing(pilot, PreflightDialog, "the preflight")
        body = plain(pilot.app.screen.query_one("#preflight-body", Static))
        assert "calc/__init__.py" in body and "+2 -0" in body
        assert "signatures REQUIRED by policy" in body
        assert "fresh" in body and "every check passed" in body
        await pilot.press("n")
        assert target.read_bytes() == before
        await pilot.press("a")
        await showing(pilot, PreflightDialog, "the preflight")
        await pilot.press("y")
        await wait_for(pilot, lambda: state_of(pilot, key) == "APPLIED", "the apply")
        assert layout.job_file("applied", key).exists()
        assert target.read_bytes().startswith(before) and b"genjob demo edit" in target.read_bytes()


async def test_approve_refused_when_verification_fails(demo: Demo) -> None:
    key = demo.keys["untrusted"]
    before = (demo.root / "README.md").read_bytes()
    async with board_at(demo.root, key, SIZE) as (pilot, b):
        verify = plain(b.query_one("#detail-verify", Static))
        assert "✘ signature" in verify and "which is not a trusted key" in verify
        await pilot.press("a")
        await showing(pilot, PreflightDialog, "the preflight")
        assert "apply would be refused" in plain(pilot.app.screen.query_one("#preflight-body", Static))
        await pilot.press("y")
        assert isinstance(pilot.app.screen, PreflightDialog)
        await pilot.press("n")
    assert (demo.root / "README.md").read_bytes() == before


async def test_detail_sections(demo: Demo) -> None:
    async with app_for(demo.root).run_test(size=SIZE) as pilot:
        b = await loaded(pilot)
        await select(pilot, demo.keys["drifted"])
        verify = plain(b.query_one("#detail-verify", Static))
        assert "signatures REQUIRED by policy" in verify
        assert "✘ hashes" in verify and "artifact drift at calc/parse.py" in verify
        assert "✔ signature" in verify
        assert "calc/parse.py" in plain(b.query_one("#detail-diff", Static))
        assert "genjob demo edit" in plain(b.query_one("#detail-diff", Static))
        assert "received" in plain(b.query_one("#detail-timeline", Static))
        assert "edited calc/parse.py" in plain(b.query_one("#detail-output", Static))
        await select(pilot, demo.keys["running"])
        lease = plain(b.query_one("#detail-lease", Static))
        assert "lease fresh" in lease and "demo-worker@sandbox" in lease


async def test_full_screen_diff(demo: Demo) -> None:
    async with app_for(demo.root).run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await select(pilot, demo.keys["verified"])
        await pilot.press("d")
        await showing(pilot, DiffScreen, "the diff screen")
        body = plain(pilot.app.screen.query_one("#diff-body", Static))
        assert "calc/__init__.py" in body and "+ # genjob demo edit" in body
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(pilot.app.screen, DiffScreen), "the board")


async def test_new_job_refuses_a_secret_then_queues(demo: Demo) -> None:
    async with app_for(demo.root).run_test(size=SIZE) as pilot:
        b = await loaded(pilot)
        await pilot.press("n")
        await showing(pilot, NewJobDialog, "the new job dialog")
        dialog = pilot.app.screen
        files = dialog.query_one("#files")
        await wait_for(pilot, lambda: files.option_count > 0, "the file list")
        dialog.query_one("#instruction").text = 'Use the key api_key = "abcdefghijklmnop1234"'
        dialog.query_one("#file-filter").value = "calc/ops"
        await wait_for(pilot, lambda: files.option_count == 1, "the filtered file list")
        files.focus()
        await pilot.press("space")
        await pilot.press("ctrl+s")
        error = dialog.query_one("#newjob-error")
        await wait_for(pilot, lambda: "looks like it holds a secret" in plain(error), "the refusal")
        count = len(b.view.rows)
        dialog.query_one("#instruction").text = "Add a docstring to sub"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not isinstance(pilot.app.screen, NewJobDialog), plain(error))
        await wait_for(pilot, lambda: len(b.view.rows) == count + 1, "the new job")
        new = b.table.cursor_key
        await wait_for(
            pilot,
            lambda: b.table.cursor_key is not None and state_of(pilot, b.table.cursor_key) == "QUEUED",
            "selection",
        )
        doc = json.loads((demo.root / ".gen/queue" / f"{b.table.cursor_key}.json").read_bytes())
        assert doc["allowed_paths"] == ["calc/ops.py"] and doc["instruction"] == "Add a docstring to sub"
        assert new is not None


async def test_filter_by_text_and_state(demo: Demo) -> None:
    async with app_for(demo.root).run_test(size=SIZE) as pilot:
        b = await loaded(pilot)
        await pilot.press("slash")
        await pilot.press(*"tokenizer")
        await pilot.press("enter")
        await wait_for(pilot, lambda: 0 < len(b.view) < len(b.view.rows), "the text filter")
        assert all("tokenizer" in b.view.row_at(i).instruction.lower() for i in range(len(b.view)))
        await pilot.press("escape")
        await wait_for(pilot, lambda: len(b.view) == len(b.view.rows), "the filter to clear")
        await pilot.press("4")  # RECEIVED, the fourth chip
        await wait_for(pilot, lambda: len(b.view) == 3, "the state filter")
        assert {b.view.row_at(i).state.value for i in range(3)} == {"RECEIVED"}
        await pilot.press("4")
        await wait_for(pilot, lambda: len(b.view) == len(b.view.rows), "the state filter to clear")


async def test_click_a_count_filters(demo: Demo) -> None:
    async with app_for(demo.root).run_test(size=SIZE) as pilot:
        b = await loaded(pilot)
        bar = b.query_one("CountsBar")
        bar.render()
        start = next(s for s, _, state in bar._spans if state.value == "QUEUED")
        await pilot.click("CountsBar", offset=(start + 3, 0))
        await wait_for(pilot, lambda: len(b.view) == 5, "the QUEUED filter")


async def test_bulk_claim_confirms_with_the_count(demo: Demo) -> None:
    layout = layout_of(demo)
    keys = [demo.keys["queued"], demo.keys["queued3"]]
    async with app_for(demo.root).run_test(size=SIZE) as pilot:
        b = await loaded(pilot)
        for key in [*keys, demo.keys["verified"]]:
            await select(pilot, key)
            await pilot.press("space")
        assert b.table.marks == {*keys, demo.keys["verified"]}
        await pilot.press("c")
        await showing(pilot, ConfirmDialog, "the confirm")
        body = str(pilot.app.screen.body)
        assert "claim 2 marked job(s)?" in body and "1 other marked job(s) are skipped" in body
        await pilot.press("y")
        await wait_for(pilot, lambda: all(state_of(pilot, k) == "RUNNING" for k in keys), "the claims")
        assert all(layout.job_file("running", k).exists() for k in keys)
        assert not b.table.marks


async def test_readonly_refuses_every_change(demo: Demo) -> None:
    layout = layout_of(demo)
    notes = Notes()
    before = sorted(p.name for p in layout.gen.rglob("*") if "cache" not in p.parts)
    async with app_for(demo.root, readonly=True).run_test(size=SIZE, message_hook=notes) as pilot:
        b = await loaded(pilot)
        assert "READ-ONLY" in plain(b.query_one("#status", Static))
        await select(pilot, demo.keys["queued"])
        for key in ("c", "s", "x", "n"):
            await pilot.press(key)
        await select(pilot, demo.keys["verified"])
        await pilot.press("a")
        await select(pilot, demo.keys["orphan"])
        await pilot.press("r")
        await wait_for(pilot, lambda: sum("read-only board" in m for m in notes.messages) == 6, "6 refusals")
        assert isinstance(pilot.app.screen, type(b))
    after = sorted(p.name for p in layout.gen.rglob("*") if "cache" not in p.parts)
    assert after == before


async def test_help_lists_every_key(demo: Demo) -> None:
    async with app_for(demo.root).run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        await showing(pilot, HelpScreen, "the help screen")
        keys = {b.key for b in pilot.app.screen.bindings}
        assert {"c", "s", "a", "x", "r", "R", "k", "n", "d", "slash", "q", "space"} <= keys
        assert all(b.description for b in pilot.app.screen.bindings)
        await pilot.press("escape")
        await pilot.press("q")
    assert pilot.app.return_code == 0 or pilot.app.return_code is None


async def test_command_palette_offers_board_actions(demo: Demo) -> None:
    async with app_for(demo.root).run_test(size=SIZE) as pilot:
        b = await loaded(pilot)
        titles = [c.title for c in pilot.app.get_system_commands(b)]
        for name in ("Claim (c)", "Approve (a)", "Reject (x)", "Requeue (r)", "Replay (R)", "New (n)"):
            assert name in titles


async def test_narrow_terminal_puts_detail_below(demo: Demo) -> None:
    async with app_for(demo.root).run_test(size=(80, 24)) as pilot:
        b = await loaded(pilot)
        assert b.has_class("narrow")
        jobs, detail = b.query_one("#jobs"), b.query_one("#detail")
        assert detail.region.y > jobs.region.y
        await pilot.press("enter")
        assert b.maximized is detail
        await pilot.press("enter")
        assert b.maximized is None


async def test_ship_picks_a_host_tails_output_and_commits_a_receipt(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["queued3"]
    async with board_at(demo.root, key, SIZE) as (pilot, _):
        await pilot.press("s")
        await showing(pilot, HostPicker, "the host picker")
        hosts = pilot.app.screen.query_one(OptionList)
        assert hosts.option_count == 3  # local, tidy and slow-local
        hosts.focus()
        hosts.highlighted = 0
        await pilot.press("enter")
        await showing(pilot, ShipDialog, "the ship dialog")
        dialog = pilot.app.screen
        await wait_for(pilot, lambda: dialog.done, "the ship to end")
        assert dialog.succeeded, plain(dialog.query_one("#ship-status", Static))
        assert "receipt ok" in plain(dialog.query_one("#ship-status", Static))
        assert "edited calc/parse.py" in "\n".join(dialog.query_one(Log).lines)
        await pilot.press("escape")
        await wait_for(pilot, lambda: state_of(pilot, key) == "RECEIVED", "the receipt")
    assert layout.receipt(key).exists() and layout.signature(key).exists()


async def test_ship_cancel_ends_with_an_aborted_receipt(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["queued2"]
    async with board_at(demo.root, key, SIZE) as (pilot, _):
        await pilot.press("s")
        await showing(pilot, HostPicker, "the host picker")
        hosts = pilot.app.screen.query_one(OptionList)
        hosts.focus()
        # slow-local: its generator sleeps after each file
        hosts.highlighted = next(
            i for i in range(hosts.option_count) if "slow-local" in str(hosts.get_option_at_index(i).prompt)
        )
        await pilot.press("enter")
        await showing(pilot, ShipDialog, "the ship dialog")
        dialog = pilot.app.screen
        status = dialog.query_one("#ship-status", Static)
        await wait_for(
            pilot, lambda: any("edited" in ln for ln in dialog.query_one(Log).lines), lambda: plain(status)
        )
        await pilot.press("escape")
        await wait_for(pilot, lambda: dialog.done, "the ship to stop")
        assert not dialog.succeeded
        assert "aborted" in plain(dialog.query_one("#ship-status", Static))
        await pilot.press("escape")
        await wait_for(pilot, lambda: state_of(pilot, key) == "FAILED", "the aborted receipt")
    assert json.loads(layout.receipt(key).read_bytes())["status"] == "aborted"


async def test_bad_config_is_shown_and_nothing_crashes(demo: Demo) -> None:
    layout = layout_of(demo)
    async with app_for(demo.root).run_test(size=SIZE) as pilot:
        b = await loaded(pilot)
        layout.config.write_text("[policy\nrequire_signature = maybe\n")
        status = b.query_one("#status", Static)
        await wait_for(pilot, lambda: "not valid TOML" in plain(status), lambda: plain(status))
        assert "config.toml" in plain(status)
        await select(pilot, demo.keys["verified"])  # the detail still reads and verifies
        assert "✘ base" not in plain(b.query_one("#detail-verify", Static))


async def test_a_job_removed_on_disk_leaves_and_the_cursor_moves_on(demo: Demo) -> None:
    layout = layout_of(demo)
    async with app_for(demo.root).run_test(size=SIZE) as pilot:
        b = await loaded(pilot)
        key = demo.keys["queued3"]
        await select(pilot, key)
        index = b.table.cursor_index
        layout.job_file("queue", key).unlink()
        await wait_for(pilot, lambda: key not in b.view.rows, "the job to leave")
        assert b.table.cursor_key is not None and b.table.cursor_index == index


async def test_inconsistent_pair_shows_loudly_with_its_rule(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["queued"]
    async with app_for(demo.root).run_test(size=SIZE) as pilot:
        b = await loaded(pilot)
        data = layout.job_file("queue", key).read_bytes()
        layout.job_file("running", key).write_bytes(data)
        await wait_for(pilot, lambda: state_of(pilot, key) == "INCONSISTENT", "the inconsistent pair")
        await select(pilot, key)
        assert "R4: the claim happened, running wins" in plain(b.query_one("#detail-job", Static))


async def test_received_rows_say_whether_their_receipt_verifies(demo: Demo) -> None:
    async with app_for(demo.root).run_test(size=SIZE) as pilot:
        b = await loaded(pilot)
        keys = [demo.keys[k] for k in ("verified", "drifted", "untrusted")]
        await wait_for(pilot, lambda: all(k in b.table.verdicts for k in keys), "the verdicts")
        lines = {ln.split()[0]: ln for ln in screen_lines(b.table)[1:] if ln.strip()}
        assert "RECEIVED ✔" in lines[keys[0][:12]]
        assert "RECEIVED ✘" in lines[keys[1][:12]]
        assert "RECEIVED ✘" in lines[keys[2][:12]]
