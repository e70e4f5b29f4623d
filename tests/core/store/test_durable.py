"""Durable file operations (`core.store.durable`): the contract every writer of `.gen/` relies on.

Each operation works in one folder opened without following links, writes under a
unique temp name, fsyncs the file and then the folder, and on any fault leaves the
target as it was and no temp file behind.
"""

from __future__ import annotations

import errno
import fcntl
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import BadInput, DurabilityError
from core.store import durable
from core.store.durable import (
    TMP_PREFIX,
    append_line,
    atomic_write,
    create_exclusive,
    environment_fault,
    flocked,
    folder,
    move,
    remove_stale_temps,
    temp_at,
)


def temps(path: Path) -> list[str]:
    return sorted(name for name in os.listdir(path) if name.startswith(TMP_PREFIX))


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What each fsync was made on (the path its descriptor names), in order."""
    seen: list[str] = []
    real = os.fsync

    def recording(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return seen


def failing_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", fail)


# --- atomic_write ------------------------------------------------------------------------


def test_atomic_write_creates_and_replaces_with_the_mode_given(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    atomic_write(target, b"one")
    assert target.read_bytes() == b"one"
    assert target.stat().st_mode & 0o777 == 0o644
    inode = target.stat().st_ino
    atomic_write(target, b"two", mode=0o600)
    assert target.read_bytes() == b"two"
    assert target.stat().st_mode & 0o777 == 0o600
    assert target.stat().st_ino != inode  # a new file renamed over, never written in place
    assert temps(tmp_path) == []


def test_atomic_write_takes_chunks_made_as_they_are_written(tmp_path: Path) -> None:
    made: list[int] = []

    def chunks() -> Iterator[bytes]:
        for i in range(3):
            made.append(i)
            yield f"part{i};".encode()

    atomic_write(tmp_path / "f", chunks())
    assert (tmp_path / "f").read_bytes() == b"part0;part1;part2;"
    assert made == [0, 1, 2]


@settings(max_examples=50, deadline=None)
@given(old=st.binary(max_size=2048), chunks=st.lists(st.binary(max_size=4096), max_size=8))
def test_atomic_write_leaves_exactly_the_new_bytes(old: bytes, chunks: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "f"
        target.write_bytes(old)
        atomic_write(target, iter(chunks), durable=False)
        assert target.read_bytes() == b"".join(chunks)
        assert os.listdir(tmp) == ["f"]


def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")

    def chunks() -> Iterator[bytes]:
        yield b"half of the new"
        raise RuntimeError("the producer died")

    with pytest.raises(RuntimeError):
        atomic_write(target, chunks())
    assert target.read_bytes() == b"old"
    assert temps(tmp_path) == []


def test_atomic_write_fsyncs_the_file_then_the_folder(tmp_path: Path, fsynced: list[str]) -> None:
    target = tmp_path / "f"
    atomic_write(target, b"data")
    assert len(fsynced) == 2
    assert Path(fsynced[0]).parent == tmp_path and Path(fsynced[0]).name.startswith(TMP_PREFIX)
    assert fsynced[1] == str(tmp_path)


def test_atomic_write_not_durable_makes_no_fsync(tmp_path: Path, fsynced: list[str]) -> None:
    atomic_write(tmp_path / "lease", b"data", durable=False)
    assert (tmp_path / "lease").read_bytes() == b"data"
    assert fsynced == []


def test_a_failed_fsync_is_an_error_and_the_target_is_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")
    failing_fsync(monkeypatch)
    with pytest.raises(DurabilityError, match=r"f: fsync failed .*nothing was committed"):
        atomic_write(target, b"new")
    assert target.read_bytes() == b"old"
    assert temps(tmp_path) == []


def test_a_full_disk_is_named_with_the_file_and_nothing_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")

    def no_space(fd: int, data: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(durable, "write_all", no_space)
    with pytest.raises(DurabilityError) as err:
        atomic_write(target, b"new")
    assert str(err.value) == f"{target}: no space left on the device; nothing was changed there"
    assert target.read_bytes() == b"old"
    assert temps(tmp_path) == []


def test_a_folder_swapped_for_a_symlink_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    with pytest.raises(BadInput, match="not a real folder"):
        atomic_write(tmp_path / "link" / "f", b"data")
    with pytest.raises(BadInput, match="not a real folder"):
        create_exclusive(tmp_path / "link" / "f", b"data")
    with pytest.raises(BadInput, match="not a real folder"):
        append_line(tmp_path / "link" / "f", b"data")
    assert os.listdir(real) == []


def test_a_file_where_the_folder_should_be_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plain").write_bytes(b"")
    with pytest.raises(BadInput, match="not a real folder"):
        atomic_write(tmp_path / "plain" / "f", b"data")


def test_a_missing_folder_is_not_created(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        atomic_write(tmp_path / "absent" / "f", b"data")
    assert not (tmp_path / "absent").exists()


def test_atomic_write_replaces_a_symlink_without_writing_through_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (tmp_path / "f").symlink_to(victim)
    atomic_write(tmp_path / "f", b"new")
    assert not (tmp_path / "f").is_symlink()
    assert (tmp_path / "f").read_bytes() == b"new"
    assert victim.read_bytes() == b"keep"


# --- temp files --------------------------------------------------------------------------


def test_a_temp_file_is_locked_while_in_use_and_gone_after(tmp_path: Path) -> None:
    with folder(tmp_path) as dir_fd, temp_at(dir_fd, b"data", tmp_path / "f") as name:
        assert name.startswith(TMP_PREFIX)
        assert (tmp_path / name).read_bytes() == b"data"
        fd = os.open(tmp_path / name, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    assert temps(tmp_path) == []


def test_temp_names_are_unique(tmp_path: Path) -> None:
    with folder(tmp_path) as fd, temp_at(fd, b"a", tmp_path) as a, temp_at(fd, b"b", tmp_path) as b:
        assert a != b
        assert (tmp_path / a).read_bytes() == b"a" and (tmp_path / b).read_bytes() == b"b"


def test_stale_temps_are_swept_and_a_write_in_progress_is_kept(tmp_path: Path) -> None:
    abandoned = tmp_path / f"{TMP_PREFIX}deadbeef"
    abandoned.write_bytes(b"left by a writer that died")
    (tmp_path / "job.json").write_bytes(b"{}")
    with folder(tmp_path) as dir_fd, temp_at(dir_fd, b"in progress", tmp_path) as busy:
        assert remove_stale_temps(tmp_path) == [abandoned]
        assert (tmp_path / busy).exists()
    assert sorted(os.listdir(tmp_path)) == ["job.json"]


def test_sweeping_a_missing_or_symlinked_folder_removes_nothing(tmp_path: Path) -> None:
    assert remove_stale_temps(tmp_path / "absent") == []
    real = tmp_path / "real"
    real.mkdir()
    (real / f"{TMP_PREFIX}x").write_bytes(b"")
    (tmp_path / "link").symlink_to(real)
    assert remove_stale_temps(tmp_path / "link") == []
    assert (real / f"{TMP_PREFIX}x").exists()


# --- create_exclusive --------------------------------------------------------------------


def test_create_exclusive_makes_a_file_once_and_never_replaces_it(tmp_path: Path) -> None:
    target = tmp_path / "claim"
    assert create_exclusive(target, b"first") is True
    assert create_exclusive(target, b"second") is False
    assert target.read_bytes() == b"first"
    assert temps(tmp_path) == []


def test_create_exclusive_races_have_one_winner(tmp_path: Path) -> None:
    target = tmp_path / "claim"
    results: list[bool] = []
    start = threading.Barrier(8)

    def racer(i: int) -> None:
        start.wait()
        results.append(create_exclusive(target, f"racer {i}".encode()))

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]
    assert target.read_bytes().startswith(b"racer ")
    assert temps(tmp_path) == []


# --- move --------------------------------------------------------------------------------


def test_move_renames_and_fsyncs_both_folders(tmp_path: Path, fsynced: list[str]) -> None:
    (tmp_path / "queue").mkdir()
    (tmp_path / "running").mkdir()
    src, dst = tmp_path / "queue" / "k.json", tmp_path / "running" / "k.json"
    src.write_bytes(b"job")
    move(src, dst)
    assert dst.read_bytes() == b"job" and not src.exists()
    assert fsynced == [str(tmp_path / "running"), str(tmp_path / "queue")]


def test_move_within_one_folder_fsyncs_it_once(tmp_path: Path, fsynced: list[str]) -> None:
    (tmp_path / "a").write_bytes(b"x")
    move(tmp_path / "a", tmp_path / "b")
    assert fsynced == [str(tmp_path)]


def test_move_can_leave_the_source_folder_unsynced(tmp_path: Path, fsynced: list[str]) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "d").mkdir()
    (tmp_path / "s" / "f").write_bytes(b"x")
    move(tmp_path / "s" / "f", tmp_path / "d" / "f", sync_source=False)
    assert fsynced == [str(tmp_path / "d")]


def test_move_never_replaces_an_existing_file(tmp_path: Path) -> None:
    src, dst = tmp_path / "a", tmp_path / "b"
    src.write_bytes(b"mine")
    dst.write_bytes(b"theirs")
    with pytest.raises(FileExistsError):
        move(src, dst)
    assert src.read_bytes() == b"mine" and dst.read_bytes() == b"theirs"


def test_move_of_a_file_someone_else_moved_first_says_so(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        move(tmp_path / "gone", tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_move_into_a_symlinked_folder_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "a").write_bytes(b"x")
    with pytest.raises(BadInput, match="not a real folder"):
        move(tmp_path / "a", tmp_path / "link" / "a")
    assert (tmp_path / "a").exists() and os.listdir(real) == []


def test_a_failed_fsync_after_a_move_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a").write_bytes(b"x")
    failing_fsync(monkeypatch)
    with pytest.raises(DurabilityError, match="fsync failed"):
        move(tmp_path / "a", tmp_path / "b")


# --- append_line -------------------------------------------------------------------------


def test_append_line_creates_the_file_and_ends_each_line_once(tmp_path: Path) -> None:
    log = tmp_path / "events.jsonl"
    append_line(log, b'{"a":1}')
    append_line(log, b'{"b":2}\n')
    assert log.read_bytes() == b'{"a":1}\n{"b":2}\n'


@settings(max_examples=50, deadline=None)
@given(lines=st.lists(st.binary(max_size=200).filter(lambda b: b"\n" not in b), max_size=10))
def test_appended_lines_read_back_in_order(lines: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log"
        for line in lines:
            append_line(log, line)
        assert (log.read_bytes() if lines else b"") == b"".join(line + b"\n" for line in lines)


def test_append_line_fsyncs_only_when_durable(tmp_path: Path, fsynced: list[str]) -> None:
    log = tmp_path / "log"
    append_line(log, b"a")
    assert fsynced == []
    append_line(log, b"b", durable=True)
    assert fsynced == [str(log)]


def test_append_line_refuses_a_fifo_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "log"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="not a regular file; nothing appended"):
        append_line(fifo, b"a")


def test_append_line_refuses_a_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"")
    (tmp_path / "log").symlink_to(victim)
    with pytest.raises(BadInput, match="not a regular file"):
        append_line(tmp_path / "log", b"a")
    assert victim.read_bytes() == b""


# --- flocked and environment faults ------------------------------------------------------


def test_flocked_excludes_a_second_holder(tmp_path: Path) -> None:
    lock = tmp_path / "state.lock"
    with flocked(lock) as first:
        assert first is True
        # flock locks belong to the open file, so a second open in this process contends too.
        with flocked(lock, blocking=False) as second:
            assert second is False
    with flocked(lock, blocking=False) as again:
        assert again is True


def test_flocked_refuses_a_symlinked_lock(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").write_bytes(b"")
    (tmp_path / "state.lock").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(BadInput, match="a symlink, not the lock file"), flocked(tmp_path / "state.lock"):
        pass


@pytest.mark.parametrize(
    ("code", "why"),
    [
        (errno.ENOSPC, "no space left on the device"),
        (errno.EDQUOT, "disk quota exceeded"),
        (errno.EROFS, "read-only file system"),
        (errno.EACCES, "permission denied"),
        (errno.EIO, "input/output error"),
    ],
)
def test_environment_faults_name_the_file_and_the_fault(code: int, why: str) -> None:
    err = environment_fault(OSError(code, os.strerror(code)), Path("/r/.gen/queue/k.json"))
    assert isinstance(err, DurabilityError)
    assert str(err) == f"/r/.gen/queue/k.json: {why}; nothing was changed there"


def test_other_os_errors_are_not_environment_faults() -> None:
    assert environment_fault(OSError(errno.ENOENT, "No such file"), "x") is None
    assert environment_fault(OSError("no errno"), "x") is None
