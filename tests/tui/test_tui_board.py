"""The board against a real demo repository: what it shows, and what each key changes on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from boardkit import plain, run_board
from textual.widgets import Log, OptionList, Static, TabbedContent

from core.model.lifecycle import STATE_ORDER, State
from core.plan.mint import build_job
from core.read.board_view import BoardListing, board_listing
from core.store.layout import Layout
from core.store.queue import claim, enqueue
from tui.demo import Demo
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.host_picker import HostPicker
from tui.dialogs.new_job import NewJobDialog
from tui.dialogs.preflight import PreflightDialog
from tui.dialogs.reason import ReasonDialog
from tui.dialogs.ship import ShipDialog
from tui.screens.diff import DiffScreen
from tui.screens.help import HelpScreen
from tui.widgets.counts import CountsBar
from tui.widgets.detail import DetailPane
from tui.widgets.job_table import JobTable

GENJOB = str(Path(sys.executable).with_name("genjob"))


def layout_of(demo: Demo) -> Layout:
    return Layout(demo.root)


async def test_every_state_shows_with_counts(demo: Demo) -> None:
    async with run_board(demo.root) as d:
        b = d.board
        states = {d.state_of(k) for k in demo.keys.values()}
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
        assert d.state_of(demo.keys["running"]) == "RUNNING"
        assert d.state_of(demo.keys["orphan"]) == "ORPHANED"
        text = "\n".join(d.lines())
        assert "INVALID" in text and "malformed JSON" in text
        counts = b.query_one("CountsBar").render().plain
        assert "QUEUED 5" in counts and "RECEIVED 4" in counts


@pytest.mark.parametrize("whole", [True, False], ids=["small-queue", "large-queue"])
async def test_a_small_queue_is_read_whole_and_a_large_one_in_view(
    demo: Demo, whole: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Up to `READ_WHOLE` jobs, the full scan reads every row: the counts are exact, with
    no ≈. Past it, the rows out of view stay known by name until they are scrolled to."""
    if not whole:
        monkeypatch.setattr("tui.services.feed.READ_WHOLE", len(demo.keys) - 1)
    async with run_board(demo.root, (80, 24)) as d:
        view, table = d.board.view, d.board.table
        # The queue's stamps are read after the rows, in the same scan.
        await d.until(lambda: bool(view.stamps) and not table.unread_in_view(), "the scan to read its rows")
        assert len(view.where) > table.scrollable_content_region.height, "rows out of view"
        counts = d.board.query_one("CountsBar").render().plain
        if whole:
            assert view.unread == 0 and "≈" not in counts
        else:
            assert view.unread > 0 and counts.endswith("≈")


