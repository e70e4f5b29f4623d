"""The plain forms of the two commands started most, answered without loading click.

click, with the standard modules it pulls in, costs about half of a `genjob ls` start
(the `cli_start` benchmark) and a tenth of the board's first frame (`board_first_frame`).
So the `genjob` program first looks at its arguments here: `[--root DIR] ls [--json]
[--state S]...`, `[--root DIR] ls --summary` and `[--root DIR] tui [--readonly]` run at
once; anything else, help and every mistake included, goes to the click group, which
runs the same functions and says the usual messages.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from core.model.lifecycle import State
from core.store.layout import find_root
from tui.cli.output import guarded

_STATES = {s.value for s in State}


def _split_root(argv: Sequence[str]) -> tuple[Path | None, list[str]] | None:
    """(root, the rest) when `argv` starts with a `--root DIR` click would take as is, or
    with no `--root` at all; else None."""
    args = list(argv)
    if not args or not args[0].startswith("--root"):
        return None, args
    if args[0] == "--root" and len(args) > 1:
        value, args = args[1], args[2:]
    elif args[0].startswith("--root="):
        value, args = args[0].removeprefix("--root="), args[1:]
    else:
        return None
    if not value or os.path.isfile(value):
        return None  # click's message says what is wrong with it
    return Path(value), args


def plain_ls(argv: Sequence[str]) -> tuple[Path | None, list[str], bool] | None:
    """(root, states, as_json) when `argv` is a plain `[--root DIR] ls [--json] [--state
    S]...` that click would accept as is; else None."""
    split = _split_root(argv)
    if split is None or not split[1] or split[1][0] != "ls":
        return None
    root, args = split
    states: list[str] = []
    as_json = False
    rest = args[1:]
    while rest:
        arg = rest.pop(0)
        if arg == "--json":
            as_json = True
        elif arg == "--state" and rest:
            states.append(rest.pop(0))
        elif arg.startswith("--state="):
            states.append(arg.removeprefix("--state="))
        else:
            return None
    if any(s.upper() not in _STATES for s in states):
        return None
    return root, states, as_json


def plain_summary(argv: Sequence[str]) -> tuple[Path | None] | None:
    """(root,) when `argv` is a plain `[--root DIR] ls --summary`; else None."""
    split = _split_root(argv)
    if split is None or split[1] != ["ls", "--summary"]:
        return None
    return (split[0],)


def plain_board(argv: Sequence[str]) -> tuple[Path | None, bool] | None:
    """(root, readonly) when `argv` is a plain `[--root DIR] tui [--readonly]`; else None."""
    split = _split_root(argv)
    if split is None:
        return None
    root, args = split
    if args == ["tui"] or args == ["tui", "--readonly"]:
        return root, len(args) == 2
    return None


def run_plain(argv: Sequence[str]) -> bool:
    """Run `argv` when it is a plain `ls` or `tui` (see above); False when it is neither."""
    listing = plain_ls(argv)
    summary = plain_summary(argv) if listing is None else None
    board = plain_board(argv) if listing is None and summary is None else None
    if listing is None and summary is None and board is None:
        return False
    if summary is not None:
        from tui.cli.listing import print_summary

        guarded(lambda: print_summary(*summary))
    elif listing is not None:
        from tui.cli.listing import list_jobs

        root, states, as_json = listing
        guarded(lambda: list_jobs(find_root(explicit=root), states, as_json))
    elif board is not None:
        guarded(lambda: _open_board(*board))
    return True


def _open_board(root: Path | None, readonly: bool) -> None:
    """The board, loaded only once there is a repository to show."""
    layout = find_root(explicit=root)
    from tui.app import run_board

    run_board(layout, readonly)
