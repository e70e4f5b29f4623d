"""The board's best-of-N view: candidates side by side, diffs against the tree and against
each other, and `a` on a candidate approving that one."""

from __future__ import annotations

from pathlib import Path

from boardkit import plain, run_board
from corekit import mint, set_config
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import CommandHost, host_block, script, write_config
from textual.widgets import DataTable, Static

from core.store.candidate_store import chosen, load
from core.store.layout import Layout
from core.work.ship_candidates import CandidateRequest, ship_candidates
from tui.dialogs.preflight import PreflightDialog
from tui.screens.candidates import CandidatesScreen


def writes(tmp: Path, name: str, text: str) -> str:
    return script(tmp, name, f"open('src/app.py', 'w').write({text!r})\n")


async def three_candidates(repo: Layout, tmp: Path) -> str:
    write_config(
        repo,
        host_block("a", None, writes(tmp, "a", "from a\n"), concurrency=2),
        host_block("b", CommandHost(None), writes(tmp, "b", "from b\n")),
        host_block("broken", None, "exit 5"),
    )
    job = mint(repo, "Say where you ran.")
    results = await ship_candidates(
        repo, CandidateRequest(job.key, ["a", "b", "broken"], 3), worker_id="tester"
    )
    assert [r.status for r in results] == ["ok", "ok", "rejected"]
    return job.key


def cells(table: DataTable, row: int) -> list[str]:  # type: ignore[type-arg]
    return [str(c) for c in table.get_row_at(row)]


