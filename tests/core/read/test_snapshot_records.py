"""core.read.snapshot_records: the records a listing shows and keeps."""

from __future__ import annotations

import json
import os
from pathlib import Path

from core.model.lifecycle import State
from core.read.snapshot_records import FileStamp, JobRow


def test_a_row_as_json() -> None:
    row = JobRow(
        "a" * 32, State.RUNNING, "genjob.v2", "d" * 64, "do", ("a.py",), 1.5, 2, "", None, ("running",), ()
    )
    got = json.loads(json.dumps(row.to_dict()))
    assert got["state"] == "RUNNING" and got["worker"] is None and got["allowed_paths"] == ["a.py"]
    assert set(got) == set(JobRow._fields)


def test_a_file_stamp_changes_when_the_file_is_written(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"one")
    before = FileStamp.of(os.stat(path))
    assert before == FileStamp.of(os.stat(path))
    os.utime(path, ns=(1, 1))
    path.write_bytes(b"two!")
    assert FileStamp.of(os.stat(path)) != before
