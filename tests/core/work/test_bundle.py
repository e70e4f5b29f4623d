"""Bundles out, results back: the local validator refuses anything but allowed regular files."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from core.remote.rules import MAX_EXTENSION_BYTES, Limits, check_relpath, header_number
from core.work.bundle import BundleError, extract_result, make_bundle, make_header

SMALL = Limits(max_file_bytes=1000, max_total_bytes=2500, max_files=3, max_tail_bytes=100)


def job_doc(paths: list[str], instruction: str = "do it") -> bytes:
    return json.dumps({"instruction": instruction, "allowed_paths": paths}).encode()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def result_json(outputs: dict[str, bytes], **overrides: object) -> bytes:
    body: dict[str, object] = {
        "exit_code": 0,
        "timed_out": False,
        "cancelled": False,
        "violations": [],
        "tail": "done\n",
        "error": None,
        "outputs": {rel: sha(data) for rel, data in outputs.items()},
    }
    body.update(overrides)
    return json.dumps(body).encode()


def member(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = len(data) if kind in (tarfile.REGTYPE, tarfile.AREGTYPE) else 0
    if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
        info.linkname = "/etc/passwd"
    return info


def tar_of(*members: tuple[tarfile.TarInfo, bytes], fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if info.size else None)
    return buf.getvalue()


def result_tar(outputs: dict[str, bytes], **overrides: object) -> bytes:
    raw = result_json(outputs, **overrides)
    items = [(member("result.json", raw), raw)]
    items += [(member("outputs/" + rel, data), data) for rel, data in outputs.items()]
    return tar_of(*items)


# --- check_relpath ---------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["a.py", "src/pkg/mod.py", ".github/workflows/ci.yml", "a b/c d.txt", "ünï/çødé.md"]
)
def test_check_relpath_accepts(path: str) -> None:
    assert check_relpath(path) == path


@pytest.mark.parametrize(
    ("path", "fault"),
    [
        ("", "empty"),
        ("/etc/passwd", "absolute"),
        ("../x", "'..'"),
        ("a/../../x", "'..'"),
        ("a/./b", "'.'"),
        ("a//b", "empty component"),
        ("a/", "empty component"),
        ("a\\b", "backslash"),
        ("a\nb", "control character"),
        ("a\x00b", "control character"),
        (".git/hooks/pre-commit", "under .git/"),
        (".gen/queue/x.json", "under .gen/"),
        ("x" * 256, "255 bytes"),
        ("\udcff", "UTF-8"),
    ],
)
def test_check_relpath_refuses(path: str, fault: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fault)):
        check_relpath(path)


@given(st.text(max_size=80))
def test_check_relpath_result_stays_inside(path: str) -> None:
    try:
        rel = check_relpath(path)
    except ValueError:
        return
    root = Path("/repo")
    assert rel == path
    assert os.path.normpath(rel) == rel
    assert not os.path.isabs(rel)
    assert Path(os.path.normpath(root / rel)).is_relative_to(root)
    assert ".." not in rel.split("/")


# --- make_bundle -----------------------------------------------------------------


def test_make_bundle_is_deterministic_and_normalised(tmp_path: Path) -> None:
    (tmp_path / "b.py").write_bytes(b"b = 2\n")
    paths = ["b.py", "a.py", "new/c.py"]
    files: dict[str, bytes | Path] = {"a.py": b"a = 1\n", "b.py": tmp_path / "b.py"}
    first = make_bundle(job_doc(paths), "do it", paths, files)
    second = make_bundle(job_doc(paths), "do it", paths, dict(reversed(files.items())))
    assert first == second
    with tarfile.open(fileobj=io.BytesIO(first)) as tf:
        infos = tf.getmembers()
        assert [i.name for i in infos] == ["job.json", "instruction.txt", "files/a.py", "files/b.py"]
        for info in infos:
            assert (info.mtime, info.uid, info.gid, info.mode) == (0, 0, 0, 0o644)
            assert info.isreg()
        assert tf.extractfile("files/b.py").read() == b"b = 2\n"  # type: ignore[union-attr]
        assert tf.extractfile("job.json").read() == job_doc(paths)  # type: ignore[union-attr]


def test_make_header_matches_bundle() -> None:
    bundle = make_bundle(job_doc(["a"]), "do it", ["a"], {})
    header = make_header("gen {paths}", 5, SMALL, bundle)
    assert header == {
        "v": 2,
        "generator": "gen {paths}",
        "timeout": 5.0,
        "limits": SMALL.as_dict(),
        "pass_env": [],
        "bundle_bytes": len(bundle),
    }


def test_make_bundle_never_ships_outside_the_job() -> None:
    with pytest.raises(BundleError, match=r"files/secret\.env: not an allowed path"):
        make_bundle(job_doc(["a.py"]), "do it", ["a.py"], {"secret.env": b"KEY=1"})


def test_make_bundle_refuses_disagreeing_job() -> None:
    with pytest.raises(BundleError, match="allowed_paths differs"):
        make_bundle(job_doc(["a.py"]), "do it", ["a.py", "b.py"], {})
    with pytest.raises(BundleError, match="instruction"):
        make_bundle(job_doc(["a.py"], "one thing"), "another", ["a.py"], {})
    with pytest.raises(BundleError, match="absolute"):
        make_bundle(job_doc(["/etc/x"]), "do it", ["/etc/x"], {})
    with pytest.raises(BundleError, match="duplicate key"):
        make_bundle(b'{"allowed_paths": [], "allowed_paths": []}', "do it", [], {})


def test_make_bundle_refuses_symlink_and_oversize(tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to("/etc/passwd")
    with pytest.raises(BundleError, match=r"files/a\.py: cannot read"):
        make_bundle(job_doc(["a.py"]), "do it", ["a.py"], {"a.py": tmp_path / "link"})
    with pytest.raises(BundleError, match="over max_file_bytes"):
        make_bundle(job_doc(["a.py"]), "do it", ["a.py"], {"a.py": b"x" * 1001}, limits=SMALL)


# --- extract_result: the happy path ----------------------------------------------


def test_extract_result_writes_and_hashes(tmp_path: Path) -> None:
    outputs = {"a.py": b"a = 1\n", "pkg/deep/b.py": b"b = 2\n"}
    dest = tmp_path / "out"
    info = extract_result(io.BytesIO(result_tar(outputs)), ["a.py", "pkg/deep/b.py"], SMALL, dest)
    assert info.ok
    assert info.outputs == {rel: sha(data) for rel, data in outputs.items()}
    assert (dest / "pkg/deep/b.py").read_bytes() == b"b = 2\n"
    assert info.tail == "done\n"


class Trickle:
    """A result arriving a few bytes at a time, stalled after `hold` bytes until released."""

    def __init__(self, data: bytes, hold: int) -> None:
        self.data, self.hold, self.pos = data, hold, 0
        self.release = threading.Event()

    def read(self, n: int = -1) -> bytes:
        if self.pos >= self.hold:
            self.release.wait(30)
        end = min(self.pos + 7, len(self.data), self.hold if not self.release.is_set() else len(self.data))
        out, self.pos = self.data[self.pos : end], end
        return out


def test_extract_result_writes_each_output_as_it_arrives(tmp_path: Path) -> None:
    outputs = {"a.py": b"a" * 1000, "b.py": b"b" * 1000}
    raw = result_json(outputs)
    tar = tar_of(
        (member("outputs/a.py", outputs["a.py"]), outputs["a.py"]),
        (member("outputs/b.py", outputs["b.py"]), outputs["b.py"]),
        (member("result.json", raw), raw),
    )
    source = Trickle(tar, tar.index(b"b" * 1000))
    dest = tmp_path / "out"
    with ThreadPoolExecutor(1) as pool:
        done = pool.submit(extract_result, source, ["a.py", "b.py"], SMALL, dest)
        deadline = time.monotonic() + 30
        while not ((dest / "a.py").exists() and (dest / "a.py").stat().st_size == 1000):
            assert time.monotonic() < deadline and not done.done(), "a.py not written before the rest came"
            time.sleep(0.01)
        source.release.set()
        info = done.result()
    assert info.ok and info.outputs == {rel: sha(data) for rel, data in outputs.items()}


def test_extract_result_reports_hash_mismatch_and_unclaimed(tmp_path: Path) -> None:
    raw = result_json({"a.py": b"what the runner claims"})
    tar = tar_of(
        (member("result.json", raw), raw),
        (member("outputs/a.py", b"what arrived"), b"what arrived"),
        (member("outputs/b.py", b"unclaimed"), b"unclaimed"),
    )
    info = extract_result(io.BytesIO(tar), ["a.py", "b.py"], SMALL, tmp_path / "out")
    assert not info.ok
    assert info.outputs["a.py"] == sha(b"what arrived")
    assert any(v.startswith("a.py: runner claimed") for v in info.violations)
    assert any(v.startswith("b.py: runner claimed sha256 None") for v in info.violations)


def test_extract_result_passes_runner_findings_on(tmp_path: Path) -> None:
    tar = result_tar({}, exit_code=None, timed_out=True, violations=["x: symlink"])
    info = extract_result(io.BytesIO(tar), ["x"], SMALL, tmp_path / "out")
    assert (info.exit_code, info.timed_out, info.violations) == (None, True, ("x: symlink",))
    assert not info.ok


# --- extract_result: refusals ----------------------------------------------------

RAW = result_json({})


@pytest.mark.parametrize(
    ("tar", "fault"),
    [
        (tar_of((member("outputs/a.py", kind=tarfile.SYMTYPE), b"")), "symlink"),
        (tar_of((member("outputs/a.py", kind=tarfile.LNKTYPE), b"")), "hard link"),
        (tar_of((member("outputs/a.py", kind=tarfile.DIRTYPE), b"")), "directory"),
        (tar_of((member("outputs/a.py", kind=tarfile.FIFOTYPE), b"")), "fifo"),
        (tar_of((member("outputs/a.py", kind=tarfile.CHRTYPE), b"")), "character device"),
        (tar_of((member("outputs/a.py", kind=tarfile.BLKTYPE), b"")), "block device"),
        (tar_of((member("outputs/a.py", kind=tarfile.CONTTYPE), b"")), "contiguous"),
        (tar_of((member("/outputs/a.py", b"x"), b"x")), "'/outputs/a.py'"),
        (tar_of((member("outputs//etc/passwd", b"x"), b"x")), "absolute|empty component"),
        (tar_of((member("outputs/../a.py", b"x"), b"x")), "'..'"),
        (tar_of((member("outputs/a/../../a.py", b"x"), b"x")), "'..'"),
        (tar_of((member("outputs/b.py", b"x"), b"x")), "not an allowed path"),
        (tar_of((member("elsewhere/a.py", b"x"), b"x")), "'elsewhere/a.py'"),
        (tar_of((member("outputs/" + "d/" * 60 + "a.py", b"x"), b"x")), "not an allowed"),
        (
            tar_of((member("outputs/a.py", b"1"), b"1"), (member("outputs/a.py", b"2"), b"2")),
            "duplicate member",
        ),
        (
            tar_of(*[(member(f"outputs/{i}", b""), b"") for i in range(5)]),
            "more than 4 members",
        ),
        (tar_of((member("outputs/a.py", b"x" * 1001), b"x" * 1001)), "over max_file_bytes"),
        (tar_of((member("outputs/a.py", b"x"), b"x")), "result.json is missing"),
        (b"not a tar at all" * 64, "damaged tar"),
        (gzip.compress(result_tar({})), "damaged tar"),
        (result_tar({})[:700], "damaged tar|truncated"),
        (tar_of((member("result.json", b'{"a":1,"a":2}'), b'{"a":1,"a":2}')), "duplicate key"),
        (tar_of((member("result.json", b"[NaN]"), b"[NaN]")), "NaN"),
        (tar_of((member("result.json", b"[]"), b"[]")), "exactly the keys"),
        (result_tar({}, exit_code="0"), "exit_code has the wrong type"),
        (result_tar({}, violations="none"), "violations has the wrong type"),
    ],
)
def test_extract_result_refuses(tmp_path: Path, tar: bytes, fault: str) -> None:
    dest = tmp_path / "out"
    with pytest.raises(BundleError, match=fault):
        extract_result(io.BytesIO(tar), ["a.py", "0", "1", "2", "3", "4"], SMALL, dest)
    assert not dest.exists()


def test_extract_result_refuses_total_over_limit(tmp_path: Path) -> None:
    outputs = {"a": b"x" * 1000, "b": b"x" * 1000, "c": b"x" * 1000}
    with pytest.raises(BundleError, match=r"outputs/c.: outputs over max_total_bytes"):
        extract_result(io.BytesIO(result_tar(outputs)), ["a", "b", "c"], SMALL, tmp_path / "out")


def test_extract_result_refuses_pax_path_override(tmp_path: Path) -> None:
    """A pax header may rename a member after the fact; the final name is what is checked."""
    info = member("outputs/a.py", b"x")
    info.pax_headers = {"path": "outputs/../../../etc/cron.d/x"}
    tar = tar_of((member("result.json", RAW), RAW), (info, b"x"))
    with pytest.raises(BundleError, match=r"'\.\.'"):
        extract_result(io.BytesIO(tar), ["a.py"], SMALL, tmp_path / "out")


def test_extract_result_refuses_gnu_longname_escape(tmp_path: Path) -> None:
    name = "outputs/" + "a/" * 60 + "../" * 70 + "x"
    tar = tar_of((member(name, b"x"), b"x"), fmt=tarfile.GNU_FORMAT)
    with pytest.raises(BundleError, match=r"'\.\.'"):
        extract_result(io.BytesIO(tar), ["x"], SMALL, tmp_path / "out")


def test_extract_result_needs_a_fresh_folder(tmp_path: Path) -> None:
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "keep").write_text("mine")
    with pytest.raises(BundleError, match="already exists"):
        extract_result(io.BytesIO(result_tar({"a.py": b"x"})), ["a.py"], SMALL, dest)
    assert (dest / "keep").read_text() == "mine"


def test_extract_result_removes_folder_when_writing_fails(tmp_path: Path) -> None:
    """``a`` and ``a/b`` cannot both be files: the second write fails after the first."""
    dest = tmp_path / "out"
    with pytest.raises(BundleError, match="outputs/a/b: cannot be written"):
        extract_result(io.BytesIO(result_tar({"a": b"1", "a/b": b"2"})), ["a", "a/b"], SMALL, dest)
    assert not dest.exists()


KINDS = [*[tarfile.REGTYPE] * 6, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.DIRTYPE, tarfile.FIFOTYPE]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    names=st.lists(
        st.one_of(
            st.text(st.sampled_from("ab./\\-\x00\n é"), max_size=12),
            st.sampled_from(["..", "../a", "/a", "a/../b", ".git/x", "a//b", "./a", "a"]),
        ),
        max_size=3,
    ),
    kinds=st.lists(st.sampled_from(KINDS), min_size=3, max_size=3),
)
def test_extract_result_arbitrary_names(
    tmp_path_factory: pytest.TempPathFactory, names: list[str], kinds: list[bytes]
) -> None:
    """Whatever the names and types, either everything is refused or every file written
    is a regular file at an allowed path inside the destination."""
    allowed = ["a", "b", "a/b", "é", "-"]
    items = [(member("result.json", RAW), RAW)]
    for name, kind in zip(names, kinds, strict=False):
        items.append((member("outputs/" + name, b"data", kind), b"data"))
    try:
        tar = tar_of(*items)
    except (ValueError, UnicodeError):
        return
    dest = tmp_path_factory.mktemp("hyp") / "out"
    try:
        info = extract_result(io.BytesIO(tar), allowed, SMALL, dest)
    except BundleError as exc:
        assert not dest.exists()
        event(f"refused: {str(exc).split(':')[-1][:30]}")
        return
    event("accepted")
    written = [p for p in dest.rglob("*") if not p.is_dir()]
    for path in written:
        assert not path.is_symlink() and path.is_file()
        rel = path.relative_to(dest).as_posix()
        assert rel in allowed and check_relpath(rel) == rel
        assert info.outputs[rel] == sha(path.read_bytes())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_archives_raise_only_bundle_error(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """Flip, cut or splice bytes of a valid result: the only failure is a BundleError."""
    info = member("outputs/a", b"x" * 40)
    info.pax_headers = {"path": "outputs/a", "comment": "é" * 10}
    original = bytearray(tar_of((member("result.json", RAW), RAW), (info, b"x" * 40)))
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(original) - 1))
        original[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(original)))
    damaged = bytes(original[:cut])
    dest = tmp_path_factory.mktemp("dmg") / "out"
    try:
        extract_result(io.BytesIO(damaged), ["a"], SMALL, dest)
    except BundleError:
        assert not dest.exists()


# --- extract_result: headers a host may forge -------------------------------------
# Every raw header is checked before tarfile reads the data it announces: an extension
# header (pax `x`/`X`/`g`, GNU long name `L` and long link `K`) over its cap is refused
# unread, so neither the quadratic pax parse of CVE-2024-6232 nor a header buffered whole
# can hold the worker, whatever the interpreter.

EXTENSIONS = {
    tarfile.XHDTYPE: "pax header",
    tarfile.SOLARIS_XHDTYPE: "pax header",
    tarfile.XGLTYPE: "pax global header",
    tarfile.GNUTYPE_LONGNAME: "GNU long name",
    tarfile.GNUTYPE_LONGLINK: "GNU long link",
}
HEADER_CAP = MAX_EXTENSION_BYTES
# tarfile reads its stream this much at a time: what it may take beyond the header it parses.
READ_AHEAD = 1 << 16


def raw_header(kind: bytes, size: int | bytes, name: str = "././@PaxHeader") -> bytes:
    """One header block as a host may write it: any type flag, and a size field given as
    a number (written in octal) or as the field's own 12 bytes; the checksum is right."""
    info = tarfile.TarInfo(name)
    info.type = kind
    block = bytearray(info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict"))
    block[124:136] = size if isinstance(size, bytes) else b"%011o\0" % size
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 512)


