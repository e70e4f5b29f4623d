"""core.read.snapshot_index: the index keeps every record whole, and is no index at all when it
is cut short, damaged, foreign or holds a value of the wrong type."""

from __future__ import annotations

import gc
import io
import marshal
import os
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.model.lifecycle import State
from core.read import snapshot_index
from core.read.snapshot_folders import LISTED
from core.read.snapshot_index import FACTS, ROWS, Malformed, read_index, write_index
from core.read.snapshot_records import (
    NO_LEASE_FACTS,
    NO_SUMMARY,
    ConfigStamp,
    FileFacts,
    FileStamp,
    Index,
    JobRow,
    JobSummary,
    LeaseFacts,
    LeaseRead,
    Listing,
    PackedIds,
    TreeStamp,
)

GEN = "/repo/.gen"
DEVICE = 2049
KEY = "a" * 32
DIGEST = "d" * 64


def sample_index(rows: int = 3) -> Index:
    """An index holding every kind of record, with shared and unshared values."""
    paths = ("src/app.py", "src/util.py")
    fixed = {
        f"{i:032x}": JobRow(
            f"{i:032x}",
            State.APPLIED,
            "genjob.v2",
            DIGEST,
            f"job {i}",
            paths,
            1.5 + i,
            i,
            "w1",
            None,
            ("applied",),
            (),
        )
        for i in range(rows)
    }
    job = JobSummary(
        "genjob.v2", DIGEST, "run me", paths, (("src/app.py", "e" * 64), ("src/util.py", None)), 2.0
    )
    volatile = {
        KEY: FileFacts(("running",), True, job, "", None, "ok", (), "w2", 1),
        "b" * 32: FileFacts(("queue", "running"), False, NO_SUMMARY, "", "bad", None, ("p",), "", 0),
    }
    leases = {
        KEY: LeaseRead(b'{"lease": 1}', None, LeaseFacts("w2", "host", 42, 3.0, 120.0)),
        "c" * 32: LeaseRead(b"nonsense", "c.lease: malformed JSON", NO_LEASE_FACTS),
    }
    listed = {folder: Listing(None, {}, None) for folder in LISTED}
    listed["queue"] = Listing((1, 2, 3), {k: 100 + i for i, k in enumerate(fixed)}, None)
    listed["running"] = Listing(None, {KEY: 7}, {KEY: None})
    listed["attempts"] = Listing((4, 5, 6), {KEY: (8, 9, 10), "b" * 32: (11, 12, -(2**63))}, None)
    listed["candidates"] = Listing(None, {KEY: (13, 4096, 2**63 - 1)}, None)
    return Index(
        config=ConfigStamp(
            FileStamp(1, 2, 3, 4), (5, 6, 7, 8), True, None, ("lint",), "it waits", ("*.lock",)
        ),
        tree={"src/app.py": TreeStamp(FileStamp(5, 6, 7, 8), "e" * 64)},
        listed=listed,
        fixed=fixed,
        volatile=volatile,
        leases=leases,
    )


def stored(tmp_path: Path, index: Index) -> Path:
    path = tmp_path / "snapshot.marshal"
    write_index(path, GEN, DEVICE, index)
    return path


def load(path: Path) -> Index | None:
    return read_index(path, GEN, DEVICE, LISTED)


def test_every_record_comes_back_as_it_was_written(tmp_path: Path) -> None:
    index = sample_index()
    got = load(stored(tmp_path, index))
    assert got == index
    assert got is not None
    row = next(iter(got.fixed.values()))
    assert type(row) is JobRow and row.state is State.APPLIED
    facts = got.volatile[KEY]
    assert type(facts) is FileFacts and type(facts.job) is JobSummary
    assert type(got.leases[KEY].facts) is LeaseFacts and type(got.tree["src/app.py"]) is TreeStamp


def test_growing_folders_come_back_packed_and_equal(tmp_path: Path) -> None:
    index = sample_index()
    got = load(stored(tmp_path, index))
    assert got is not None
    for folder in ("attempts", "candidates"):
        files = got.listed[folder].files
        assert type(files) is PackedIds
        assert files == index.listed[folder].files and index.listed[folder].files == files
        assert dict(files) == index.listed[folder].files
    assert got.listed["attempts"].files[KEY] == (8, 9, 10) and "c" * 32 not in got.listed["attempts"].files


def test_an_identity_out_of_64_bits_is_stored_as_a_tuple(tmp_path: Path) -> None:
    index = sample_index()
    index.listed["attempts"] = Listing(None, {KEY: (2**64, 1, 2)}, None)
    got = load(stored(tmp_path, index))
    assert got is not None and got.listed["attempts"].files == {KEY: (2**64, 1, 2)}
    assert type(got.listed["attempts"].files) is dict


