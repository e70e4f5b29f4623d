"""The operator's first ten minutes on the board: focus, no dead ends, fit, read-only, polish."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from boardkit import plain, run_board
from corekit import mint
from textual.color import Color
from textual.widgets import Button, Checkbox, OptionList, Static, TabbedContent

from core.model.lifecycle import State
from core.store.layout import Layout
from core.store.queue import claim, request_cancel
from core.store.repo import init_repo
from tui.demo import Demo
from tui.dialogs.bulk_ship import BulkShipDialog
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.host_picker import EVERY_HOST, HostPicker
from tui.dialogs.new_job import NewJobDialog
from tui.dialogs.preflight import PreflightDialog
from tui.dialogs.reason import ReasonDialog
from tui.dialogs.ship import ShipDialog
from tui.screens.board import FilterBox
from tui.screens.diff import DiffScreen
from tui.screens.help import HelpScreen
from tui.text import STATE_STYLES
from tui.widgets.counts import DIGITS, CountsBar
from tui.widgets.detail import DetailPane
from tui.widgets.key_bar import KeyBar

NARROW = (80, 24)
MEDIUM = (120, 35)


def layout_of(demo: Demo) -> Layout:
    return Layout(demo.root)


# -- 1. focus never gets lost ------------------------------------------------------------------
async def test_zoom_twice_and_the_arrows_still_move_the_cursor(demo: Demo) -> None:
    async with run_board(demo.root, NARROW, key=demo.keys["orphan"]) as d:
        index = d.table.cursor_index
        await d.press("enter")
        assert d.board.maximized is d.board.query_one(DetailPane)
        await d.press("enter")
        assert d.board.maximized is None and d.app.focused is d.table
        await d.press("down")
        assert d.table.cursor_index == index + 1


async def test_after_the_diff_and_a_dialog_keys_reach_the_list_not_a_hidden_filter(demo: Demo) -> None:
    async with run_board(demo.root, NARROW, key=demo.keys["verified"]) as d:
        await d.press("d")
        await d.showing(DiffScreen)
        await d.press("escape")
        await d.until(lambda: d.screen is d.board, "the board again")
        assert d.app.focused is d.table
        box = d.board.query_one(FilterBox)
        await d.press("z", "z")  # no binding: nothing is typed anywhere
        assert not box.display and box.value == ""
        assert len(d.board.view) == len(d.board.view.where), "a filter hides jobs"
        await d.press("r")  # refused with a toast on a RECEIVED job: no focus moves
        assert d.app.focused is d.table
        await d.press("x")
        await d.showing(ReasonDialog)
        await d.press("escape")
        await d.until(lambda: d.screen is d.board, "the board again")
        assert d.app.focused is d.table


async def test_a_hidden_filter_box_never_takes_the_focus(demo: Demo) -> None:
    async with run_board(demo.root, NARROW) as d:
        box = d.board.query_one(FilterBox)
        await d.press("slash", "x", "y")
        assert box.has_focus and box.value == "xy"
        await d.press("escape")
        assert d.app.focused is d.table and box.display  # a filter with text stays in view
        await d.press("escape")
        assert not box.display and box.value == ""
        for _ in range(4):
            await d.press("tab")
            assert d.app.focused is not box


# -- 2. no dead ends -----------------------------------------------------------------------------
async def pick_host(d, index: int = 0) -> None:  # type: ignore[no-untyped-def]
    picker = await d.showing(HostPicker)
    options = picker.query_one(OptionList)
    options.focus()
    options.highlighted = index
    await d.press("enter")


async def test_the_finished_ship_dialog_offers_approve_and_a_opens_the_preflight(demo: Demo) -> None:
    key = demo.keys["queued3"]
    async with run_board(demo.root, key=key) as d:
        await d.press("s")
        await pick_host(d)
        dialog = await d.showing(ShipDialog)
        await d.until(lambda: dialog.done, "the ship to end")
        status = plain(dialog.query_one("#ship-status", Static))
        assert "receipt ok" in status and "Next: a opens the approve preflight" in status
        buttons = {b.id: b.display for b in dialog.query(Button)}
        assert buttons == {"ship-approve": True, "ship-hide": False, "ship-cancel": False, "ship-close": True}
        await d.press("a")
        preflight = await d.showing(PreflightDialog)
        assert preflight.preflight.key == key and preflight.preflight.verified


async def test_claim_then_ship_the_same_job_from_the_board(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["queued"]
    async with run_board(demo.root, key=key) as d:
        await d.press("c")
        await d.until(lambda: d.state_of(key) == "RUNNING", "the claim")
        assert d.board.dispatcher.holds(key)
        hints = [h.label for h in d.board.query_one(KeyBar).hints]
        assert hints[:2] == ["Ship", "Stop"]
        await d.press("s")
        await pick_host(d)
        dialog = await d.showing(ShipDialog)
        await d.until(lambda: dialog.done, "the ship to end")
        assert dialog.succeeded, plain(dialog.query_one("#ship-status", Static))
        await d.press("escape")
        await d.until(lambda: d.state_of(key) == "RECEIVED", "the receipt")
        assert not d.board.dispatcher.holds(key)
    claims = [json.loads(line) for line in layout.attempts_file(key).read_text().splitlines()]
    assert [c["event"] for c in claims].count("claimed") == 1  # shipped on the board's own claim


async def test_a_claim_held_by_the_board_is_heartbeated(demo: Demo) -> None:
    layout = layout_of(demo)
    layout.config.write_text(layout.config.read_text().replace("lease_ttl = 120", "lease_ttl = 1.5"))
    key = demo.keys["queued2"]
    async with run_board(demo.root, key=key) as d:
        await d.press("c")
        await d.until(lambda: layout.lease(key).exists(), "the lease")
        first = json.loads(layout.lease(key).read_bytes())

        def beaten() -> bool:
            lease = json.loads(layout.lease(key).read_bytes())
            return lease["heartbeat"] > first["heartbeat"] + first["ttl"]

        await d.until(beaten, "a heartbeat past the first ttl")
        assert d.state_of(key) == "RUNNING"


async def test_stop_a_job_the_board_holds_ends_it_aborted(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["queued2"]
    async with run_board(demo.root, key=key) as d:
        await d.press("c")
        await d.until(lambda: d.state_of(key) == "RUNNING", "the claim")
        await d.press("ctrl+k")
        dialog = await d.showing(ConfirmDialog)
        assert "This board holds it" in str(dialog.body)
        await d.press("y")
        await d.until(lambda: d.state_of(key) == "FAILED", "the aborted receipt")
    assert json.loads(layout.receipt(key).read_bytes())["status"] == "aborted"


async def test_bulk_ship_asks_once_and_ships_each_with_a_summary(demo: Demo) -> None:
    keys = [demo.keys["queued"], demo.keys["queued3"], demo.keys["new_file"]]
    async with run_board(demo.root) as d:
        for key in keys:
            await d.select(key)
            await d.press("space")
        await d.press("s")
        confirm = await d.showing(ConfirmDialog)
        assert "Ship 3 marked jobs?" in str(confirm.body)
        await d.press("y")
        picker = await d.showing(HostPicker)
        options = picker.query_one(OptionList)
        assert options.get_option_at_index(options.option_count - 1).id == EVERY_HOST
        options.focus()
        options.highlighted = options.option_count - 1
        await d.press("enter")
        dialog = await d.showing(BulkShipDialog)
        await d.until(lambda: dialog.done, "the batch to end")
        summary = plain(dialog.query_one("#bulk-status", Static))
        assert "3 ok" in summary
        lines = plain(dialog.query_one("#bulk-jobs", Static))
        assert all(f"{k[:12]}  ok on " in lines for k in keys)
        hosts = {line.split(" ok on ")[1].split()[0] for line in lines.splitlines() if " ok on " in line}
        assert len(hosts) > 1, f"every host was picked, yet one ran them all: {lines}"
        await d.press("escape")
        await d.until(lambda: all(d.state_of(k) == "RECEIVED" for k in keys), "three receipts")


async def test_approve_on_a_stale_job_offers_its_clean_merge_or_a_replay(demo: Demo) -> None:
    from tui.dialogs.preflight import MergeDialog

    key = demo.keys["stale"]
    async with run_board(demo.root, key=key) as d:
        await d.press("a")
        dialog = await d.showing(MergeDialog)
        body = plain(dialog.query_one("#merge-body", Static))
        assert "merges clean" in body and "calc/cli.py" in body
        await d.press("R")
        await d.until(lambda: d.table.cursor_key not in (None, key), "the replayed job")
        new = d.table.cursor_key
        assert d.state_of(new) == "QUEUED"
        doc = json.loads((demo.root / ".gen/queue" / f"{new}.json").read_bytes())
        assert doc["replay_of"] == key


async def test_a_refusal_names_the_next_step(demo: Demo) -> None:
    async with run_board(demo.root, key=demo.keys["orphan"]) as d:
        await d.press("a")
        await d.until(lambda: d.inbox.said("Next: its worker is gone: requeue it (r)"), "the refusal")


async def test_an_untrusted_signature_names_genjob_trust(demo: Demo) -> None:
    async with run_board(demo.root, key=demo.keys["untrusted"]) as d:
        verify = plain(d.board.query_one("#detail-verify", Static))
        assert "which is not a trusted key" in verify and "genjob trust" in verify
        await d.press("a")
        dialog = await d.showing(PreflightDialog)
        body = plain(dialog.query_one("#preflight-body", Static))
        assert "genjob trust" in body
        # Nothing to commit: the apply would be refused (the box shows once it would run).
        assert not any(box.display for box in dialog.query("#commit"))


async def test_discard_an_invalid_job_keeps_its_file_as_evidence(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["invalid"]
    data = layout.job_file("queue", key).read_bytes()
    async with run_board(demo.root, key=key) as d:
        assert next(h.label for h in d.board.query_one(KeyBar).hints) == "Discard"
        await d.press("D")
        await d.showing(ConfirmDialog)
        await d.press("y")
        await d.until(lambda: key not in d.board.view.rows, "the job to leave the board")
        assert d.inbox.said(f"discarded {key[:12]}")
    kept = list(layout.log_dir(key).glob(f"discarded-queue-{key}.json-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == data


async def test_the_lease_tab_shows_a_cancel_waiting_for_its_worker(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["queued2"]
    claim(layout, "slow-worker@elsewhere", key, ttl=600, pid=os.getpid())  # never looks for a cancel
    request_cancel(layout, key)
    async with run_board(demo.root, key=key) as d:
        lease = plain(d.board.query_one("#detail-lease", Static))
        assert "cancel requested" in lease and "waiting for the worker to stop it" in lease


async def test_approve_can_commit_and_the_config_sets_the_default(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["verified"]
    async with run_board(demo.root, key=key) as d:
        await d.press("a")
        dialog = await d.showing(PreflightDialog)
        box = dialog.query_one("#commit", Checkbox)
        assert box.value is False  # policy.commit_on_approve = false, as init writes it
        await d.press("c")
        assert box.value is True
        await d.press("n")
        await d.until(lambda: d.screen is d.board, "the board again")
        layout.config.write_text(
            layout.config.read_text().replace("commit_on_approve = false", "commit_on_approve = true")
        )
        await d.press("a")
        dialog = await d.showing(PreflightDialog)
        assert dialog.query_one("#commit", Checkbox).value is True
        await d.press("y")
        await d.until(lambda: d.state_of(key) == "APPLIED", "the apply")
        await d.until(lambda: d.inbox.said("committed"), "the commit")
    log = subprocess.run(
        ["git", "-C", str(demo.root), "log", "-1", "--format=%B"], capture_output=True, text=True
    )
    assert f"Genjob-Key: {key}" in log.stdout


# -- 3. everything fits --------------------------------------------------------------------------
async def test_the_key_bar_always_shows_help_and_quit(demo: Demo) -> None:
    for size in (NARROW, MEDIUM):
        async with run_board(demo.root, size) as d:
            bar = d.board.query_one(KeyBar)
            for key in demo.keys.values():
                await d.select(key)
                bar.render()
                labels = [h.label for h in bar.shown()]
                assert labels[-2:] == ["Help", "Quit"], (size, key, labels)
                assert bar.render().cell_len <= size[0]


async def test_the_state_bar_keeps_every_digit_and_count(demo: Demo) -> None:
    for size in (NARROW, MEDIUM, (200, 50)):
        async with run_board(demo.root, size) as d:
            bar = d.board.query_one(CountsBar)
            text = bar.render()
            assert text.cell_len <= bar.size.width
            counts = d.board.view.counts
            shown = [state for _, _, state in bar._spans]
            assert {s for s in DIGITS if counts.get(s)} <= set(shown)
            for start, end, state in bar._spans:
                chip = text.plain[start:end]
                assert chip.startswith(DIGITS[state]) and chip.endswith(str(counts.get(state, 0))), chip


async def test_the_new_job_dialog_scrolls_to_its_buttons_at_80x24(demo: Demo) -> None:
    async with run_board(demo.root, NARROW) as d:
        await d.press("n")
        dialog = await d.showing(NewJobDialog)
        screen = dialog.region
        for selector in ("#instruction", "#file-filter", "#new-paths", "#submit", "#cancel"):
            widget = dialog.query_one(selector)
            widget.focus()
            await d.pilot.pause()  # focus is set, then the screen schedules its scroll
            await d.pilot.pause()
            await d.pilot.wait_for_scheduled_animations()
            assert screen.contains_region(widget.region) and widget.region.height > 0, selector


async def test_headers_line_up_with_rows_with_marks_and_the_filter_open(demo: Demo) -> None:
    for size in (NARROW, MEDIUM, (200, 50)):
        async with run_board(demo.root, size) as d:
            for role in ("queued", "verified"):
                await d.select(demo.keys[role])
                await d.press("space")
            await d.press("slash")
            lines = d.lines()
            header = lines[0]
            for row in lines[1:]:
                if not row.strip():
                    continue
                state = next(s.value for s in State if f" {s.value}" in row)
                assert row.index(f" {state}") + 1 == header.index("STATE"), (size, row)
                assert row[header.index("WORKER") - 1] == " ", (size, row)


async def test_long_worker_names_end_in_an_ellipsis(demo: Demo) -> None:
    layout = layout_of(demo)
    key = demo.keys["queued3"]
    claim(layout, "a-very-long-worker-name@build-host-17.example", key, ttl=600, pid=os.getpid())
    async with run_board(demo.root, MEDIUM) as d:
        await d.until(lambda: d.state_of(key) == "RUNNING", "the claim")
        row = next(line for line in d.lines() if line.strip().startswith(key[:12]))
        assert "a-very-long-work…" in row


# -- 4. read-only looks read-only ----------------------------------------------------------------
async def test_readonly_hides_every_change_from_keys_help_and_palette(demo: Demo) -> None:
    async with run_board(demo.root, MEDIUM, readonly=True, key=demo.keys["verified"]) as d:
        status = plain(d.board.query_one("#status", Static))
        assert "READ-ONLY: changes are off" in status
        labels = {h.label for h in d.board.query_one(KeyBar).hints}
        assert labels == {"Diff", "Zoom", "Filter", "Hosts", "Ready"}  # each only reads
        await d.press("space")
        await d.until(lambda: d.inbox.said("read-only board: nothing to mark jobs for"), "the refusal")
        assert not d.table.marks
        await d.press("question_mark")
        help_screen = await d.showing(HelpScreen)
        ids = {b.id for b in help_screen.bindings}
        assert not ids & {*d.board.CHANGES, "mark"}
        titles = [c.title for c in d.app.get_system_commands(d.board)]
        assert not any(t.startswith(("Approve", "Claim", "Ship", "New")) for t in titles)


# -- 5. polish -----------------------------------------------------------------------------------
async def test_the_cursor_row_uses_the_theme_cursor_across_every_column(demo: Demo) -> None:
    async with run_board(demo.root, MEDIUM, key=demo.keys["rejected"]) as d:
        table = d.table
        variables = d.app.get_css_variables()
        cursor_bg = Color.parse(variables["block-cursor-background"]).rich_color
        y = table.cursor_index - int(table.scroll_y) + 1
        strip = table.render_line(y)
        assert all(seg.style is not None and seg.style.bgcolor == cursor_bg for seg in strip)
        assert len({seg.style.color for seg in strip if seg.style}) == 1  # one readable colour


def luminance(c: Color) -> float:
    """WCAG relative luminance."""

    def channel(v: int) -> float:
        x = v / 255
        return x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4

    return 0.2126 * channel(c.r) + 0.7152 * channel(c.g) + 0.0722 * channel(c.b)


def contrast(a: Color, b: Color) -> float:
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


async def test_every_state_label_is_readable(demo: Demo) -> None:
    async with run_board(demo.root, MEDIUM) as d:
        surface = Color.parse(d.app.get_css_variables()["surface"])
        for state, style in STATE_STYLES.items():
            assert style.color is not None and style.color.triplet is not None
            colour = Color.parse(style.color.triplet.hex)
            back = (
                Color.parse(style.bgcolor.triplet.hex) if style.bgcolor and style.bgcolor.triplet else surface
            )
            assert contrast(colour, back) >= 3.0, state  # WCAG's floor for bold labels


async def test_relative_times_tick(demo: Demo) -> None:
    # A job created now, so that its age counts in seconds (the demo may have been built minutes ago).
    job = mint(Layout(demo.root), "Name the magic numbers", ["calc/parse.py"])
    async with run_board(demo.root, MEDIUM, key=job.key) as d:
        pane = d.board.query_one("#detail-job", Static)
        before = plain(pane)
        await d.until(lambda: plain(pane) != before, "the created time to tick")
        assert "ago)" in plain(pane)


async def test_an_applied_job_verify_tab_is_not_a_failure(demo: Demo) -> None:
    async with run_board(demo.root, MEDIUM, key=demo.keys["applied"]) as d:
        tabs = d.board.query_one("#detail-tabs")
        label = str(tabs.get_tab("tab-verify").label)  # type: ignore[attr-defined]
        assert label == "Verify ✔"
        verify = plain(d.board.query_one("#detail-verify", Static))
        assert "✘" not in verify and "applied from a receipt that verifies" in verify


async def test_a_drifted_output_is_marked_as_not_signed(demo: Demo) -> None:
    async with run_board(demo.root, MEDIUM, key=demo.keys["drifted"]) as d:
        diff = plain(d.board.query_one("#detail-diff", Static))
        assert diff.count("NOT WHAT THE WORKER SIGNED") == 1  # calc/parse.py only
        part = diff.split("calc/parse.py", 1)[1]
        assert "NOT WHAT THE WORKER SIGNED" in part.split("tests/test_parse.py")[0]


async def test_the_palette_has_no_duplicates_and_esc_closes_the_key_panel(demo: Demo) -> None:
    async with run_board(demo.root, MEDIUM) as d:
        titles = [c.title for c in d.app.get_system_commands(d.board)]
        assert len(titles) == len(set(titles))
        assert "Maximize" not in titles and "Quit (q)" not in titles and "Quit" in titles
        d.app.action_show_help_panel()
        await d.until(lambda: bool(d.screen.query("HelpPanel")), "the key panel")
        await d.press("escape")
        await d.until(lambda: not d.screen.query("HelpPanel"), "the key panel to close")


async def test_j_k_g_and_G_move_as_in_k9s_and_lazygit(demo: Demo) -> None:
    async with run_board(demo.root, MEDIUM) as d:
        table = d.board.table
        await d.press("g")
        first = table.cursor_key
        await d.press("j")
        second = table.cursor_key
        assert second != first
        await d.press("k")
        assert table.cursor_key == first
        await d.press("G")
        last = table.cursor_key
        assert last not in (first, second)
        await d.press("down")
        assert table.cursor_key == last
        await d.press("question_mark")
        help_screen = await d.showing(HelpScreen)
        text = plain(help_screen.query_one("#help-intro", Static))
        assert "The arrow and page keys move, and so do j, k, g and G." in text
        keys = {b.key_display or b.key for b in help_screen.bindings}
        assert {"↑ ↓ j k", "home end g G", "ctrl+k"} <= keys


async def test_an_empty_board_says_how_to_mint_and_warns_without_a_trusted_key(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    layout, _ = init_repo(tmp_path / "repo")
    async with run_board(layout.root, NARROW, jobs=False) as d:
        await d.until(lambda: not d.board.scanning and d.board.trusted_keys == 0, "the policy")
        # With no job, the list takes the detail's room, from the next layout on.
        await d.until(lambda: "genjob trust" in "\n".join(d.lines()), "the list to fill the screen")
        lines = "\n".join(d.lines())
        assert "No jobs yet." in lines and 'genjob mint -m "' in lines
        assert "no key is trusted" in lines and "genjob trust" in lines
        assert "no trusted key" in plain(d.board.query_one("#status", Static))


async def test_the_theme_chosen_is_the_next_boards_theme(demo: Demo) -> None:
    from core.store.layout import user_config_dir
    from tui.prefs import PREFS

    async with run_board(demo.root) as d:
        assert d.app.theme != "nord"
        d.app.theme = "nord"
        await d.until(lambda: (user_config_dir() / PREFS).exists(), "the choice to be kept")
    async with run_board(demo.root) as d:
        assert d.app.theme == "nord"
    (user_config_dir() / PREFS).write_text("not json")
    async with run_board(demo.root) as d:
        assert d.app.theme != "nord", "a file of another shape is no choice"


async def test_after_a_zoom_and_escape_the_arrows_move_the_cursor_again(demo: Demo) -> None:
    async with run_board(demo.root, (80, 24)) as d:
        first = d.table.cursor_key
        await d.press("enter")
        await d.until(lambda: d.board.maximized is not None, "the zoom")
        await d.press("escape")
        await d.until(lambda: d.board.maximized is None, "the zoom to end")
        assert d.app.focused is d.table
        await d.press("down")
        assert d.table.cursor_key != first


async def test_with_no_job_selected_the_tabs_and_keys_speak_of_no_job(demo: Demo) -> None:
    async with run_board(demo.root, key=demo.keys["verified"]) as d:
        tabs = d.board.query_one(DetailPane).query_one(TabbedContent)
        assert tabs.get_tab("tab-verify").label.plain.startswith("Verify ✔")
        await d.press("slash")
        await d.press(*"matches-no-job-at-all", "enter")
        await d.until(lambda: d.table.cursor_key is None, "the filter to empty the list")
        await d.until(lambda: d.board.query_one(DetailPane).detail is None, "the detail to clear")
        labels = [tabs.get_tab(f"tab-{t}").label.plain for t in ("verify", "diff", "timeline")]
        assert labels == ["Verify", "Diff", "Timeline"]
        hints = {h.label for h in d.board.query_one(KeyBar).hints}
        assert not hints & {"Diff", "Zoom"} and "Filter" in hints


async def test_the_preflight_trusts_this_machines_own_key_in_one_confirmed_step(repo: Layout) -> None:
    """A receipt signed by this machine's own worker key, pinned nowhere: the preflight names
    its real file and offers to pin it (one confirm, through the core), after which it verifies."""
    from corekit import receive

    from core.store.signing import keygen, load_private_key, public_key_path

    keygen()
    job = mint(repo, "Return two.", ["src/app.py"])
    receive(repo, job.key, {"src/app.py": b"def main():\n    return 2\n"}, load_private_key())
    async with run_board(repo.root, key=job.key) as d:
        await d.press("a")
        dialog = await d.showing(PreflightDialog)
        body = plain(dialog.query_one("#preflight-body", Static)).replace("\n", "")
        assert "this machine's own worker key" in body and str(public_key_path()) in body
        assert dialog.query_one("#trust", Button).display
        await d.press("k")
        await d.showing(ConfirmDialog)
        assert not list(repo.trusted_keys.glob("*.pub")), "nothing is pinned before the confirm"
        await d.press("y")
        again = "the preflight again"
        await d.until(lambda: isinstance(d.screen, PreflightDialog) and d.screen.preflight.verified, again)
        assert len(list(repo.trusted_keys.glob("*.pub"))) == 1
        assert not d.screen.query_one("#trust", Button).display
        assert d.screen.query_one("#yes", Button).disabled is False


async def test_the_preflight_never_offers_to_trust_a_key_not_this_machines_own(demo: Demo) -> None:
    before = sorted(p.name for p in layout_of(demo).trusted_keys.iterdir())
    async with run_board(demo.root, key=demo.keys["untrusted"]) as d:
        await d.press("a")
        dialog = await d.showing(PreflightDialog)
        assert dialog.preflight.own_key is None and not dialog.query_one("#trust", Button).display
        await d.press("k")
        await d.until(lambda: d.inbox.said("only this machine's own worker key"), "the refusal")
        assert isinstance(d.screen, PreflightDialog)
    assert sorted(p.name for p in layout_of(demo).trusted_keys.iterdir()) == before
