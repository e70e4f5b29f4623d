"""The snapshot index on disk (`.gen/cache/snapshot.marshal`): what the last scan read, so
the next process re-reads only what changed.

The index stores the records of `core.read.snapshot_records` by column, and the records
declare its format: a table's columns are the fields of its record in order (a nested
record's fields in its place, an enum by its value), and each column is checked against
its field's annotation as it loads.

The file is a header line, then frames. A frame is its length and CRC-32 (4 bytes each,
big-endian), then a marshal'd tuple whose first item names it:

    head      the `.gen/` and device it belongs to, config.toml's stamp, and each
              folder's settled identity (running/'s with the keys that have a lease)
    tree      path column, then the `TreeStamp` columns
    leases    key column, then the `LeaseRead` columns
    fixed     the `JobRow` columns
    volatile  key column, then the `FileFacts` columns
    listed    a folder's name, its key column and its file identity column
    growing   a folder's name and its whole listing as `PackedIds` blocks (attempts/,
              candidates/: their identities are triples)
    end       the number of frames before it

Tables come in slices of at most `SLICE` records: serialising 100,000 rows in one piece
makes a copy of all of them whose pages a long-running board keeps long after the copy
is freed. (A growing folder's blocks are two large objects, which the allocator hands
back to the system as soon as they are freed: they go in one frame.)

A file that is missing, cut short, damaged, of another version or of another `.gen/` is
no index at all: it only saves work, and nothing that verifies or applies a job reads it.

Why not sqlite3: the same 100,000 rows and their listing, in tables of one column per
field, took 0.45 s to write and 0.51 s to read back into these records against 0.12 s
and 0.21 s here, in a file a quarter larger; and a table needs every tuple field encoded.
"""

from __future__ import annotations

import marshal
import os
import struct
import types
import typing
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from enum import Enum
from itertools import chain, islice
from pathlib import Path
from typing import Any

from core.read.snapshot_folders import GROWING
from core.read.snapshot_records import (
    ConfigStamp,
    FileFacts,
    FileId,
    Index,
    JobRow,
    LeaseRead,
    Listing,
    PackedIds,
    TreeStamp,
)
from core.read.speedups import collector_paused
from core.store.durable import atomic_write
from core.store.ownership import operator_owners, untrusted_because

HEADER = b"genjob snapshot index 9\n"
SLICE = 1024
# An index this large (some 3,000 jobs) is left out of the collector's walks once loaded
# (`core.read.speedups.collector_paused`): what it holds lives as long as its scanner.
KEEP_BYTES = 1 << 20
_FRAME = struct.Struct(">II")
_NONE = type(None)


class Malformed(ValueError):
    """The index is not one this process wrote for this `.gen/`."""


