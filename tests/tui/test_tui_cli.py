"""`genjob tui` and `genjob demo` as commands (the board itself is driven in test_tui_board)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from core.read.snapshot import take_snapshot
from core.store.layout import Layout
from tui.cli import main

GENJOB = str(Path(sys.executable).with_name("genjob"))


def test_tui_outside_a_repository_is_one_clear_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["--root", str(tmp_path), "tui"])
    assert res.exit_code == 2
    assert "no .gen/ here" in res.output


def test_demo_no_tui_builds_every_state_and_reopens(tmp_path: Path) -> None:
    where = tmp_path / "demo"
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    proc = subprocess.run([GENJOB, "demo", str(where), "--no-tui"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"demo repository: {where}" in proc.stdout
    holder = int(proc.stdout.split("lease holder (pid ")[1].split(")")[0])
    try:
        states = {r.state.value for r in take_snapshot(Layout(where), disk_cache=False).rows.values()}
        assert states == {
            "QUEUED",
            "RUNNING",
            "ORPHANED",
            "RECEIVED",
            "STALE",
            "FAILED",
            "APPLIED",
            "REJECTED",
            "INVALID",
        }
        assert (where / ".demo-config" / "genjob" / "worker_ed25519").exists()
        assert not (tmp_path / "xdg").exists()  # the user's own config is never touched
    finally:
        os.kill(holder, 15)
    again = subprocess.run([GENJOB, "demo", str(where), "--no-tui"], capture_output=True, text=True, env=env)
    assert again.returncode == 0 and "reopened" in again.stdout
    if "lease holder (pid " in again.stdout:
        os.kill(int(again.stdout.split("lease holder (pid ")[1].split(")")[0]), 15)


def test_demo_refuses_a_folder_that_holds_something_else(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    res = CliRunner().invoke(main, ["demo", str(tmp_path), "--no-tui"])
    assert res.exit_code == 2 and "not empty" in res.output
    assert (tmp_path / "mine.txt").read_text() == "keep me"
