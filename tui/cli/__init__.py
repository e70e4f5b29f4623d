"""The `genjob` command line: one click group over the core, beside the dashboard.

`run` is the `genjob` program. A plain `genjob ls` or `genjob tui` runs without loading
click (`tui.cli.plain`); everything else goes to the click group, `main`, which imports a
command's module only when that command runs, so each command pays for what it uses.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tui.cli.commands import main as main


def run() -> None:
    """The `genjob` program."""
    from tui.cli.plain import run_plain

    try:
        done = run_plain(sys.argv[1:])
    except BrokenPipeError:  # the reader left (`genjob ls | head`): stop quietly, as click does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    if done:
        sys.exit(0)
    from tui.cli.commands import main

    main()


def __getattr__(name: str) -> object:
    """`main`, the click group, loaded (with click) when first asked for."""
    if name == "main":
        from tui.cli.commands import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["main", "run"]