class Taken:
    """A host's stdout that counts how much the reader took of it."""

    def __init__(self, data: bytes) -> None:
        self.data = io.BytesIO(data)
        self.taken = 0

    def read(self, n: int = -1) -> bytes:
        chunk = self.data.read(n)
        self.taken += len(chunk)
        return chunk


def refuse(data: bytes, tmp_path: Path, fault: str, allowed: tuple[str, ...] = ("a.py",)) -> Taken:
    """Feed `data` to extract_result: it must refuse with `fault`, leaving no folder."""
    source, dest = Taken(data), tmp_path / "out"
    with pytest.raises(BundleError, match=fault):
        extract_result(source, list(allowed), SMALL, dest)
    assert not dest.exists()
    return source


@pytest.mark.parametrize("kind", list(EXTENSIONS))
def test_an_extension_header_over_its_cap_is_refused_unread(tmp_path: Path, kind: bytes) -> None:
    """A megabyte of digits: what CPython before 3.11.10 parses in quadratic time."""
    size = 1 << 20
    data = raw_header(kind, size) + b"1" * size + result_tar({})
    what = re.escape(f"member 1 ({EXTENSIONS[kind]} '././@PaxHeader'): {size} bytes")
    source = refuse(data, tmp_path, rf"^result: {what}, over the cap of {HEADER_CAP} bytes$")
    assert source.taken <= READ_AHEAD, "the header's data was read"


