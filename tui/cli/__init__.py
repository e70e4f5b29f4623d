"""The `genjob` command line: one click group over the core, beside the dashboard."""

from tui.cli.candidates import candidates_cmd
from tui.cli.check import check_cmd
from tui.cli.commands import main
from tui.cli.dashboard import demo, tui
from tui.cli.discard import discard_cmd
from tui.cli.fleet import hosts_cmd
from tui.cli.worker import ship_cmd, worker_cmd

for command in (tui, demo, ship_cmd, worker_cmd, discard_cmd, check_cmd, hosts_cmd, candidates_cmd):
    main.add_command(command)

__all__ = ["main"]