def test_packed_ids_are_a_mapping() -> None:
    files = {KEY: (1, 2, 3), "b" * 32: (4, 5, 6)}
    packed = PackedIds.of(files)
    assert PackedIds.of(packed) is packed
    assert list(packed) == list(files) and len(packed) == 2 and packed.get("c" * 32) is None
    assert packed == PackedIds(packed.names, packed.numbers) and packed == files
    assert packed != {KEY: (1, 2, 3)} and packed != PackedIds.of({KEY: (1, 2, 3)}) and packed != [1]
    assert dict(packed.items() ^ {KEY: (1, 2, 4)}.items()).keys() == {KEY, "b" * 32}
    assert PackedIds.of({}) == {} and len(PackedIds("", b"")) == 0
    for names, numbers in ((KEY, b""), (KEY, bytes(23)), ("", bytes(24)), (1, b""), ("", bytearray())):
        with pytest.raises(ValueError):
            PackedIds(names, numbers)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        PackedIds.of({KEY: 7})


def test_a_growing_folder_in_two_frames_is_no_index(tmp_path: Path) -> None:
    path = stored(tmp_path, sample_index())
    good = frames(path)
    growing = next(f for f in good if f[0] == "growing")
    at = good.index(growing)
    bad = tmp_path / "bad"
    for extra in (growing, ("listed", growing[1], (KEY,), ((1, 2, 3),))):
        forged = [*good[: at + 1], extra, *good[at + 1 : -1]]
        bad.write_bytes(sealed([*forged, ("end", len(forged) + 1)]))
        assert load(bad) is None, extra[0]


def test_identities_of_the_other_kind_for_a_folder_are_no_index(tmp_path: Path) -> None:
    """A folder whose files do not grow is known by inodes, one whose files grow by
    (inode, size, mtime): a frame that gives a folder the other kind is forged."""
    path = stored(tmp_path, sample_index())
    good = frames(path)
    bad = tmp_path / "bad"
    for extra in (
        ("listed", "queue", (KEY,), ((1, 2, 3),)),
        ("listed", "attempts", (KEY,), (1,)),
        ("growing", "queue", KEY, bytes(24)),
    ):
        forged = [*good[:-1], extra]
        bad.write_bytes(sealed([*forged, ("end", len(forged) + 1)]))
        assert load(bad) is None, extra


def test_an_index_without_config_or_rows_comes_back_too(tmp_path: Path) -> None:
    empty = Index(
        None, {}, {f: Listing(None, {}, {} if f == "running" else None) for f in LISTED}, {}, {}, {}
    )
    assert load(stored(tmp_path, empty)) == empty


def test_an_index_of_many_slices_loads_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot_index, "SLICE", 2)
    index = sample_index(rows=9)
    assert load(stored(tmp_path, index)) == index


def test_one_string_per_key(tmp_path: Path) -> None:
    got = load(stored(tmp_path, sample_index()))
    assert got is not None
    for key, row in got.fixed.items():
        assert row.key is key
        listed_key = next(k for k in got.listed["queue"].files if k == key)
        assert listed_key is key


def test_another_gen_or_device_is_no_index(tmp_path: Path) -> None:
    path = stored(tmp_path, sample_index())
    assert read_index(path, "/other/.gen", DEVICE, LISTED) is None
    assert read_index(path, GEN, DEVICE + 1, LISTED) is None
    assert read_index(path, GEN, DEVICE, LISTED[:-1]) is None
    assert read_index(tmp_path / "missing", GEN, DEVICE, LISTED) is None


def test_an_index_another_user_could_have_written_is_no_index(tmp_path: Path) -> None:
    gen = tmp_path / ".gen"
    (gen / "cache").mkdir(parents=True)
    path = gen / "cache" / "snapshot.marshal"
    write_index(path, str(gen), DEVICE, sample_index())
    assert read_index(path, str(gen), DEVICE, LISTED) is not None
    (gen / "cache").chmod(0o775)
    assert read_index(path, str(gen), DEVICE, LISTED) is None
    (gen / "cache").chmod(0o755)
    path.chmod(0o646)
    assert read_index(path, str(gen), DEVICE, LISTED) is None
    path.chmod(0o644)
    if os.geteuid() == 0:
        os.lchown(path, 4242, 4242)
        assert read_index(path, str(gen), DEVICE, LISTED) is None


