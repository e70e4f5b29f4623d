"""A `DataTable` filled with rows whose column widths are given, not measured later.

A `DataTable` measures new rows' cells only once its message queue is idle, and keeps the
header line it drew before that: a frame drawn in between shows columns as wide as their
labels, or a header narrower than its rows. Filling the table with its columns sized to
what it holds draws every frame at its final widths.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import DataTable


def fill(table: DataTable[Text], labels: Sequence[str], rows: Sequence[tuple[str, Sequence[Text]]]) -> None:
    """Replace the table's columns and rows: `rows` are (key, cells), the cursor keeps its
    line (or goes to the last row)."""
    cursor = table.cursor_row
    table.clear(columns=True)
    for at, label in enumerate(labels):
        width = max([len(label), *(row[at].cell_len for _, row in rows)])
        table.add_column(label, width=width, key=label)
    for key, cells in rows:
        table.add_row(*cells, key=key)
    if rows:
        table.move_cursor(row=min(cursor, len(rows) - 1))
