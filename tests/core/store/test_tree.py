"""`core.store.tree.make_folder`: every folder genjob makes under `.gen/`, whatever the umask."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from core.errors import BadInput
from core.store.tree import make_folder


@pytest.mark.parametrize("umask", [0o000, 0o002, 0o077])
def test_make_folder_makes_every_missing_folder_owner_writable_only(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        made = make_folder(tmp_path / "a/b/c", tmp_path)
    finally:
        os.umask(old)
    assert made == tmp_path / "a/b/c" and made.is_dir()
    for path in (tmp_path / "a", tmp_path / "a/b", made):
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o755 & ~umask


def test_make_folder_keeps_a_folder_that_is_there(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir(mode=0o700)
    (tmp_path / "a/kept").write_bytes(b"x")
    make_folder(tmp_path / "a", tmp_path)
    assert stat.S_IMODE(os.lstat(tmp_path / "a").st_mode) == 0o700
    assert (tmp_path / "a/kept").read_bytes() == b"x"


@pytest.mark.parametrize("depth", [0, 1, 2], ids=["the-folder", "its-parent", "above-that"])
def test_make_folder_never_goes_through_a_link(tmp_path: Path, depth: int) -> None:
    """`.gen/out` a link to a folder elsewhere that holds `digest/`: whether the link is the
    folder asked for or a folder above it, nothing is made through it."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "digest").mkdir(parents=True)
    gen = tmp_path / "gen"
    gen.mkdir()
    (gen / "out").symlink_to(elsewhere)
    target = gen.joinpath("out", *["digest", "src"][:depth])
    with pytest.raises(BadInput, match="out is a symlink, not a folder"):
        make_folder(target, gen)
    assert os.listdir(elsewhere) == ["digest"] and os.listdir(elsewhere / "digest") == []


def test_make_folder_refuses_a_file_where_a_folder_should_be(tmp_path: Path) -> None:
    (tmp_path / "out").write_bytes(b"not a folder")
    with pytest.raises(BadInput, match="out is a file, not a folder"):
        make_folder(tmp_path / "out/digest", tmp_path)
