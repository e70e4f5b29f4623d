"""Path rules: the pure check on allowed paths and the component-by-component disk check."""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from core.errors import BadInput
from core.model.paths import (
    MAX_COMPONENT_BYTES,
    check_relpath,
    checked,
    lstat_inside,
    regular_file_inside,
    repo_relative,
)

ROOT = "/srv/repo"

components = st.sampled_from(["a", "b.py", ".", "..", "...", "", ".gen", ".git", "x y", "é", "~", "a\\b"])
pathish = st.one_of(
    st.lists(components, min_size=1, max_size=6).map("/".join),
    st.lists(components, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts)),
    st.text(alphabet=st.sampled_from(list("ab./\\\x00\n~")), max_size=20),
    st.text(max_size=30),
)


@given(pathish)
@example("../x")
@example("a/../../b")
@example("a/./b")
@example("/etc/passwd")
@example("a//b")
@example("a/")
@example(".gen/queue/x.json")
@example(".git/config")
def test_an_accepted_path_never_escapes_the_repository(rel: str) -> None:
    try:
        check_relpath(rel)
    except ValueError:
        return
    joined = posixpath.normpath(posixpath.join(ROOT, rel))
    assert joined.startswith(ROOT + "/")
    assert posixpath.relpath(joined, ROOT) == rel, "an accepted path is already in normal form"
    top = rel.split("/")[0]
    assert top not in (".gen", ".git")
    assert "\\" not in rel and "\x00" not in rel


@given(st.lists(st.text(alphabet="abcdefgh_-.", min_size=1, max_size=12), min_size=1, max_size=5))
def test_ordinary_relative_paths_are_accepted_unchanged(parts: list[str]) -> None:
    rel = "/".join(parts)
    if any(p in (".", "..") for p in parts) or parts[0] in (".gen", ".git"):
        return
    assert check_relpath(rel) == rel


@pytest.mark.parametrize(
    ("rel", "fault"),
    [
        ("", "empty path"),
        ("../x", "'..' is not allowed"),
        ("a/../../b", "'..' is not allowed"),
        ("a/./b", "'.' is not allowed"),
        ("a//b", "'' is not allowed"),
        ("a/", "'' is not allowed"),
        ("/etc/passwd", "absolute path"),
        ("a\\b", "backslash"),
        ("a\nb", "control character"),
        ("a\x00b", "control character"),
        (".gen/queue/k.json", "under .gen/"),
        (".git/hooks/pre-commit", "under .git/"),
        ("x" * (MAX_COMPONENT_BYTES + 1), "longer than 255 bytes"),
        ("\udcff", "not valid UTF-8"),
    ],
)
def test_refused_paths_say_why(rel: str, fault: str) -> None:
    with pytest.raises(ValueError) as err:
        check_relpath(rel)
    assert fault in str(err.value)
    with pytest.raises(BadInput) as bad:
        checked(rel, "job.json")
    assert str(bad.value).startswith(f"job.json: {rel!r}: ")


def test_a_nested_gen_or_git_folder_is_an_ordinary_path() -> None:
    assert check_relpath("vendor/.git/x") == "vendor/.git/x"
    assert check_relpath("a/.gen") == "a/.gen"


def test_lstat_inside_refuses_a_symlinked_parent(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.py").write_text("x")
    root = tmp_path / "repo"
    root.mkdir()
    (root / "src").symlink_to(outside)
    with pytest.raises(BadInput, match="passes through the symlink"):
        lstat_inside(root, "src/f.py")


def test_lstat_inside_refuses_a_file_used_as_a_folder(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("x")
    with pytest.raises(BadInput, match="is not a directory"):
        lstat_inside(tmp_path, "a/b")


def test_lstat_inside_reports_missing_paths_as_none(tmp_path: Path) -> None:
    assert lstat_inside(tmp_path, "no/such/file") is None
    assert lstat_inside(tmp_path, "nofile") is None
    (tmp_path / "d").mkdir()
    assert lstat_inside(tmp_path, "d/x") is None


def test_regular_file_inside(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    (tmp_path / "d").mkdir()
    (tmp_path / "ln").symlink_to("f")
    os.mkfifo(tmp_path / "pipe")
    assert regular_file_inside(tmp_path, "f") is not None
    assert regular_file_inside(tmp_path, "gone") is None
    with pytest.raises(BadInput, match="ln: is a symlink"):
        regular_file_inside(tmp_path, "ln")
    with pytest.raises(BadInput, match="d: is not a regular file"):
        regular_file_inside(tmp_path, "d")
    with pytest.raises(BadInput, match="pipe: is not a regular file"):
        regular_file_inside(tmp_path, "pipe")


def test_repo_relative(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    assert repo_relative(root, "src/a.py", root) == "src/a.py"
    assert repo_relative(root, "a.py", root / "src") == "src/a.py"
    assert repo_relative(root, "../README.md", root / "src") == "README.md"
    assert repo_relative(root, str(root / "src/b.py"), tmp_path) == "src/b.py"
    with pytest.raises(BadInput, match="outside the repository"):
        repo_relative(root, "/etc/passwd", root)
    with pytest.raises(BadInput, match="outside the repository"):
        repo_relative(root, "../../x", root / "src")
    with pytest.raises(BadInput, match=r"under \.gen/"):
        repo_relative(root, ".gen/config.toml", root)
    with pytest.raises(BadInput, match=r"'\.' is not allowed"):
        repo_relative(root, ".", root)