async def test_the_first_rows_come_before_the_finished_jobs_are_listed(
    demo: Demo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first scan lists the folders of the jobs that need the operator, posts them,
    and then lists every folder: the finished jobs join the list after its first rows."""
    listings: list[tuple[bool, set[State]]] = []

    def recorded(gen: str, *, finished: bool = True) -> BoardListing:
        got = board_listing(gen, finished=finished)
        listings.append((finished, set(got.where.values())))
        return got

    monkeypatch.setattr("tui.services.feed.board_listing", recorded)
    async with run_board(demo.root) as d:
        assert d.state_of(demo.keys["applied"]) == "APPLIED"
        assert "APPLIED 1" in d.board.query_one("CountsBar").render().plain
    (early, named), (whole, everything) = listings[:2]
    assert (early, whole) == (False, True)
    assert State.QUEUED in named and not named & {State.APPLIED, State.REJECTED}
    assert {State.APPLIED, State.REJECTED} <= everything


async def test_until_the_operator_moves_it_the_cursor_stays_on_the_top_row(demo: Demo) -> None:
    """Rows read at the start move jobs between states; a job no one chose is not followed
    down the list, so the board opens at its top on the job that needs the operator first."""
    async with run_board(demo.root, (80, 24)) as d:
        table = d.table
        await d.until(lambda: not d.board.view.unread, "every job read")
        assert (int(table.scroll_y), table.cursor_key) == (0, d.board.view.key_at(0))
        await d.press("down")
        assert table.cursor_key == d.board.view.key_at(1)


async def test_markup_and_escapes_in_instructions_show_literally(demo: Demo) -> None:
    async with run_board(demo.root, (200, 50)) as d:
        b = d.board
        key = demo.keys["spoof"]
        await d.select(key)
        line = next(ln for ln in d.lines() if ln.strip().startswith(key[:12]))
        assert "[bold red]x[/]" in line
        # The row may end in "[lin…" once the overlap mark takes its two columns; the
        # detail below holds the whole link, literally.
        assert "[lin" in line
        detail = b.query_one(DetailPane)
        shown = plain(detail.query_one("#detail-job", Static))
        assert "[bold red]x[/]" in shown
        assert "[link=http://evil.example]the docs[/link]" in shown
        assert "␛[31mthis red␛[0m" in shown
        assert "<U+202E>" in shown
        assert "\x1b" not in shown and "\u202e" not in shown


async def test_the_detail_tabs_wait_for_the_first_rows_and_then_show_the_job(
    demo: Demo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first frame shows the list without the detail's tabs; they come right after it,
    holding the job and the tab chosen while they were not there yet."""
    built_after: list[bool] = []
    build = DetailPane.build

    async def watched_build(pane: DetailPane) -> None:
        built_after.append(pane.screen.query_one(JobTable)._rows_drawn)
        pane.show_tab("diff")  # chosen before the tabs exist
        await build(pane)

    monkeypatch.setattr(DetailPane, "build", watched_build)
    async with run_board(demo.root, key=demo.keys["drifted"]) as d:
        b = d.board
        await d.until(lambda: bool(b.query("#detail-tabs")), "the detail tabs")
        assert built_after and all(built_after)
        tabs = b.query_one("#detail-tabs", TabbedContent)
        assert tabs.active == "tab-diff"
        title = b.query_one("#detail-title", Static)
        await d.until(lambda: demo.keys["drifted"] in plain(title), "the detail")
        assert "calc/parse.py" in plain(b.query_one("#detail-diff", Static))
        await d.press("right")
        assert tabs.active == "tab-timeline"


async def test_invalid_file_shows_its_error(demo: Demo) -> None:
    async with run_board(demo.root) as d:
        b = d.board
        await d.select(demo.keys["invalid"])
        title = plain(b.query_one("#detail-title", Static))
        assert "INVALID" in title
        assert "malformed JSON" in plain(b.query_one("#detail-job", Static))


async def test_change_by_another_process_appears(demo: Demo) -> None:
    async with run_board(demo.root) as d:
        proc = subprocess.run(
            [GENJOB, "--root", str(demo.root), "mint", "-m", "Add a docstring", "README.md"],
            capture_output=True,
            text=True,
            cwd=demo.root,
        )
        assert proc.returncode == 0, proc.stderr
        key = proc.stdout.strip()
        await d.until(lambda: d.state_of(key) == "QUEUED", "the minted job")


async def test_change_from_a_thread_keeps_the_cursor_on_its_job(demo: Demo) -> None:
    layout = layout_of(demo)

    async with run_board(demo.root, (160, 30)) as d:
        b = d.board
        first = mint_queued(layout, "early", 40)
        await d.until(lambda: all(k in b.view.rows for k in first), "40 new jobs")
        target = first[20]
        await d.select(target)
        line_before = b.table.cursor_index - int(b.table.scroll_y)
        later = mint_queued(layout, "later", 40)
        await d.until(lambda: all(k in b.view.rows for k in later), "40 more jobs")
        assert b.table.cursor_key == target
        assert b.table.cursor_index - int(b.table.scroll_y) == line_before


def mint_queued(layout: Layout, prefix: str, n: int) -> list[str]:
    """`n` jobs minted and queued by another thread, as another process would."""
    jobs = [build_job(layout, f"{prefix} job {i}", ["README.md"]) for i in range(n)]
    thread = threading.Thread(target=lambda: [enqueue(layout, j) for j in jobs])
    thread.start()
    thread.join()
    return [j.key for j in jobs]


async def test_arrivals_above_the_cursor_leave_the_rows_shown_in_place(demo: Demo) -> None:
    layout = layout_of(demo)
    async with run_board(demo.root, (160, 30)) as d:
        b, table = d.board, d.table

        async def arrive(prefix: str, n: int) -> None:
            keys = mint_queued(layout, prefix, n)
            await d.until(
                lambda: all((r := b.view.rows.get(k)) and r.attempts is not None for k in keys),
                f"the {prefix} jobs read",
            )

        def shown() -> list[str]:
            return [line[2:14] for line in d.lines()[1:]]

        def cursor_line() -> int:
            assert table.cursor_index is not None
            return table.cursor_index - int(table.scroll_y)

        await arrive("early", 60)
        queued = sum(
            n for s, n in b.view.counts.items() if STATE_ORDER.index(s) < STATE_ORDER.index(State.QUEUED)
        )
        # The view starts inside the queue, whose newest jobs come first: above its top.
        table.scroll_to(y=queued + 5, animate=False, immediate=True, force=True)
        table.select(b.view.key_at(queued + 5 + table.page // 2))
        before, line, cursor = shown(), cursor_line(), table.cursor_key
        await arrive("later", 5)
        assert (table.cursor_key, cursor_line(), shown()) == (cursor, line, before)

        # The view starts above the queue: the new jobs push the cursor down, the top stays.
        top = queued - 3
        table.scroll_to(y=top, animate=False, immediate=True, force=True)
        table.select(b.view.key_at(top + 10))
        before, line, cursor = shown(), cursor_line(), table.cursor_key
        await arrive("last", 4)
        assert int(table.scroll_y) == top
        assert shown()[:3] == before[:3]
        assert shown()[7 : table.page] == before[3 : table.page - 4]
        assert (table.cursor_key, cursor_line()) == (cursor, line + 4)


async def test_claim(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["queued"]
    async with run_board(demo.root, key=key) as d:
        await d.press("c")
        await d.until(lambda: d.state_of(key) == "RUNNING", "the claim")
        assert layout.job_file("running", key).exists()
        assert not layout.job_file("queue", key).exists()
        lease = json.loads(layout.lease(key).read_bytes())
        assert lease["pid"] == os.getpid()


async def test_claim_lost_to_another_operator_is_a_message_not_a_crash(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["queued2"]
    async with run_board(demo.root) as d:
        await d.select(key)
        claim(layout, "someone-else", key)  # between selection and keypress
        await d.press("c")
        await d.until(lambda: d.inbox.said("not QUEUED") or d.inbox.said("is RUNNING"), "the refusal")
        await d.until(lambda: d.state_of(key) == "RUNNING", "the other claim")
        lease = json.loads(layout.lease(key).read_bytes())
        assert lease["worker"] == "someone-else"


async def test_action_not_allowed_in_state_says_why(demo: Demo) -> None:
    async with run_board(demo.root) as d:
        await d.select(demo.keys["queued"])
        await d.press("a")
        await d.until(lambda: d.inbox.said("approve is for RECEIVED"), "the refusal")
        await d.press("r")
        await d.until(lambda: d.inbox.said("requeue is for ORPHANED"), "the refusal")


async def test_reject_with_reason(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["drifted"]
    async with run_board(demo.root, key=key) as d:
        await d.press("x")
        await d.showing(ReasonDialog)
        await d.press("enter")  # an empty reason is refused
        assert isinstance(d.screen, ReasonDialog)
        await d.press(*"output drifted")
        await d.press("enter")
        await d.until(lambda: d.state_of(key) == "REJECTED", "the rejection")
        record = json.loads(layout.job_file("rejected", key).read_bytes())
        assert record["rejection"]["reason"] == "output drifted"
        assert layout.receipt(key).exists()  # evidence stays


async def test_requeue_orphan_after_confirm(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["orphan"]
    async with run_board(demo.root, key=key) as d:
        await d.press("r")
        await d.showing(ConfirmDialog)
        await d.press("n")
        assert layout.job_file("running", key).exists()
        await d.press("r")
        await d.showing(ConfirmDialog)
        await d.press("y")
        await d.until(lambda: d.state_of(key) == "QUEUED", "the requeue")
        assert layout.job_file("queue", key).exists()


async def test_replay_stale(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["stale"]
    async with run_board(demo.root, key=key) as d:
        b = d.board
        await d.press("R")
        await d.until(lambda: b.table.cursor_key not in (None, key), "the replayed job")
        new = b.table.cursor_key
        assert d.state_of(new) == "QUEUED"
        doc = json.loads(layout.job_file("queue", new).read_bytes())
        assert doc["replay_of"] == key


async def test_cancel_running_after_confirm_ends_aborted_in_the_demo(live_demo: Demo) -> None:
    layout = layout_of(live_demo)
    key = live_demo.keys["running"]
    async with run_board(live_demo.root, key=key) as d:
        await d.press("ctrl+k")
        dialog = await d.showing(ConfirmDialog)
        labels = [str(b.label) for b in dialog.query("Button")]
        assert labels == ["Stop job (y)", "Keep running (n)"]
        await d.press("n")
        assert not (layout.running / f"{key}.cancel").exists()
        await d.press("ctrl+k")
        await d.showing(ConfirmDialog)
        await d.press("y")
        await d.until(lambda: d.state_of(key) == "FAILED", "the aborted receipt from the lease holder")
    receipt = json.loads(layout.receipt(key).read_bytes())
    assert receipt["status"] == "aborted" and receipt["outputs"] == {}
    assert layout.signature(key).exists()
    assert not (layout.running / f"{key}.cancel").exists()


async def test_approve_preflight_then_apply(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["verified"]
    target = demo.root / "calc/__init__.py"
    before = target.read_bytes()
    async with run_board(demo.root, key=key) as d:
        await d.press("a")
        await d.showing(PreflightDialog)
        body = plain(d.screen.query_one("#preflight-body", Static))
        assert "calc/__init__.py" in body and "+2 -0" in body
        assert "signatures REQUIRED by policy" in body
        assert "fresh" in body and "every check passed" in body
        await d.press("n")
        assert target.read_bytes() == before
        await d.press("a")
        await d.showing(PreflightDialog)
        await d.press("y")
        await d.until(lambda: d.state_of(key) == "APPLIED", "the apply")
        assert layout.job_file("applied", key).exists()
        assert target.read_bytes().startswith(before) and b"genjob demo edit" in target.read_bytes()


async def test_approve_refused_when_verification_fails(demo: Demo) -> None:
    key = demo.keys["untrusted"]
    before = (demo.root / "README.md").read_bytes()
    async with run_board(demo.root, key=key) as d:
        b = d.board
        verify = plain(b.query_one("#detail-verify", Static))
        assert "✘ signature" in verify and "which is not a trusted key" in verify
        await d.press("a")
        await d.showing(PreflightDialog)
        assert "apply would be refused" in plain(d.screen.query_one("#preflight-body", Static))
        await d.press("y")
        assert isinstance(d.screen, PreflightDialog)
        await d.press("n")
    assert (demo.root / "README.md").read_bytes() == before


async def test_detail_sections(demo: Demo) -> None:
    async with run_board(demo.root) as d:
        b = d.board
        await d.select(demo.keys["drifted"])
        verify = plain(b.query_one("#detail-verify", Static))
        assert "signatures REQUIRED by policy" in verify
        assert "✘ hashes" in verify and "artifact drift at calc/parse.py" in verify
        assert "✔ signature" in verify
        assert "calc/parse.py" in plain(b.query_one("#detail-diff", Static))
        assert "genjob demo edit" in plain(b.query_one("#detail-diff", Static))
        assert "received" in plain(b.query_one("#detail-timeline", Static))
        assert "edited calc/parse.py" in plain(b.query_one("#detail-output", Static))
        await d.select(demo.keys["running"])
        lease = plain(b.query_one("#detail-lease", Static))
        assert "lease fresh" in lease and "demo-worker@sandbox" in lease


async def test_full_screen_diff(demo: Demo) -> None:
    async with run_board(demo.root) as d:
        await d.select(demo.keys["verified"])
        await d.press("d")
        await d.showing(DiffScreen)
        body = plain(d.screen.query_one("#diff-body", Static))
        assert "calc/__init__.py" in body and "+ # genjob demo edit" in body
        await d.press("escape")
        await d.until(lambda: not isinstance(d.screen, DiffScreen), "the board")


async def test_full_screen_diff_of_an_applied_job_shows_the_change_it_made(demo: Demo) -> None:
    async with run_board(demo.root) as d:
        await d.select(demo.keys["applied"])
        assert "the change it made" in plain(d.board.query_one("#detail-diff", Static))
        await d.press("d")
        await d.showing(DiffScreen)
        body = plain(d.screen.query_one("#diff-body", Static))
        assert "the outputs are in the tree" not in body
        assert "the change it made" in body and "tests/test_negatives.py  new  +2 -0" in body
        assert "+ # genjob demo edit" in body


async def test_new_job_refuses_a_secret_then_queues(demo: Demo) -> None:
    async with run_board(demo.root) as d:
        b = d.board
        await d.press("n")
        await d.showing(NewJobDialog)
        dialog = d.screen
        files = dialog.query_one("#files")
        await d.until(lambda: files.option_count > 0, "the file list")
        dialog.query_one("#instruction").text = 'Use the key api_key = "abcdefghijklmnop1234"'
        dialog.query_one("#file-filter").value = "calc/ops"
        await d.until(lambda: files.option_count == 1, "the filtered file list")
        files.focus()
        await d.press("space")
        await d.press("ctrl+s")
        error = dialog.query_one("#newjob-error")
        await d.until(lambda: "looks like it holds a secret" in plain(error), "the refusal")
        count = len(b.view.rows)
        dialog.query_one("#instruction").text = "Add a docstring to sub"
        await d.press("ctrl+s")
        await d.until(lambda: not isinstance(d.screen, NewJobDialog), plain(error))
        await d.until(lambda: len(b.view.rows) == count + 1, "the new job")
        new = b.table.cursor_key
        await d.until(
            lambda: b.table.cursor_key is not None and d.state_of(b.table.cursor_key) == "QUEUED",
            "selection",
        )
        doc = json.loads((demo.root / ".gen/queue" / f"{b.table.cursor_key}.json").read_bytes())
        assert doc["allowed_paths"] == ["calc/ops.py"] and doc["instruction"] == "Add a docstring to sub"
        assert new is not None


async def test_filter_by_text_and_state(demo: Demo) -> None:
    async with run_board(demo.root) as d:
        b = d.board
        await d.press("slash")
        await d.press(*"tokenizer")
        await d.press("enter")
        await d.until(lambda: 0 < len(b.view) < len(b.view.rows), "the text filter")
        shown = [b.view.rows[b.view.key_at(i)] for i in range(len(b.view))]
        assert all("tokenizer" in row.instruction.lower() for row in shown)
        await d.press("escape")
        await d.until(lambda: len(b.view) == len(b.view.rows), "the filter to clear")
        await d.press("4")  # RECEIVED, the fourth chip
        await d.until(lambda: len(b.view) == 4, "the state filter")
        assert {b.view.rows[b.view.key_at(i)].state.value for i in range(4)} == {"RECEIVED"}
        await d.press("4")
        await d.until(lambda: len(b.view) == len(b.view.rows), "the state filter to clear")


async def test_click_a_count_filters(demo: Demo) -> None:
    async with run_board(demo.root) as d:
        pilot, b = d.pilot, d.board
        bar = b.query_one(CountsBar)
        # Until every row is read and the ready count known, a count or the chip may still
        # move the spans between the render here and the click.
        await d.until(lambda: not b.view.unread and bar.ready is not None, "every row read")
        bar.render()
        start = next(s for s, _, state in bar._spans if state.value == "QUEUED")
        await pilot.click("CountsBar", offset=(start + 3, 0))
        await d.until(lambda: len(b.view) == 5, "the QUEUED filter")


async def test_bulk_claim_confirms_with_the_count(demo: Demo) -> None:
    layout = layout_of(demo)
    keys = [demo.keys["queued"], demo.keys["queued3"]]
    async with run_board(demo.root) as d:
        b = d.board
        for key in [*keys, demo.keys["verified"]]:
            await d.select(key)
            await d.press("space")
        assert b.table.marks == {*keys, demo.keys["verified"]}
        await d.press("c")
        await d.showing(ConfirmDialog)
        body = str(d.screen.body)
        assert "Claim 2 marked jobs?" in body and "1 other marked job is skipped" in body
        await d.press("y")
        await d.until(lambda: all(d.state_of(k) == "RUNNING" for k in keys), "the claims")
        assert all(layout.job_file("running", k).exists() for k in keys)
        assert not b.table.marks


async def test_readonly_refuses_every_change(demo: Demo) -> None:
    layout = layout_of(demo)
    before = sorted(p.name for p in layout.gen.rglob("*") if "cache" not in p.parts)
    async with run_board(demo.root, readonly=True) as d:
        b = d.board
        assert "READ-ONLY" in plain(b.query_one("#status", Static))
        await d.select(demo.keys["queued"])
        for key in ("c", "s", "x", "n"):
            await d.press(key)
        await d.select(demo.keys["verified"])
        await d.press("a")
        await d.select(demo.keys["orphan"])
        await d.press("r")
        await d.until(lambda: sum("read-only board" in m for m in d.inbox.notes) == 6, "6 refusals")
        assert isinstance(d.screen, type(b))
    after = sorted(p.name for p in layout.gen.rglob("*") if "cache" not in p.parts)
    assert after == before


@pytest.mark.parametrize("opens", ["h", "d"])
async def test_question_mark_shows_the_keys_of_the_screen_it_is_pressed_on(demo: Demo, opens: str) -> None:
    async with run_board(demo.root, key=demo.keys["verified"]) as d:
        await d.press(opens)
        await d.until(lambda: d.screen is not d.board, "the screen")
        under = d.screen
        await d.press("question_mark")
        help_screen = await d.showing(HelpScreen)
        listed = {b.id for b in help_screen.bindings}
        assert listed == {b.id for b in under.BINDINGS if b.description and b.action != "help"}
        await d.press("escape")
        await d.until(lambda: d.screen is under, "back on the screen")


async def test_help_lists_every_key(demo: Demo) -> None:
    async with run_board(demo.root) as d:
        await d.press("question_mark")
        await d.showing(HelpScreen)
        keys = {b.key for b in d.screen.bindings}
        assert {"c", "s", "a", "x", "r", "R", "ctrl+k", "n", "d", "slash", "q", "space"} <= keys
        assert all(b.description for b in d.screen.bindings)
        await d.press("escape")
        await d.press("q")
    assert d.app.return_code == 0 or d.app.return_code is None


async def test_command_palette_offers_board_actions(demo: Demo) -> None:
    async with run_board(demo.root) as d:
        b = d.board
        titles = [c.title for c in d.app.get_system_commands(b)]
        for name in ("Claim (c)", "Approve (a)", "Reject (x)", "Requeue (r)", "Replay (R)", "New (n)"):
            assert name in titles


async def test_narrow_terminal_puts_detail_below(demo: Demo) -> None:
    async with run_board(demo.root, (80, 24)) as d:
        b = d.board
        assert b.has_class("narrow")
        jobs, detail = b.query_one("#jobs"), b.query_one("#detail")
        assert detail.region.y > jobs.region.y
        await d.press("enter")
        assert b.maximized is detail
        await d.press("enter")
        assert b.maximized is None


async def test_ship_picks_a_host_tails_output_and_commits_a_receipt(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["queued3"]
    async with run_board(demo.root, key=key) as d:
        await d.press("s")
        await d.showing(HostPicker)
        hosts = d.screen.query_one(OptionList)
        assert hosts.option_count == 3  # local, tidy and slow-local
        # The demo's stand-in hosts say what they are, and where real generators are shown.
        labels = [str(hosts.get_option_at_index(i).prompt) for i in range(hosts.option_count)]
        assert ["stand-in" in label for label in labels] == [True, False, True], labels
        note = plain(d.screen.query_one("#stand-in-note", Static))
        assert note.startswith("local and slow-local run genjob's stand-in generator"), note
        assert "`genjob help hosts` shows real ones" in note
        hosts.focus()
        hosts.highlighted = 0
        await d.press("enter")
        await d.showing(ShipDialog)
        dialog = d.screen
        await d.until(lambda: dialog.done, "the ship to end")
        status = plain(dialog.query_one("#ship-status", Static))
        assert dialog.succeeded, status
        assert "receipt ok" in status
        assert "Note: local runs genjob's stand-in generator" in status, status
        assert "edited calc/parse.py" in "\n".join(dialog.query_one(Log).lines)
        await d.press("escape")
        await d.until(lambda: d.state_of(key) == "RECEIVED", "the receipt")
    assert layout.receipt(key).exists() and layout.signature(key).exists()


async def test_bad_config_is_shown_and_nothing_crashes(demo: Demo) -> None:
    layout = layout_of(demo)
    async with run_board(demo.root) as d:
        b = d.board
        layout.config.write_text("[policy\nrequire_signature = maybe\n")
        status = b.query_one("#status", Static)
        await d.until(lambda: "not valid TOML" in plain(status), lambda: plain(status))
        assert "config.toml" in plain(status)
        await d.select(demo.keys["verified"])  # the detail still reads and verifies
        assert "✘ base" not in plain(b.query_one("#detail-verify", Static))


async def test_a_job_removed_on_disk_leaves_and_the_cursor_moves_on(demo: Demo) -> None:
    layout = layout_of(demo)
    async with run_board(demo.root) as d:
        b = d.board
        key = demo.keys["queued3"]
        await d.select(key)
        index = b.table.cursor_index
        layout.job_file("queue", key).unlink()
        await d.until(lambda: key not in b.view.rows, "the job to leave")
        assert b.table.cursor_key is not None and b.table.cursor_index == index


async def test_inconsistent_pair_shows_loudly_with_its_rule(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["queued"]
    async with run_board(demo.root) as d:
        b = d.board
        data = layout.job_file("queue", key).read_bytes()
        layout.job_file("running", key).write_bytes(data)
        await d.until(lambda: d.state_of(key) == "INCONSISTENT", "the inconsistent pair")
        await d.select(key)
        assert "R4: the claim happened, running wins" in plain(b.query_one("#detail-job", Static))


async def test_received_rows_say_whether_their_receipt_verifies(demo: Demo) -> None:
    async with run_board(demo.root) as d:
        b = d.board
        keys = [demo.keys[k] for k in ("verified", "drifted", "untrusted")]
        await d.until(lambda: all(k in b.table.verdicts for k in keys), "the verdicts")
        lines = {ln.split()[0]: ln for ln in d.lines()[1:] if ln.strip()}
        assert "RECEIVED ✔" in lines[keys[0][:12]]
        assert "RECEIVED ✘" in lines[keys[1][:12]]
        assert "RECEIVED ✘" in lines[keys[2][:12]]


async def test_a_queued_job_whose_input_moved_shows_stale_in_view(demo: Demo) -> None:
    """Read in view (STALE at once), and followed without any event in .gen/ (an edit of
    the tree turns a queued row in view STALE, its edit undone QUEUED again)."""
    layout = layout_of(demo)
    moved = enqueue(layout, build_job(layout, "Moved under it.", ["README.md"])).key
    target = demo.root / "README.md"
    original = target.read_bytes()
    target.write_bytes(original + b"edited\n")
    async with run_board(demo.root, (200, 50)) as d:
        await d.until(lambda: d.state_of(moved) == "STALE", "the moved job's row")
        assert any(line.startswith(f"  {moved[:12]} STALE") for line in d.lines())
        target.write_bytes(original)
        await d.until(lambda: d.state_of(moved) == "QUEUED", "the input put back")
        key = next(k for k, r in d.board.view.rows.items() if r.state.value == "QUEUED" and k != moved)
        path = d.board.view.rows[key].allowed_paths[0]
        (demo.root / path).write_bytes(b"moved on\n")
        await d.until(lambda: d.state_of(key) == "STALE", "a queued row in view going STALE")