def test_an_oversized_header_after_a_valid_member_is_refused(tmp_path: Path) -> None:
    first = member("outputs/a.py", b"new").tobuf() + padded(b"new")
    size = 1 << 22
    data = first + raw_header(tarfile.XHDTYPE, size) + b"1" * size
    source = refuse(data, tmp_path, rf"member 2 \(pax header '././@PaxHeader'\): {size} bytes, over the cap")
    assert source.taken <= len(first) + READ_AHEAD


def test_a_header_claiming_500_mb_then_the_end_is_refused_at_once(tmp_path: Path) -> None:
    refuse(
        raw_header(tarfile.XHDTYPE, 500 << 20), tmp_path, f"{500 << 20} bytes, over the cap of {HEADER_CAP}"
    )


@pytest.mark.parametrize(
    ("field", "fault"),
    [
        (b"\x80" + (500 << 20).to_bytes(11, "big"), f"{500 << 20} bytes, over the cap"),
        (b"\x80" + (1 << 80).to_bytes(11, "big"), f"{1 << 80} bytes, over the cap"),
        (b"\xff" * 11 + b"\x00", "negative size -256"),
    ],
)
def test_a_base_256_size_field_is_read_as_tarfile_reads_it(tmp_path: Path, field: bytes, fault: str) -> None:
    refuse(raw_header(tarfile.GNUTYPE_LONGNAME, field) + result_tar({}), tmp_path, fault)