# -- columns -----------------------------------------------------------------------------------
def _is_record(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields")


def _is_enum(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, Enum)


def _plain_types(hint: Any) -> set[type] | None:
    """The types a value of `hint` may have, when they say all there is to check."""
    if hint is None or hint is _NONE:
        return {_NONE}
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        parts = [_plain_types(a) for a in typing.get_args(hint)]
        return set().union(*parts) if all(p is not None for p in parts) else None  # type: ignore[arg-type]
    if hint in (str, int, float, bool, bytes):
        return {hint}
    return None


def _value_check(hint: Any) -> Callable[[object], bool]:
    """A check that one value fits `hint` (plain types, unions, and tuples of them)."""
    plain = _plain_types(hint)
    if plain is not None:
        return lambda v: type(v) in plain
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        checks = [_value_check(a) for a in args]
        return lambda v: any(c(v) for c in checks)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = _value_check(args[0])
        return lambda v: type(v) is tuple and all(map(item, v))
    if origin is tuple:
        items = [_value_check(a) for a in args]

        def fits(v: object) -> bool:
            return (
                type(v) is tuple and len(v) == len(items) and all(c(x) for c, x in zip(items, v, strict=True))
            )

        return fits
    raise TypeError(f"no index column can hold {hint!r}")


def _column_check(hint: Any) -> Callable[[tuple[Any, ...]], bool]:
    """A check that every value of a column fits `hint`. Tuples are checked once per
    distinct object: the scanner shares equal ones, and marshal keeps them shared."""
    plain = _plain_types(hint)
    if plain is not None:
        return lambda column: set(map(type, column)) <= plain
    check = _value_check(hint)
    return lambda column: all(map(check, dict(zip(map(id, column), column, strict=True)).values()))


class Columns:
    """How the records of one NamedTuple class are stored as columns, and checked."""

    def __init__(self, cls: type[Any]) -> None:
        self.make = cls._make
        hints = typing.get_type_hints(cls)
        self.fields = [hints[name] for name in cls._fields]
        self.nested = {i: Columns(h) for i, h in enumerate(self.fields) if _is_record(h)}
        self.enums = {i: {m.value: m for m in h} for i, h in enumerate(self.fields) if _is_enum(h)}
        self.checks = {
            i: _column_check(h)
            for i, h in enumerate(self.fields)
            if i not in self.nested and i not in self.enums
        }
        # The annotation of each flat column.
        self.flat: list[Any] = []
        for i, h in enumerate(self.fields):
            self.flat += self.nested[i].flat if i in self.nested else [h]
        self.width = len(self.flat)

    def split(self, records: Sequence[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """`records` as flat columns of plain values."""
        if not records:
            return [()] * self.width
        out: list[tuple[Any, ...]] = []
        for i, column in enumerate(zip(*records, strict=True)):
            if i in self.nested:
                out += self.nested[i].split(column)
            elif i in self.enums:
                out.append(tuple(m.value for m in column))
            else:
                out.append(column)
        return out

    def join(self, columns: Sequence[Any]) -> Iterator[Any]:
        """The records stored as `columns`; `Malformed` if any value does not fit."""
        if len(columns) != self.width or any(type(c) is not tuple for c in columns):
            raise Malformed("not the columns of a table")
        size = len(columns[0]) if columns else 0
        if any(len(c) != size for c in columns):
            raise Malformed("columns of different lengths")
        at = 0
        fields: list[Iterable[Any]] = []
        for i in range(len(self.fields)):
            if i in self.nested:
                sub = self.nested[i]
                fields.append(tuple(sub.join(columns[at : at + sub.width])))
                at += sub.width
                continue
            column = columns[at]
            at += 1
            if i in self.enums:
                if not set(column) <= self.enums[i].keys():
                    raise Malformed("an unknown name in an enum column")
                fields.append(map(self.enums[i].__getitem__, column))
            elif not self.checks[i](column):
                raise Malformed("a value of the wrong type")
            else:
                fields.append(column)
        return map(self.make, zip(*fields, strict=True))


ROWS = Columns(JobRow)
FACTS = Columns(FileFacts)
TREE = Columns(TreeStamp)
LEASES = Columns(LeaseRead)
CONFIG = Columns(ConfigStamp)
_KEYS = _column_check(str)
_INODES = _column_check(int)


def _keys(column: object) -> tuple[str, ...]:
    if type(column) is not tuple or not _KEYS(column):
        raise Malformed("a key column holds something else than names")
    return column


# -- writing -----------------------------------------------------------------------------------
def write_index(path: Path, gen: str, device: int, index: Index) -> None:
    """Replace the index at `path`, made one slice at a time."""
    atomic_write(path, _chunks(gen, device, index), durable=False)


def _slices(items: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    it = iter(items)
    while part := tuple(islice(it, SLICE)):
        yield part


def _chunks(gen: str, device: int, index: Index) -> Iterator[bytes]:
    yield HEADER
    frames = 0

    def frame(*value: Any) -> Iterator[bytes]:
        nonlocal frames
        frames += 1
        data = marshal.dumps(value)
        yield _FRAME.pack(len(data), zlib.crc32(data))
        yield data

    config = tuple(CONFIG.split([index.config])) if index.config is not None else None
    folders = {f: (listing.settled, _lease_keys(listing)) for f, listing in index.listed.items()}
    yield from frame("head", gen, device, config, folders)
    for part in _slices(index.tree.items()):
        yield from frame("tree", tuple(k for k, _ in part), *TREE.split([v for _, v in part]))
    for part in _slices(index.leases.items()):
        yield from frame("leases", tuple(k for k, _ in part), *LEASES.split([v for _, v in part]))
    for rows in _slices(index.fixed.values()):
        yield from frame("fixed", *ROWS.split(rows))
    for part in _slices(index.volatile.items()):
        yield from frame("volatile", tuple(k for k, _ in part), *FACTS.split([v for _, v in part]))
    for folder, listing in index.listed.items():
        packed = _packed(folder, listing.files)
        if packed is not None:
            yield from frame("growing", folder, packed.names, packed.numbers)
            continue
        for part in _slices(listing.files.items()):
            yield from frame("listed", folder, *zip(*part, strict=True))
    yield from frame("end", frames + 1)


def _packed(folder: str, files: Mapping[str, FileId]) -> PackedIds | None:
    """The files of a growing folder packed, when they are (or can be)."""
    if folder not in GROWING:
        return None
    try:
        return PackedIds.of(files)
    except ValueError:  # an identity out of 64 bits: stored as tuples
        return None


def _lease_keys(listing: Listing) -> tuple[str, ...] | None:
    return None if listing.leases is None else tuple(listing.leases)


# -- reading -----------------------------------------------------------------------------------
def read_index(path: Path, gen: str, device: int, folders: tuple[str, ...]) -> Index | None:
    """The index at `path` if it is a whole one of this `.gen/` (listing `folders`), else None.

    Only an index this user alone could have written is read: anything else (a file of
    another user's, one in a folder others can write) is no index, read as none."""
    if untrusted_because(path, Path(gen), operator_owners()) is not None:
        return None
    try:
        with (
            open(path, "rb", opener=_no_follow) as fh,
            collector_paused(os.fstat(fh.fileno()).st_size >= KEEP_BYTES),
        ):
            if fh.read(len(HEADER)) != HEADER:
                return None
            return _read_frames(fh, gen, device, folders)
    except (OSError, EOFError, ValueError, TypeError, KeyError, IndexError):
        return None


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)


def _read_frame(fh: Any) -> tuple[Any, ...]:
    head = fh.read(_FRAME.size)
    if len(head) != _FRAME.size:
        raise EOFError("index cut short")
    size, crc = _FRAME.unpack(head)
    data = fh.read(size)
    if len(data) != size or zlib.crc32(data) != crc:
        raise Malformed("index damaged")
    frame = marshal.loads(data)
    if type(frame) is not tuple or not frame:
        raise Malformed("not a frame")
    return frame


def _read_frames(fh: Any, gen: str, device: int, folders: tuple[str, ...]) -> Index:
    head = _read_frame(fh)
    if len(head) != 5 or head[0] != "head":
        raise Malformed("not a snapshot index")
    _, their_gen, their_device, config, settled = head
    if their_gen != gen or their_device != device:
        raise Malformed("an index of another .gen/")
    index = Index(
        config=None if config is None else next(CONFIG.join(config)),
        tree={},
        listed=_listings(settled, folders),
        fixed={},
        volatile={},
        leases={},
    )
    # One string per key, however many frames name it.
    canon: dict[str, str] = {}
    same = canon.setdefault
    frames = 1
    while (frame := _read_frame(fh))[0] != "end":
        frames += 1
        tag, rest = frame[0], frame[1:]
        if tag == "fixed" and rest:
            keys = tuple(map(same, _keys(rest[0]), rest[0]))  # the rows' keys are their first column
            index.fixed.update(zip(keys, ROWS.join((keys, *rest[1:])), strict=True))
        elif tag == "volatile" and rest:
            keys = _keys(rest[0])
            index.volatile.update(zip(map(same, keys, keys), FACTS.join(rest[1:]), strict=True))
        elif tag == "leases" and rest:
            index.leases.update(zip(_keys(rest[0]), LEASES.join(rest[1:]), strict=True))
        elif tag == "tree" and rest:
            index.tree.update(zip(_keys(rest[0]), TREE.join(rest[1:]), strict=True))
        elif tag == "listed" and len(rest) == 3 and rest[0] in index.listed:
            folder, keys, ids = rest[0], _keys(rest[1]), rest[2]
            files = index.listed[folder].files
            if not _file_ids_ok(ids, folder in GROWING) or len(ids) != len(keys) or type(files) is not dict:
                raise Malformed("file identities of the wrong type")
            files.update(zip(map(same, keys, keys), ids, strict=True))
        elif tag == "growing" and len(rest) == 3 and rest[0] in GROWING and rest[0] in index.listed:
            listing = index.listed[rest[0]]
            if type(listing.files) is not dict or listing.files:
                raise Malformed("a growing folder listed twice")
            index.listed[rest[0]] = listing._replace(files=PackedIds(rest[1], rest[2]))
        else:
            raise Malformed(f"an unknown frame {str(tag)[:20]!r}")
    if frame != ("end", frames + 1) or fh.read(1):
        raise Malformed("frames missing or trailing")
    return index


def _listings(settled: object, folders: tuple[str, ...]) -> dict[str, Listing]:
    """The listings as the head frame describes them, their files yet to come."""
    if not (type(settled) is dict and settled.keys() == set(folders)):
        raise Malformed("not the folders a listing has")
    listed = {}
    for folder, entry in settled.items():
        if not (type(entry) is tuple and len(entry) == 2):
            raise Malformed("a folder's entry is malformed")
        here, leases = entry
        if not (here is None or (type(here) is tuple and len(here) == 3 and _INODES(here))):
            raise Malformed("a folder's identity is malformed")
        if (leases is None) != (folder != "running"):
            raise Malformed("lease keys outside running/")
        listed[folder] = Listing(here, {}, None if leases is None else dict.fromkeys(_keys(leases)))
    return listed


def _file_ids_ok(ids: object, growing: bool) -> bool:
    """Inodes, or for a folder whose files grow (inode, size, mtime) triples of integers."""
    if type(ids) is not tuple:
        return False
    if not growing:
        return _INODES(ids)
    return (
        set(map(type, ids)) <= {tuple}
        and set(map(len, ids)) <= {3}
        and _INODES(tuple(chain.from_iterable(ids)))
    )
