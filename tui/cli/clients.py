"""`genjob mcp` and `genjob serve`: the board's core calls for an agent and for a browser."""

from __future__ import annotations

import click

from core.store.config import load_operator_config
from tui.cli.commands import layout_of
from tui.cli.output import say


@click.command("mcp")
@click.pass_context
def mcp_cmd(ctx: click.Context) -> None:
    """Serve this repository to a coding agent over MCP (stdio): mint, list, show, replay, wait.

    It never approves, applies or trusts; it ships only when your own config allows it
    ([mcp] allow_ship = true in ~/.config/genjob/config.toml), and mints within its limits
    (mints_per_minute, mints_per_session). See `genjob help agents`."""
    from tui.clients.mcp import serve_stdio

    serve_stdio(layout_of(ctx), load_operator_config().mcp)


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", default=0, help="The port (default: a free one).")
@click.option(
    "--allow-actions", is_flag=True, help="Let the browser act (approve, ship, ...): read-only without."
)
@click.pass_context
def serve_cmd(ctx: click.Context, host: str, port: int, allow_actions: bool) -> None:
    """The board in a browser, behind a random token in the URL it prints; read-only unless
    --allow-actions. See `genjob help agents`."""
    from tui.clients.serve import serve_board

    serve_board(layout_of(ctx), host=host, port=port, allow_actions=allow_actions, say=say)
