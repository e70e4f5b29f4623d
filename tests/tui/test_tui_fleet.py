"""The board's fleet view (`h`): each host's transport, concurrency, runs now, last error
and round trip, live from `.gen/`; `p` probes every host."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from boardkit import plain, run_board
from corekit import mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import CommandHost, host_block, read_report, sleeper, write_config
from textual.widgets import DataTable, Static

from core.store.layout import Layout
from core.store.queue import request_cancel
from core.work.ship import ship
from tui.screens.fleet import FleetScreen


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
        assert gen_row[:5] == ["gen", "local UNSANDBOXED", "this machine", "3", "1"], gen_row
        assert row_text(table, "pods")[1:5] == ["command", row_text(table, "pods")[2], "2", "0"]
        assert row_text(table, "pods")[2].startswith("bwrap --ro-")

        await asyncio.to_thread(request_cancel, repo, job.key)
        assert (await running).status == "aborted"
        await d.until(lambda: row_text(table, "gen")[4] == "0", "the run to end")
        await d.until(lambda: row_text(table, "gen")[6] != "-", "its error")
        # The cell is cut to fit; the line under the table has the highlighted host's whole error.
        table.move_cursor(row=0)
        detail = screen.query_one("#fleet-detail", Static)
        await d.until(lambda: "cancelled by the operator" in plain(detail), "the whole error")
        assert row_text(table, "gen")[6].endswith("…")

        await d.press("p")
        await d.until(lambda: row_text(table, "pods")[5] != "-", "the probe's round trip")
        assert re.fullmatch(r"\d+\.\d\ds \d+[smhd]", row_text(table, "pods")[5])
        table.move_cursor(row=2)
        await d.until(lambda: "not found on this machine" in plain(detail), "the failed probe")
        assert row_text(table, "gone")[5] == "-"
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
        await d.until(lambda: row_text(table, "gone")[6] != "-", "the failed probe")
        await d.pilot.pause()
        assert table.virtual_size.width <= 80, [c.get_render_width(table) for c in table.columns.values()]
        table.move_cursor(row=1)
        detail = screen.query_one("#fleet-detail", Static)
        await d.until(lambda: "not found on this machine" in plain(detail), "the whole error")


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
