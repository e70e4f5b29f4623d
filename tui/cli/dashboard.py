"""`genjob tui` and `genjob demo`: the board, for this repository or a sandbox made for it."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import click

from tui.cli.commands import layout_of
from tui.cli.output import say


@click.command("tui")
@click.option("--readonly", is_flag=True, help="Show everything, refuse every change.")
@click.pass_context
def tui(ctx: click.Context, readonly: bool) -> None:
    """Open the board for the repository: live jobs, receipts, diffs, and keys to act on them."""
    from tui.app import run_board

    run_board(layout_of(ctx), readonly)


def _this_command() -> str:
    """How this `genjob` was started, as a path that works from any folder."""
    argv0 = Path(sys.argv[0])
    return str(argv0.resolve()) if argv0.name == "genjob" and argv0.exists() else "genjob"


@click.command("demo")
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--no-tui", is_flag=True, help="Only build the sandbox; do not open the board.")
def demo(directory: Path | None, no_tui: bool) -> None:
    """Build a sandbox repository with jobs in every state in DIRECTORY (default: a new temp
    folder) and open the board on it."""
    from tui.demo import build_demo

    made = build_demo(directory, tied=not no_tui)
    say(f"demo repository: {made.root}")
    say(f"worker key: {made.config_home} (XDG_CONFIG_HOME for this demo)")
    for line in made.summary:
        say(f"  {line}")
    env = f"XDG_CONFIG_HOME={shlex.quote(str(made.config_home))}"
    genjob = f"{env} {shlex.quote(_this_command())} --root {shlex.quote(str(made.root))}"
    if no_tui:
        say(f"open it with: {genjob} tui")
        say(f"or list it:   {genjob} ls")
        if made.holder is not None:
            say(f"the running job's lease holder (pid {made.holder.pid}) stops within the hour")
        return
    from tui.app import make_app

    os.environ["XDG_CONFIG_HOME"] = str(made.config_home)
    try:
        make_app(made.root).run()
    finally:
        made.stop()
    say(f"the demo repository stays at {made.root}; open it again with: {genjob} tui")
