"""tui.widgets.sized_table: a table's columns are as wide as what it holds from its first frame."""

from __future__ import annotations

from rich.text import Text
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from tui.widgets.sized_table import fill


class OneTable(App[None]):
    def compose(self) -> ComposeResult:
        yield DataTable(cursor_type="row")


async def test_columns_fit_their_widest_cell_before_the_table_is_idle() -> None:
    async with OneTable().run_test() as pilot:
        table: DataTable[Text] = pilot.app.query_one(DataTable)
        fill(table, ("host", "last error"), [("a", (Text("slow-local-host"), Text("-")))])
        # Measured now, not when the table's queue is next idle.
        assert [c.get_render_width(table) - 2 for c in table.ordered_columns] == [15, 10]
        header = table.render_line(0).text
        assert header.startswith(f" {'host':15}  {'last error':10} ")


async def test_a_refill_keeps_the_cursor_on_its_line_or_the_last_row() -> None:
    async with OneTable().run_test() as pilot:
        table: DataTable[Text] = pilot.app.query_one(DataTable)
        rows = [(name, (Text(name),)) for name in "abc"]
        fill(table, ("host",), rows)
        table.move_cursor(row=2)
        fill(table, ("host",), rows)
        assert table.cursor_row == 2
        fill(table, ("host",), rows[:1])
        assert table.cursor_row == 0