def test_a_fifo_or_a_link_in_the_index_place_is_no_index_and_never_blocks(tmp_path: Path) -> None:
    real = stored(tmp_path, sample_index())
    link = tmp_path / "link.marshal"
    link.symlink_to(real)
    assert load(link) is None
    fifo = tmp_path / "fifo.marshal"
    os.mkfifo(fifo)
    assert load(fifo) is None


def test_every_cut_and_every_flipped_byte_is_no_index(tmp_path: Path) -> None:
    path = stored(tmp_path, sample_index())
    whole = path.read_bytes()
    bad = tmp_path / "bad"
    for cut in range(len(whole)):
        bad.write_bytes(whole[:cut])
        assert load(bad) is None, cut
    for at in range(0, len(whole), 7):
        bad.write_bytes(whole[:at] + bytes([whole[at] ^ 0x41]) + whole[at + 1 :])
        assert load(bad) is None, at


def frames(path: Path) -> list[tuple[Any, ...]]:
    data = io.BytesIO(path.read_bytes()[len(snapshot_index.HEADER) :])
    out = []
    while data.tell() < len(data.getvalue()):
        out.append(snapshot_index._read_frame(data))
    return out


def sealed(frame_list: list[tuple[Any, ...]]) -> bytes:
    out = bytearray(snapshot_index.HEADER)
    for frame in frame_list:
        body = marshal.dumps(frame)
        out += len(body).to_bytes(4, "big") + zlib.crc32(body).to_bytes(4, "big") + body
    return bytes(out)


def test_a_sealed_frame_with_a_value_of_the_wrong_type_is_no_index(tmp_path: Path) -> None:
    """A well-formed file whose checksums hold but whose values do not fit their fields,
    as a writer other than genjob could make it."""
    path = stored(tmp_path, sample_index())
    good = frames(path)
    assert load(path) is not None
    bad = tmp_path / "bad"
    # Values marshal stores that no field of any record may hold.
    for at, frame in enumerate(good[:-1]):
        for col in range(1, len(frame)):
            for wrong in (1j, [1], {"k": 1}, frozenset({1})):
                column = frame[col]
                changed = (wrong, *column[1:]) if type(column) is tuple and column else wrong
                forged = (*frame[:col], changed, *frame[col + 1 :])
                bad.write_bytes(sealed([*good[:at], forged, *good[at + 1 :]]))
                assert load(bad) is None, (frame[0], col, wrong)
    bad.write_bytes(sealed(good))
    assert load(bad) == load(path), "the frames as read, sealed again, are the index"


def test_loading_leaves_the_collector_as_it_found_it(tmp_path: Path) -> None:
    path = stored(tmp_path, sample_index())
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            load(path)
            assert gc.isenabled() is enabled
        finally:
            gc.enable()


TEXT = st.text(max_size=8)
STRS = st.lists(TEXT, max_size=3).map(tuple)
rows = st.builds(
    JobRow,
    TEXT,
    st.sampled_from(State),
    TEXT,
    TEXT,
    TEXT,
    STRS,
    st.floats(allow_nan=False),
    st.integers(-(2**62), 2**62),
    TEXT,
    st.none() | TEXT,
    STRS,
    STRS,
)
summaries = st.builds(
    JobSummary,
    TEXT,
    TEXT,
    TEXT,
    STRS,
    st.lists(st.tuples(TEXT, st.none() | TEXT), max_size=3).map(tuple),
    st.floats(allow_nan=False),
)
facts = st.builds(
    FileFacts,
    STRS,
    st.booleans(),
    summaries,
    TEXT,
    st.none() | TEXT,
    st.none() | TEXT,
    STRS,
    TEXT,
    st.integers(0, 2**62),
)


@settings(max_examples=200)
@given(st.lists(rows, max_size=5), st.lists(facts, max_size=5))
def test_columns_give_back_the_records_they_were_made_of(
    row_list: list[JobRow], fact_list: list[FileFacts]
) -> None:
    assert list(ROWS.join(ROWS.split(row_list))) == row_list
    assert list(FACTS.join(FACTS.split(fact_list))) == fact_list


@given(st.lists(facts, min_size=1, max_size=3), st.data())
def test_a_column_value_of_another_type_is_refused(fact_list: list[FileFacts], data: st.DataObject) -> None:
    columns = FACTS.split(fact_list)
    col = data.draw(st.integers(0, len(columns) - 1))
    wrong = data.draw(st.sampled_from([object, 1j, [1], {"a": 1}, frozenset()]))
    forged = [*columns[:col], (wrong, *columns[col][1:]), *columns[col + 1 :]]
    with pytest.raises(Malformed):
        list(FACTS.join(forged))
    with pytest.raises(Malformed):
        list(FACTS.join(columns[:-1]))
