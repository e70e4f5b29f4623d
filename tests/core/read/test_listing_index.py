"""core.read.listing_index: the index keeps every record whole, and is no index at all when it
is cut short, damaged, foreign, not sealed here or not the operator's own."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from core.model.lifecycle import State
from core.model.quick_checks import JobSummary, LeaseFacts
from core.read.listing_index import FORMAT, Index, Policy, read_index, write_index
from core.read.rows import NO_JOB, JobRow, KeyFacts
from core.store.seal import seal

KEY = "a" * 32
DIGEST = "d" * 64


def sample_index(rows: int = 3) -> Index:
    """An index holding every kind of record, with shared and unshared values."""
    paths = ("src/app.py", "src/util.py")
    problem = ('a "quoted" problem',)
    known = {
        f"{i:032x}": KeyFacts(("applied",), 100 + i, 0, 10**18 + i, *NO_JOB, "", None, None, "", problem * i)
        for i in range(rows)
    }
    job = JobSummary(
        "genjob.v2", DIGEST, "run me", paths, (("src/app.py", "e" * 64), ("src/util.py", None)), 2.0
    )
    known[KEY] = KeyFacts(("running",), 5, 1, 7, *job, "", None, "ok", "w2", ())
    known["b" * 32] = KeyFacts(
        ("queue", "running"), 6, 0, 0, *NO_JOB, "why", "bad", "invalid", "", ("p", "q")
    )
    policy = Policy(True, None, ("lint",), "it waits", ("*.lock",))
    leases = {KEY: ((5, 190, 10**18, 10**18 + 1), LeaseFacts("w2", "host-a", 4242, 1.5e9, 120.0))}
    rows = {
        f"{i:032x}": JobRow(
            f"{i:032x}", State.APPLIED, "genjob.v2", DIGEST, f"job {i}", paths, float(i), None, "w1"
        )
        for i in range(rows)
    }
    rows["c" * 32] = JobRow("c" * 32, State.RECEIVED, receipt_status="ok", folders=("running",), modified=9)
    inodes = {key: 200 + i for i, key in enumerate(rows)}
    tree = {"src/app.py": ((7, 10, 10**18, 10**18), "e" * 64), "gone.py": ((0, 0, 0, 0), None)}
    return Index(policy, [1, 2, 3, 4] * 3, known, leases, rows, inodes, {"c" * 32: 300}, tree)


def stored(gen: Path, index: Index) -> Path:
    path = gen / "cache" / "listing.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_index(path, str(gen), index)
    return path


def test_every_record_comes_back_as_it_was_written(tmp_path: Path) -> None:
    index = sample_index()
    got = read_index(stored(tmp_path, index), str(tmp_path))
    assert got == index
    assert got is not None
    facts = got.known[KEY]
    assert type(facts) is KeyFacts and type(facts.inputs) is tuple and type(facts.inputs[0]) is tuple
    assert type(got.leases[KEY][1]) is LeaseFacts
    row = got.rows["c" * 32]
    assert type(row) is JobRow and row.state is State.RECEIVED and type(row.folders) is tuple


def test_one_tuple_for_equal_folders_and_paths(tmp_path: Path) -> None:
    got = read_index(stored(tmp_path, sample_index()), str(tmp_path))
    assert got is not None
    facts = [f for f in got.known.values() if f.folders == ("applied",)]
    assert len(facts) == 3 and all(f.folders is facts[0].folders for f in facts)


def test_the_head_alone_gives_the_policy(tmp_path: Path) -> None:
    index = sample_index()
    got = read_index(stored(tmp_path, index), str(tmp_path), facts=False)
    assert got is not None and got.policy == index.policy and got.known == {} and got.leases == {}
    assert got.rows == {} and got.tree == {}


def test_an_index_without_policy_or_rows_comes_back_too(tmp_path: Path) -> None:
    empty = Index(None, [], {}, {}, {}, {}, {}, {})
    assert read_index(stored(tmp_path, empty), str(tmp_path)) == empty


def test_another_gen_or_a_missing_file_is_no_index(tmp_path: Path) -> None:
    gen = tmp_path / "one" / ".gen"
    path = stored(gen, sample_index())
    other = tmp_path / "two" / ".gen"
    (other / "cache").mkdir(parents=True)
    os.replace(path, other / "cache" / "listing.jsonl")
    assert read_index(other / "cache" / "listing.jsonl", str(other)) is None
    assert read_index(gen / "cache" / "listing.jsonl", str(gen)) is None


def test_an_index_another_user_could_have_written_is_no_index(tmp_path: Path) -> None:
    gen = tmp_path / ".gen"
    path = stored(gen, sample_index())
    assert read_index(path, str(gen)) is not None
    (gen / "cache").chmod(0o775)
    assert read_index(path, str(gen)) is None
    (gen / "cache").chmod(0o755)
    path.chmod(0o646)
    assert read_index(path, str(gen)) is None
    path.chmod(0o644)
    gen.chmod(0o777)
    assert read_index(path, str(gen)) is None
    gen.chmod(0o755)
    if os.geteuid() == 0:
        os.lchown(path, 4242, 4242)
        assert read_index(path, str(gen)) is None


def test_a_fifo_or_a_link_in_the_index_place_is_no_index_and_never_blocks(tmp_path: Path) -> None:
    real = stored(tmp_path, sample_index())
    link = real.with_name("link.jsonl")
    link.symlink_to(real)
    assert read_index(link, str(tmp_path)) is None
    fifo = real.with_name("fifo.jsonl")
    os.mkfifo(fifo)
    assert read_index(fifo, str(tmp_path)) is None


def test_every_cut_and_every_flipped_byte_is_no_index(tmp_path: Path) -> None:
    path = stored(tmp_path, sample_index())
    whole = path.read_bytes()
    bad = path.with_name("bad.jsonl")
    for cut in range(len(whole)):
        bad.write_bytes(whole[:cut])
        assert read_index(bad, str(tmp_path)) is None, cut
    for at in range(0, len(whole), 7):
        bad.write_bytes(whole[:at] + bytes([whole[at] ^ 0x41]) + whole[at + 1 :])
        assert read_index(bad, str(tmp_path)) is None, at


def test_an_index_not_sealed_here_is_no_index(tmp_path: Path) -> None:
    """A file in the index's place with the right form and checksums, as a repository could
    carry it or another machine write it: without this machine's seal it is not read."""
    path = stored(tmp_path, sample_index())
    tag, _, rest = path.read_bytes().partition(b" ")
    head_bytes, _, body = rest.partition(b"\n")
    head = json.loads(head_bytes)
    assert read_index(path, str(tmp_path)) is not None
    for forged_tag in ("0" * len(tag), seal("another purpose", head_bytes), ""):
        path.write_bytes(forged_tag.encode() + b" " + head_bytes + b"\n" + body)
        assert read_index(path, str(tmp_path)) is None, forged_tag
    other = json.dumps({**head, "format": "genjob listing index 0"}).encode()
    path.write_bytes(seal(FORMAT, other).encode() + b" " + other + b"\n" + body)
    assert read_index(path, str(tmp_path)) is None, "another format"


