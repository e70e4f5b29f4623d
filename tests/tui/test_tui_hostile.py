"""The board against what a host or a repository chose to show: output without end, and
Textual markup in file names, host names and reasons. Nothing is kept without a bound,
and nothing is read as markup: it shows as the characters it is."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from boardkit import drawn, run_board
from corekit import git, mint, set_config
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import endless_line, host_block, hostile_host, runner_result, script, write_config
from textual.widget import Widget
from textual.widgets import DataTable, Input, Log, SelectionList
from textual.widgets._toast import Toast

from core.plan.submit import submit_job
from core.store.events import MAX_FIELD_CHARS
from core.store.evidence import MAX_TAIL_BYTES, keep
from core.store.layout import Layout
from core.work.ship_candidates import CandidateRequest, ship_candidates
from tui.dialogs.bulk_ship import BulkShipDialog
from tui.dialogs.new_job import NewJobDialog
from tui.dialogs.ship import MAX_LINE_CHARS, MAX_UNSHOWN_CHARS, ShipDialog, Unshown
from tui.screens.candidates import CandidatesScreen
from tui.services.feed import LOG_LINE_CHARS
from tui.widgets.detail import DetailPane

CUT = f" … [line cut at {MAX_LINE_CHARS} characters]"


async def test_the_ship_dialog_cuts_a_line_without_end(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """80 MB without a newline: the dialog once kept it all, joined again on each chunk."""
    write_config(repo, host_block("local", None, endless_line(tmp_path), timeout=300))
    key = submit_job(repo, "say a lot", ["src/app.py"], []).key
    held: list[int] = []
    add = Unshown.add

    def measured(unshown: Unshown, data: bytes) -> None:
        add(unshown, data)
        held.append(unshown.size)

    monkeypatch.setattr(Unshown, "add", measured)
    async with run_board(repo.root, key=key) as d:
        await d.press("s")
        dialog = await d.showing(ShipDialog)
        await d.until(lambda: dialog.done, "the ship to end")
        lines = dialog.query_one(Log).lines
    assert len(held) > 80 and max(held) <= MAX_UNSHOWN_CHARS, "output waiting to be drawn"
    assert max(len(line) for line in lines) == MAX_LINE_CHARS + len(CUT)
    assert "x" * MAX_LINE_CHARS + CUT in lines and "done" in lines


async def test_the_bulk_ship_dialog_keeps_a_reason_of_a_megabyte_cut(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """Each job's line quotes its receipt's reason, and the host chose this one."""
    violations = [f"{i}: " + "v" * 1000 for i in range(1000)]
    write_config(repo, hostile_host(tmp_path, "evil", runner_result(violations=violations)))
    keys = [mint(repo, f"job {i}").key for i in range(2)]
    async with run_board(repo.root) as d:
        await d.ship_marked(keys)
        dialog = await d.showing(BulkShipDialog)
        await d.until(lambda: dialog.done, "the batch to end")
    for key in keys:
        line, _ = dialog.board_batch.lines[key]
        assert line.startswith("rejected on evil: 0: vvv") and len(line) < MAX_FIELD_CHARS + 100


def test_output_the_screen_has_not_drawn_is_held_within_its_bound() -> None:
    unshown = Unshown()
    for _ in range(8):
        unshown.add(b"y\n" * (MAX_UNSHOWN_CHARS // 4))
    assert unshown.size <= MAX_UNSHOWN_CHARS
    shown = unshown.take()
    assert shown.startswith("\n[genjob] ") and "characters of output came faster" in shown
    assert (unshown.size, unshown.take()) == (0, "")


async def test_the_detail_cuts_a_generator_log_of_one_endless_line(repo: Layout) -> None:
    """A host's output is kept as the job's log: all of its tail can be one line."""
    job = mint(repo, "say a lot")
    keep(repo, job.key, "attempt-1.log", b"z" * MAX_TAIL_BYTES)
    async with run_board(repo.root, key=job.key) as d:
        detail = d.board.query_one(DetailPane).detail
        assert detail is not None
    assert detail.log_tail == "z" * LOG_LINE_CHARS + f" … [line cut at {LOG_LINE_CHARS} characters]"


# --- markup: a name is shown as the characters it is ----------------------------------
# Textual reads a `str` handed to a widget or a toast as markup: this name would show as
# `src/hiddenapp.py`, with a click on "hidden" quitting the board.
MARKED = "src/[@click=app.quit]hidden[/]app.py"


def add_marked_file(repo: Layout) -> None:
    (repo.root / MARKED).parent.mkdir(parents=True)  # "src/[@click=app.quit]hidden[" is a folder
    (repo.root / MARKED).write_text("x = 1\n")
    git(repo.root, "add", "-A")
    git(repo.root, "commit", "-q", "-m", "a file whose name is markup")


def shown_as_it_is(widget: Widget, text: str) -> bool:
    """`widget` draws `text` literally somewhere, and no click action anywhere."""
    lines = drawn(widget)
    assert all(not actions for _, actions in lines), lines
    return any(text in line for line, _ in lines)


async def test_the_new_job_picker_shows_a_file_name_as_it_is(repo: Layout) -> None:
    add_marked_file(repo)
    async with run_board(repo.root, jobs=False) as d:
        await d.press("n")
        dialog = await d.showing(NewJobDialog)
        files = dialog.query_one("#files", SelectionList)
        dialog.query_one("#file-filter", Input).value = "hidden"
        await d.until(lambda: files.option_count == 1, "the file list, filtered")
        await d.pilot.pause()
        assert shown_as_it_is(files, MARKED)


async def test_a_candidates_toast_shows_a_file_name_as_it_is(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """`t` on a candidate whose input changed since minting: the refusal names the file."""
    add_marked_file(repo)
    write = script(tmp_path, "writes", f"open({MARKED!r}, 'w').write('x = 2\\n')\n")
    write_config(repo, host_block("a", None, write, concurrency=2))
    set_config(repo, repo.config.read_text() + '\n[checks.t]\nrun = "true"\nsandbox = "none"\n')
    job = mint(repo, "Change it.", [MARKED])
    await ship_candidates(repo, CandidateRequest(job.key, ["a"], 2), worker_id="tester")
    (repo.root / MARKED).write_text("changed in the tree\n")
    async with run_board(repo.root, key=job.key, notifications=True) as d:
        await d.press("a")
        screen = await d.showing(CandidatesScreen)
        table = screen.query_one(DataTable)
        await d.until(lambda: table.row_count == 2, "a row per candidate")
        await d.press("t")
        await d.until(lambda: any(MARKED in n for n in d.inbox.notes), "the refusal")
        toasts = list(d.screen.query(Toast))
        await d.until(lambda: all(t.size.height for t in toasts), "the toast drawn")
        assert any(shown_as_it_is(t, "hidden[/]app.py") for t in toasts)


# The widgets and calls that read a `str` as Textual markup (a Rich Table's cells, too).
READS_MARKUP = frozenset(
    {"Static", "Label", "Button", "Option", "Selection", "Checkbox", "update", "add_row"}
)
ADDS_PROMPTS = frozenset({"add_option", "add_options"})
# What makes a `str` out of text from outside: each result must reach a widget as `Text`.
STR_MAKERS = frozenset({"visible", "one_line", "in_repo", "str", "describe", "format"})


def names_a_str(node: ast.expr) -> bool:
    """Whether `node` builds a `str` that can hold text from outside: an f-string with a
    value in it, a `str`-making call, or a concatenation of either."""
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(v, ast.FormattedValue) for v in node.values)
    if isinstance(node, ast.Call):
        func = node.func
        return (func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")) in STR_MAKERS
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return names_a_str(node.left) or names_a_str(node.right)
    return False


def markup_faults(source: str) -> list[str]:
    """Each call in `source` that hands a widget or a toast a built `str` (read as markup)."""
    faults = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        shown: list[ast.expr] = []
        if name == "notify":
            off = any(
                k.arg == "markup" and isinstance(k.value, ast.Constant) and not k.value.value
                for k in node.keywords
            )
            shown = [] if off else node.args[:1]
            if not off and shown and not isinstance(shown[0], ast.Constant):
                faults.append(f"line {node.lineno}: notify() of a built message without markup=False")
                continue
        elif name in READS_MARKUP:
            shown = list(node.args)
        elif name in ADDS_PROMPTS:
            for arg in node.args:
                items = arg.elts if isinstance(arg, ast.List | ast.Tuple) else [arg]
                if isinstance(arg, ast.ListComp):
                    items = [arg.elt]
                shown += [i.elts[0] if isinstance(i, ast.Tuple) else i for i in items]
        faults += [f"line {node.lineno}: {name}() of a built str" for arg in shown if names_a_str(arg)]
    return faults


def test_markup_faults_finds_what_the_picker_and_the_toast_did() -> None:
    assert markup_faults("pick.add_options([(visible(f), f, f in chosen) for f in shown])")
    assert markup_faults("self.notify(visible(str(exc)), severity='error')")
    assert markup_faults("yield Static(f'Shipping {key} to {host}', classes='t')")
    assert not markup_faults("pick.add_options([(literal(f), f, False) for f in shown])")
    assert not markup_faults("self.notify(visible(str(exc)), severity='error', markup=False)")
    assert not markup_faults("yield Static(Text(f'Shipping {key}'))")


def test_no_widget_or_toast_in_the_board_reads_outside_text_as_markup() -> None:
    """Every place in tui/ that shows text hands it over as `Text`, or with markup off."""
    tui = Path(__file__).resolve().parents[2] / "tui"
    faults = {
        str(path.relative_to(tui)): found
        for path in sorted(tui.rglob("*.py"))
        if "cli" not in path.relative_to(tui).parts and (found := markup_faults(path.read_text()))
    }
    assert faults == {}
