"""The apply plane end to end: 20 jobs over 5 shared files, minted on one base, shipped in
parallel to 4 local hosts, applied by `genjob apply --ready --merge`."""

from __future__ import annotations

import subprocess
from pathlib import Path

from planekit import GENJOB, expected_tree, files_now, make_scenario

from core.store.queue import locate

# Four jobs on each file, each on a line of its own, eight lines apart: every merge is clean.
SPREAD = [(j % 5, (j // 5) * 8 + 1) for j in range(20)]


def apply_ready(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [GENJOB, "--root", str(root), "apply", "--ready", "--merge"], capture_output=True, text=True
    )


def test_twenty_jobs_over_five_files_end_applied_as_merged_in_queue_order(tmp_path: Path) -> None:
    s = make_scenario(tmp_path / "repo", SPREAD)
    want, conflicted = expected_tree(s)
    assert conflicted == []
    res = apply_ready(s.layout.root)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert sum(line.startswith("applied ") for line in lines) == 5  # the first on each file
    assert sum(line.startswith("merged ") for line in lines) == 15  # the others, merged over it
    assert all(locate(s.layout, k).folder == "applied" for k in s.keys)
    assert files_now(s) == want


def test_a_job_that_collides_names_its_conflict_and_the_rest_apply(tmp_path: Path) -> None:
    # The last job edits the line the first does, otherwise.
    s = make_scenario(tmp_path / "repo", [*SPREAD[:19], (0, 1, "other")])
    want, conflicted = expected_tree(s)
    assert len(conflicted) == 1
    res = apply_ready(s.layout.root)
    assert res.returncode == 0, res.stderr
    left = [line for line in res.stdout.splitlines() if line.startswith("left ")]
    assert len(left) == 1 and left[0].startswith(f"left {conflicted[0]}")
    assert "the three-way merge conflicts in src/f0.py" in left[0] and "genjob replay" in left[0]
    assert [k for k in s.keys if locate(s.layout, k).folder != "applied"] == conflicted
    assert files_now(s) == want
