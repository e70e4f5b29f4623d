"""The board's fleet view (`h`): each host's transport, concurrency, runs now, last error
and round trip, live from `.gen/`; `p` probes every host."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from boardkit import plain, run_board
from corekit import mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import CommandHost, host_block, read_report, sleeper, write_config
from textual.widgets import DataTable, Static

from core.model.contract import ReceiptStatus
from core.store.layout import Layout
from core.store.queue import request_cancel
from core.work.fleet import note_probe, note_run
from core.work.ship import ship
from tui.demo import Demo
from tui.screens.fleet import COLUMNS, FleetScreen


def row_text(table: DataTable, name: str) -> list[str]:  # type: ignore[type-arg]
    return [str(cell) for cell in table.get_row(name)]


async def test_the_fleet_shows_runs_now_the_last_error_and_a_probe(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    gen, report = sleeper(tmp_path)
    write_config(
        repo,
        host_block("gen", None, gen, concurrency=3),
        host_block("pods", CommandHost(None), "true", concurrency=2),
        host_block("gone", CommandHost(None), "true").replace('"bwrap"', '"/nonexistent/kubectl"'),
    )
    job = mint(repo)
    running = asyncio.ensure_future(ship(repo, job.key, "gen", worker_id="tester"))
    await asyncio.to_thread(read_report, report)
    async with run_board(repo.root) as d:
        await d.press("h")
        screen = await d.showing(FleetScreen)
        table = screen.query_one(DataTable)
        await d.until(lambda: table.row_count == 3, "a row per host")
        gen_row = row_text(table, "gen")
        assert gen_row[:4] == ["gen", "local · UNSANDBOXED", "3", "1"], gen_row
        assert row_text(table, "pods")[1:4] == ["command · bwrap --r…", "2", "0"]

        await asyncio.to_thread(request_cancel, repo, job.key)
        assert (await running).status == "aborted"
        await d.until(lambda: row_text(table, "gen")[3] == "0", "the run to end")
        await d.until(lambda: row_text(table, "gen")[5] != "-", "its error")
        # The cell is cut to fit; the line under the table has the highlighted host's whole error.
        table.move_cursor(row=0)
        detail = screen.query_one("#fleet-detail", Static)
        await d.until(lambda: "cancelled by the operator" in plain(detail), "the whole error")
        assert row_text(table, "gen")[5].endswith("…")

        await d.press("p")
        await d.until(lambda: row_text(table, "pods")[4] != "-", "the probe's round trip")
        assert re.fullmatch(r"\d+\.\d\ds \d+[smhd]", row_text(table, "pods")[4])
        table.move_cursor(row=2)
        await d.until(lambda: "not found on this machine" in plain(detail), "the failed probe")
        assert row_text(table, "gone")[4] == "-"
        await d.press("escape")
        await d.until(lambda: not isinstance(d.app.screen, FleetScreen), "back to the board")


async def test_the_fleets_columns_fit_80_columns(repo: Layout, tmp_path: Path) -> None:
    gone = host_block("gone", CommandHost(None), "true").replace('"bwrap"', '"/nonexistent/kubectl"')
    write_config(repo, host_block("gen", None, "true"), gone)
    mint(repo)
    async with run_board(repo.root, (80, 24)) as d:
        await d.press("h")
        screen = await d.showing(FleetScreen)
        table = screen.query_one(DataTable)
        await d.until(lambda: table.row_count == 2, "the hosts")
        await d.press("p")
        await d.until(lambda: row_text(table, "gone")[5] != "-", "the failed probe")
        await d.pilot.pause()
        assert table.virtual_size.width <= 80, [c.get_render_width(table) for c in table.columns.values()]
        table.move_cursor(row=1)
        detail = screen.query_one("#fleet-detail", Static)
        await d.until(lambda: "not found on this machine" in plain(detail), "the whole error")


@pytest.mark.parametrize("size", [(80, 24), (120, 35)])
async def test_the_demos_hosts_show_every_column_with_a_round_trip_and_an_error(
    demo: Demo, size: tuple[int, int]
) -> None:
    layout = Layout(demo.root)
    hosts = ("local", "tidy", "slow-local")
    for host in hosts:
        note_probe(layout, host, 0.21, None)
        note_run(layout, host, demo.keys["queued"], 1, ReceiptStatus.REJECTED, "the generator exited with 1")
    async with run_board(demo.root, size) as d:
        await d.press("h")
        screen = await d.showing(FleetScreen)
        table = screen.query_one(DataTable)
        await d.until(lambda: table.row_count == len(hosts), "the hosts")
        await d.until(lambda: all(row_text(table, h)[4] != "-" for h in hosts), "their round trips")
        await d.pilot.pause()
        widths = [c.get_render_width(table) for c in table.columns.values()]
        assert table.virtual_size.width <= size[0], widths
        header = table.render_line(0).text
        assert all(name in header for name in COLUMNS), header
        for y, host in enumerate(hosts, start=1):
            assert table.render_line(y).text.split()[:3] == [host, "local", "·"]
        assert row_text(table, "local")[1] == "local · bwrap"
        detail = screen.query_one("#fleet-detail", Static)
        await d.until(lambda: "local (stand-in) · this machine" in plain(detail), "the whole transport")
        assert "sandboxed (bwrap): no network" in plain(detail)
        assert "the generator exited with 1" in plain(detail)


async def test_a_read_only_board_shows_the_fleet_but_does_not_probe(repo: Layout, tmp_path: Path) -> None:
    write_config(repo, host_block("gen", None, "true"))
    mint(repo)
    async with run_board(repo.root, readonly=True) as d:
        await d.press("h")
        screen = await d.showing(FleetScreen)
        table = screen.query_one(DataTable)
        await d.until(lambda: table.row_count == 1, "the host")
        await d.press("p")
        await d.until(lambda: d.inbox.said("probes run jobs on the hosts, so they are off"), "the refusal")
        assert not repo.fleet_file("gen").exists()
