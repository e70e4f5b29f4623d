"""`genjob hosts`: the fleet on the command line, one line per configured host."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import TYPE_CHECKING

import click

from core.model.presets import Spend
from core.model.terminal import age, visible
from core.store.config import load_config
from core.store.layout import Layout
from core.work.fleet import HostView, Note, fleet
from core.work.spend import host_spend
from tui.cli.commands import layout_of
from tui.cli.output import print_json, say

if TYPE_CHECKING:
    from core.work.ship import Hosts


@click.command("hosts")
@click.option("--probe", is_flag=True, help="First time an empty job on each host, there and back.")
@click.option("--host", "names", multiple=True, help="Only these hosts. Repeatable (default: all).")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of host objects.")
@click.pass_context
def hosts_cmd(ctx: click.Context, probe: bool, names: tuple[str, ...], as_json: bool) -> None:
    """Each configured host: transport, where it reaches, concurrency, runs on it now,
    the last error and the round trip of the last probe."""
    from core.work.ship import Hosts

    layout: Layout = layout_of(ctx)
    config = load_config(layout.config)
    pool = Hosts(config)
    wanted = [pool.pick(n) for n in names] if names else list(config.hosts)
    if probe:
        asyncio.run(_probe_all(layout, pool, wanted))
    views = [v for v in fleet(layout, config) if v.name in wanted]
    spent = host_spend(layout)
    if as_json:
        print_json([{**dataclasses.asdict(v), "spend": spent.get(v.name, Spend()).to_dict()} for v in views])
        return
    if not views:
        held = config.held
        if held is not None and held.hosts:
            say(visible(held.hint))
        else:
            say("no hosts configured (genjob init writes `local`)")
        return
    now = time.time()
    say(f"{'HOST':12} {'TRANSPORT':9} {'CONC':>4} {'NOW':>3} {'RTT':>14}  {'TARGET':36} LAST ERROR")
    for v in views:
        say(
            f"{_clip(visible(v.name), 12):12} {v.transport:9} {v.concurrency:>4} {len(v.running):>3} "
            f"{_rtt(v, now):>14}  {_clip(visible(v.target), 36):36} {_error(v.last_error, now)}"
        )
        if v.isolation is not None:
            say(f"{'':12} {v.isolation}")
        if v.missing is not None:
            say(f"{'':12} {visible(v.missing)}")
        if v.name in spent:
            limit = config.budget.hosts.get(v.name, config.budget.per_host)
            say(f"{'':12} {spend_line(spent[v.name], limit)}")


async def _probe_all(layout: Layout, pool: Hosts, names: list[str]) -> None:
    from core.work.fleet import probe

    try:
        await asyncio.gather(*(probe(layout, n, pool.transport(n)) for n in names))
    finally:
        await pool.close()


def _rtt(v: HostView, now: float) -> str:
    if v.rtt is None or v.rtt_at is None:
        return "-"
    return f"{v.rtt:.2f}s ({age(now - v.rtt_at)} ago)"


def _error(note: Note | None, now: float) -> str:
    if note is None:
        return "-"
    what = "probe" if note.key is None else f"{note.key[:8]} #{note.attempt}"
    return f"{age(now - note.at)} ago, {what}: {visible(note.reason or note.status)}"


def spend_line(spend: Spend, limit: float | None) -> str:
    """What a host's (or a job's) runs reported they cost, and the budget left."""
    return f"spent {spend.describe()}" + (
        f"; ${max(limit - spend.cost_usd, 0):.2f} of ${limit:.2f} budget left" if limit else ""
    )


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
