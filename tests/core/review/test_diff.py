"""core.review.diff: what applying an output would change in one file."""

from __future__ import annotations

import pytest
from corekit import sha

from core.review import diff
from core.review.diff import FileDiff, file_diff
from core.store.layout import Layout


def test_file_diff_of_identical_bytes_is_unchanged(
    repo: Layout, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = tmp_path_factory.mktemp("out")
    (out / "src").mkdir()
    data = (repo.root / "src/app.py").read_bytes()
    (out / "src/app.py").write_bytes(data)
    assert file_diff(repo.root, out, "src/app.py", sha(data)) == FileDiff(
        "src/app.py", "unchanged", 0, 0, "", True
    )


def test_file_diff_of_binary_missing_and_oversized_outputs(
    repo: Layout, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path_factory.mktemp("out")
    (out / "src").mkdir()
    (out / "src/app.py").write_bytes(b"\0binary\0")
    assert file_diff(repo.root, out, "src/app.py").status == "binary"
    assert file_diff(repo.root, out, "src/gone.py") == FileDiff("src/gone.py", "missing", 0, 0, "")
    monkeypatch.setattr(diff, "MAX_DIFF_BYTES", 4)
    assert file_diff(repo.root, out, "src/app.py") == FileDiff("src/app.py", "too large", 0, 0, "")


def test_file_diff_says_when_a_file_has_no_final_newline(
    repo: Layout, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = tmp_path_factory.mktemp("out")
    (out / "README.md").write_bytes(b"# demo\nno newline")
    diff = file_diff(repo.root, out, "README.md")
    assert diff.status == "modified" and diff.added == 1 and diff.removed == 0
    assert diff.text.endswith("+no newline\n\\ No newline at end of file\n")
    assert diff.signed is None