TEXT = st.text(max_size=8)
STRS = st.lists(st.text(st.characters(blacklist_characters="\n"), min_size=1, max_size=8), max_size=3).map(
    tuple
)
INPUTS = st.lists(
    st.tuples(st.text(st.characters(blacklist_characters="\n"), min_size=1), st.none()), max_size=3
).map(tuple)
facts = st.builds(
    KeyFacts,
    STRS,
    st.integers(0, 2**62),
    st.integers(0, 2**62),
    st.integers(0, 2**62),
    TEXT,
    TEXT,
    TEXT,
    STRS,
    INPUTS,
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
    st.none() | TEXT,
    st.none() | TEXT,
    TEXT,
    st.lists(TEXT, max_size=3).map(tuple),
)


rows = st.builds(
    JobRow,
    st.text(min_size=1, max_size=8),
    st.sampled_from(State),
    TEXT,
    TEXT,
    TEXT,
    STRS,
    st.floats(allow_nan=False, allow_infinity=False),
    st.none(),
    TEXT,
    st.none() | TEXT,
    STRS,
    STRS,
    st.integers(0, 9),
    st.integers(0, 2**62),
)


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=8), facts, max_size=5), st.lists(rows, max_size=5))
def test_entries_give_back_the_records_they_were_made_of(
    known: dict[str, KeyFacts], kept: list[JobRow]
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        gen = Path(folder)
        by_key = {row.key: row for row in kept}
        inodes = {key: i + 1 for i, key in enumerate(by_key)}
        receipt_inodes = {key: 7 for key in list(by_key)[::2]}
        index = Index(None, [], known, {}, by_key, inodes, receipt_inodes, {})
        got = read_index(stored(gen, index), str(gen))
        assert got == index
        assert got is not None and all(type(row.state) is State for row in got.rows.values())