@given(
    st.binary(min_size=12, max_size=12)
    | st.builds(lambda n: b"\x80" + n.to_bytes(11, "big"), st.integers(0, 2**88 - 1))
)
def test_header_number_reads_a_size_field_as_tarfile_does(field: bytes) -> None:
    try:
        expected: int | None = tarfile.nti(field)
    except tarfile.InvalidHeaderError:
        expected = None
    try:
        got: int | None = header_number(field)
    except ValueError:
        got = None
    assert got == expected


def test_a_chain_of_extension_headers_is_refused(tmp_path: Path) -> None:
    """tarfile follows a chain of them by recursion: thousands would raise RecursionError."""
    record = b"12 a=bcdefg\n"
    chain = b"".join(raw_header(tarfile.XHDTYPE, len(record)) + padded(record) for _ in range(3000))
    refuse(
        chain + result_tar({}), tmp_path, r"member 1 \(pax header .*\): a second pax header for one member"
    )


def test_a_sparse_map_running_on_through_the_stream_is_refused_unread(tmp_path: Path) -> None:
    """A GNU sparse 1.0 map is read from the member's data, as long as it claims to run."""
    info = member("outputs/a.py", b"x" * 512)
    info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.realsize": "10"}
    head = tar_of((info, b"x" * 512))[: 3 * 512]  # pax header, its records, the member's header
    source = refuse(
        head + b"100000000\n" + b"1\n" * (4 << 20), tmp_path, "tar data beyond what its headers announce"
    )
    assert source.taken <= len(head) + READ_AHEAD


def test_a_sparse_member_is_refused(tmp_path: Path) -> None:
    mapped = member("outputs/a.py", b"x")
    mapped.pax_headers = {"GNU.sparse.map": "0,1", "GNU.sparse.realsize": "1"}
    refuse(tar_of((mapped, b"x")), tmp_path, r"'outputs/a.py': sparse file, not a regular file")
    old_gnu = raw_header(tarfile.GNUTYPE_SPARSE, 0, "outputs/a.py")
    refuse(old_gnu + result_tar({}), tmp_path, r"'outputs/a.py': sparse file, not a regular file")
