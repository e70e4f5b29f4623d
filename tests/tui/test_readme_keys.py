"""The dashboard topic's key tables say what the bindings are: the board's every key, and
only those; and, for each view the board opens, that view's keys."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from textual.binding import Binding
from textual.screen import Screen

from tui.dialogs.bulk_ship import BulkShipDialog
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.host_picker import HostPicker
from tui.dialogs.new_job import NewJobDialog
from tui.dialogs.next_step import NextStepDialog
from tui.dialogs.preflight import PreflightDialog
from tui.dialogs.reason import ReasonDialog
from tui.dialogs.ship import ShipDialog
from tui.screens.board import BoardScreen
from tui.screens.candidates import CandidatesScreen
from tui.screens.diff import DiffScreen
from tui.screens.fleet import FleetScreen
from tui.screens.help import HelpScreen
from tui.widgets.job_table import JobTable

TOPIC = Path(__file__).resolve().parents[2] / "tui/reference/dashboard.md"
# How the topic writes a key Textual names otherwise.
SHOWN = {
    "up": "↑",
    "down": "↓",
    "left": "←",
    "right": "→",
    "pageup": "pgup",
    "pagedown": "pgdn",
    "escape": "esc",
    "slash": "/",
    "question_mark": "?",
}
DIGITS = [str(d) for d in range(10)]
# Each row of the views' table, by its first cell, and the view it speaks of.
VIEWS: dict[str, type[Screen[object]]] = {
    "the preflight": PreflightDialog,
    "a confirm": ConfirmDialog,
    "a reason": ReasonDialog,
    "the host picker": HostPicker,
    "why an action cannot run": NextStepDialog,
    "the ship dialog": ShipDialog,
    "a batch ship": BulkShipDialog,
    "the new job": NewJobDialog,
    "the candidates": CandidatesScreen,
    "the fleet": FleetScreen,
    "the diff": DiffScreen,
    "the help": HelpScreen,
}


def keys_section() -> str:
    return TOPIC.read_text().split("\n## Keys\n", 1)[1].split("\n## ", 1)[0]


def tables(section: str) -> list[list[list[str]]]:
    """Each table of `section`: its body rows (header and rule left out), split in cells."""
    found: list[list[list[str]]] = []
    for block in re.findall(r"(?:^\|.*\n)+", section, re.MULTILINE):
        rows = [
            [cell.strip() for cell in line.strip().strip("|").split(" | ")] for line in block.splitlines()
        ]
        found.append(rows[2:])
    return found


def keys_in(cell: str) -> set[str]:
    keys = set(re.findall(r"`([^`]+)`", cell))
    if "`1`…`0`" in cell:
        keys.update(DIGITS)
    return keys


def shown(bindings: list[Binding | tuple[str, ...]]) -> set[str]:
    keys: set[str] = set()
    for binding in bindings:
        assert isinstance(binding, Binding)
        for key in binding.key.split(","):
            keys.add(SHOWN.get(key, key))
    return keys


def test_the_keys_table_matches_the_boards_bindings() -> None:
    board_table = tables(keys_section())[0]
    documented = set().union(*(keys_in(row[0]) for row in board_table))
    bound = shown([*BoardScreen.BINDINGS, *JobTable.BINDINGS]) | {"ctrl+p"}  # Textual's command palette
    assert bound - documented == set(), "bound but missing from the dashboard topic's keys table"
    assert documented - bound == set(), "in the dashboard topic's keys table but bound to nothing"


def test_the_views_table_names_every_view_once() -> None:
    views_table = tables(keys_section())[1]
    assert [row[0] for row in views_table] == list(VIEWS)


@pytest.mark.parametrize("view", list(VIEWS))
def test_each_views_keys_match_its_bindings(view: str) -> None:
    row = next(r for r in tables(keys_section())[1] if r[0] == view)
    assert keys_in(row[1]) == shown(VIEWS[view].BINDINGS)