async def test_a_on_a_job_with_candidates_compares_them_and_approves_the_one_picked(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    key = await three_candidates(repo, tmp_path)
    async with run_board(repo.root, key=key) as d:
        assert d.state_of(key) == "RECEIVED"
        await d.press("a")
        screen = await d.showing(CandidatesScreen)
        table = screen.query_one(DataTable)
        await d.until(lambda: table.row_count == 3, "a row per candidate")
        assert [cells(table, i)[:4] for i in range(3)] == [
            ["1", "a", "ok", "yes"],
            ["2", "b", "ok", "yes"],
            ["3", "broken", "rejected", "no"],
        ]
        assert cells(table, 0)[5] == "1 file +1 -2"
        assert cells(table, 0)[4] == "-", "no checks configured"
        assert cells(table, 2)[7].endswith("…"), "the reason is cut to fit 80 columns"
        reason = screen.query_one("#cand-reason", Static)
        table.move_cursor(row=2)
        await d.until(lambda: "the generator exited with status 5" in plain(reason), "its whole reason")
        table.move_cursor(row=0)
        body = screen.query_one("#cand-diff", Static)
        await d.until(lambda: "+ from a" in plain(body), "candidate 1's diff against the tree")
        assert "candidate 1 against the tree" in plain(body) and "- def main():" in plain(body)

        await d.press("down")
        await d.until(lambda: "+ from b" in plain(body), "candidate 2's diff")
        await d.press("b")
        await d.press("up")
        await d.until(lambda: "candidate 1 against candidate 2" in plain(body), "1 against 2")
        assert "- from b" in plain(body) and "+ from a" in plain(body)

        await d.press("down")
        await d.until(lambda: "candidate 2 against" in plain(body), "the cursor on 2")
        await d.press("a")
        dialog = await d.showing(PreflightDialog)
        assert f"apply candidate 2 of {key}" in plain(dialog.query_one("#preflight-body", Static))
        await d.press("y")
        await d.settle()
        await d.until(lambda: d.state_of(key) == "APPLIED", "the job applied")
    assert (repo.root / "src/app.py").read_bytes() == b"from b\n"
    assert chosen(repo, key) == 2
    assert (load(repo, key, 1).files.out / "src/app.py").read_bytes() == b"from a\n", "kept as evidence"


async def test_a_failing_candidate_cannot_be_approved_and_escape_goes_back(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    key = await three_candidates(repo, tmp_path)
    async with run_board(repo.root, key=key) as d:
        await d.press("a")
        screen = await d.showing(CandidatesScreen)
        table = screen.query_one(DataTable)
        await d.until(lambda: table.row_count == 3, "a row per candidate")
        await d.press("down", "down", "a")
        dialog = await d.showing(PreflightDialog)
        assert "apply would be refused" in plain(dialog.query_one("#preflight-body", Static))
        await d.press("y")
        await d.until(lambda: d.inbox.said("does not verify"), "the refusal")
        await d.press("n")
        await d.showing(CandidatesScreen)
        await d.press("escape")
        await d.until(lambda: not isinstance(d.app.screen, CandidatesScreen), "back on the board")
        assert d.state_of(key) == "RECEIVED"
    assert not repo.receipt(key).exists(), "nothing chosen"


async def test_a_candidate_whose_required_checks_have_not_run_is_chosen_and_then_checked(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """Checks run on a chosen receipt: the candidate's preflight offers to choose it without
    applying, the board starts its checks, and approve then applies it."""
    key = await three_candidates(repo, tmp_path)
    text = repo.config.read_text().replace("[policy]\n", '[policy]\nrequire_checks = ["tests"]\n', 1)
    set_config(repo, text + '\n[checks.tests]\nrun = "true"\nsandbox = "none"\n')
    async with run_board(repo.root, key=key) as d:
        await d.press("a")
        screen = await d.showing(CandidatesScreen)
        table = screen.query_one(DataTable)
        await d.until(lambda: table.row_count == 3, "a row per candidate")
        await d.press("down", "a")
        dialog = await d.showing(PreflightDialog)
        body = plain(dialog.query_one("#preflight-body", Static))
        assert "required check(s) not passed on these outputs: tests" in body
        assert "y chooses this candidate without applying it" in body
        assert str(dialog.query_one("#yes").label) == "Choose 2 (y)"
        await d.press("y")
        await d.until(lambda: d.inbox.said("chose candidate 2"), "the choice")
        await d.until(lambda: repo.check_record(key, "tests").exists(), "its check ran")
        assert (repo.root / "src/app.py").read_bytes() != b"from b\n", "chosen, not applied"
        assert chosen(repo, key) == 2
        await d.press("a")
        dialog = await d.showing(PreflightDialog)
        await d.until(lambda: dialog.preflight.may_apply, "the check passed")
        await d.press("y")
        await d.until(lambda: d.state_of(key) == "APPLIED", "the job applied")
    assert (repo.root / "src/app.py").read_bytes() == b"from b\n"


async def test_t_runs_the_highlighted_candidates_checks_and_the_marks_show_each_result(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    """Before a choice: each candidate's checks are its own (passed on one, failed on another)."""
    key = await three_candidates(repo, tmp_path)
    checks = '\n[checks.says_b]\nrun = "grep -q \'from b\' src/app.py"\nsandbox = "none"\n'
    set_config(repo, repo.config.read_text() + checks + "\n[check_runs]\non_receipt = false\n")
    async with run_board(repo.root, key=key) as d:
        await d.press("a")
        screen = await d.showing(CandidatesScreen)
        table = screen.query_one(DataTable)
        await d.until(lambda: table.row_count == 3, "a row per candidate")
        assert [cells(table, i)[4] for i in range(3)] == ["·", "·", "·"], "configured, not run"
        await d.press("t")
        await d.until(lambda: cells(table, 0)[4] == "✘", "candidate 1's check failed")
        await d.press("down", "t")
        await d.until(lambda: cells(table, 1)[4] == "✔", "candidate 2's check passed")
        assert cells(table, 0)[4] == "✘" and cells(table, 2)[4] == "·"
        assert d.inbox.said("candidate 2: 1 check(s) passed")
        assert not repo.check_record(key, "says_b").exists(), "a candidate's record is its own"
        assert d.state_of(key) == "RECEIVED"


async def test_the_candidates_columns_fit_80_columns_and_a_rejected_ones_reason_shows(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    key = await three_candidates(repo, tmp_path)
    async with run_board(repo.root, (80, 24), key=key) as d:
        await d.press("a")
        screen = await d.showing(CandidatesScreen)
        table = screen.query_one(DataTable)
        await d.until(lambda: table.row_count == 3, "a row per candidate")
        await d.pilot.pause()
        assert table.virtual_size.width <= 80, [str(c.label) for c in table.columns.values()]
        await d.press("down", "down")
        reason = screen.query_one("#cand-reason", Static)
        await d.until(lambda: "the generator exited with status 5" in plain(reason), "the whole reason")
        assert reason.region.height >= 1 and screen.region.contains_region(reason.region)
