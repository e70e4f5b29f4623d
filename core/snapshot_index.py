"""The snapshot index on disk (`.gen/cache/snapshot.marshal`): what the last scan read, so
the next process re-reads only what changed.

The file is a header line, then frames. A frame is its length and CRC-32 (4 bytes each,
big-endian), then a marshal'd tuple whose first item names it: one `head`; the rows and
the folders as listed, in slices of at most `SLICE` entries; then an `end` that counts
the frames before it. Slices keep saving and loading small in memory: serialising 100,000
rows in one piece makes a copy of all of them whose pages a long-running board keeps
long after the copy is freed.

A file that is missing, cut short, damaged, of another version or of another `.gen/` is
no index at all: it only saves work, and nothing that verifies or applies a job reads it.
"""

from __future__ import annotations

import contextlib
import gc
import marshal
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any, NamedTuple

from core.durable import atomic_write

HEADER = b"genjob snapshot index 4\n"
SLICE = 1024
_FRAME = struct.Struct(">II")
_NONE = type(None)

# Column types of a finished row (its key, its state's name, then the rest of `JobRow`)...
ROW_TYPES: tuple[set[type], ...] = (
    {str},
    {str},
    {str},
    {str},
    {str},
    {tuple},
    {float},
    {int},
    {str},
    {str, _NONE},
    {tuple},
    {tuple},
)
# ... and of what a key's files say (its key, then `snapshot.FileFacts`).
FACT_TYPES: tuple[set[type], ...] = (
    {str},  # key
    {tuple},  # folders
    {bool},  # has a summary
    # the summary: schema, digest, instruction, allowed paths, inputs, created_at, note
    {str},
    {str},
    {str},
    {tuple},
    {tuple},
    {float},
    {str},
    {str, _NONE},  # invalid
    {str, _NONE},  # receipt
    {tuple},  # receipt problems
    {str},  # worker
    {int},  # attempts
)


class Index(NamedTuple):
    """What a scanner keeps between processes (see `core.snapshot.Scanner`)."""

    config: tuple[Any, ...] | None
    tree: dict[str, tuple[Any, ...]]
    # folder -> (its identity if it had settled, key -> file identity, keys with a lease)
    listed: dict[str, tuple[Any, dict[str, Any], dict[str, Any] | None]]
    fixed: dict[str, Any]  # key -> finished row, as `make_row` made it
    volatile: dict[str, tuple[Any, ...]]  # key -> file facts
    leases: dict[str, tuple[bytes, object]]


# -- writing -----------------------------------------------------------------------------------
def write_index(
    path: Path,
    gen: str,
    device: int,
    index: Index,
    fixed_rows: Iterable[tuple[Any, ...]],
) -> None:
    """Replace the index at `path`; `fixed_rows` are `index.fixed`'s rows as plain values
    (the state by name), read one slice at a time."""
    atomic_write(path, _chunks(gen, device, index, fixed_rows), durable=False)


def _chunks(gen: str, device: int, index: Index, fixed_rows: Iterable[tuple[Any, ...]]) -> Iterator[bytes]:
    yield HEADER
    frames = 0

    def frame(value: tuple[Any, ...]) -> Iterator[bytes]:
        nonlocal frames
        frames += 1
        data = marshal.dumps(value)
        yield _FRAME.pack(len(data), zlib.crc32(data))
        yield data

    settled = {f: (here, leases) for f, (here, _, leases) in index.listed.items()}
    yield from frame(("head", gen, device, index.config, index.tree, index.leases, settled))
    rows = iter(fixed_rows)
    while part := tuple(islice(rows, SLICE)):
        yield from frame(("fixed", *zip(*part, strict=True)))
    facts = iter(index.volatile.items())
    while part := tuple(islice(facts, SLICE)):
        yield from frame(("volatile", *zip(*((k, *f) for k, f in part), strict=True)))
    for folder, (_, keys, _) in index.listed.items():
        items = iter(keys.items())
        while part := tuple(islice(items, SLICE)):
            yield from frame(("listed", folder, *zip(*part, strict=True)))
    yield from frame(("end", frames + 1))


# -- reading -----------------------------------------------------------------------------------
def read_index(
    path: Path,
    gen: str,
    device: int,
    folders: tuple[str, ...],
    make_row: Callable[[tuple[Any, ...]], Any],
    state_of: Callable[[str], Any],
) -> Index | None:
    """The index at `path` if it is a whole one of this `.gen/` (listing `folders`), else None.

    `make_row` turns a finished row's values, its state by `state_of` its name (which
    raises KeyError for an unknown one), into the row the scanner keeps.
    """
    try:
        with open(path, "rb") as fh, _collector_paused():
            if fh.read(len(HEADER)) != HEADER:
                return None
            return _read_frames(fh, gen, device, folders, make_row, state_of)
    except (OSError, EOFError, ValueError, TypeError, KeyError, IndexError):
        return None


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Keep the cyclic garbage collector out while the index loads: it would walk the
    growing heap of rows again and again (a third of the load time at 100,000 jobs),
    and what the index holds has no cycles to find."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _read_frame(fh: Any) -> tuple[Any, ...]:
    head = fh.read(_FRAME.size)
    if len(head) != _FRAME.size:
        raise EOFError("index cut short")
    size, crc = _FRAME.unpack(head)
    data = fh.read(size)
    if len(data) != size or zlib.crc32(data) != crc:
        raise ValueError("index damaged")
    frame = marshal.loads(data)
    if type(frame) is not tuple or not frame:
        raise ValueError("malformed index")
    return frame


def _read_frames(
    fh: Any,
    gen: str,
    device: int,
    folders: tuple[str, ...],
    make_row: Callable[[tuple[Any, ...]], Any],
    state_of: Callable[[str], Any],
) -> Index:
    head = _read_frame(fh)
    if len(head) != 7 or head[0] != "head":
        raise ValueError("not a snapshot index")
    _, their_gen, their_device, config, tree, leases, settled = head
    if their_gen != gen or their_device != device:
        raise ValueError("an index of another .gen/")
    if not (
        (config is None or _valid_config(config))
        and type(tree) is dict
        and all(map(_valid_tree, tree.items()))
        and type(leases) is dict
        and all(map(_valid_lease, leases.items()))
        and _valid_settled(settled, folders)
    ):
        raise ValueError("malformed index")
    listed = {f: (here, {}, running) for f, (here, running) in settled.items()}
    fixed: dict[str, Any] = {}
    volatile: dict[str, tuple[Any, ...]] = {}
    # One string per key, however many frames name it.
    canon: dict[str, str] = {}
    same = canon.setdefault
    frames = 1
    while (frame := _read_frame(fh))[0] != "end":
        frames += 1
        tag = frame[0]
        if tag == "listed" and len(frame) == 4 and frame[1] in listed:
            keys, ids = frame[2:]
            if type(keys) is not tuple or type(ids) is not tuple or len(keys) != len(ids):
                raise ValueError("malformed index")
            if not set(map(type, keys)) <= {str}:
                raise ValueError("malformed index")
            listed[frame[1]][1].update(zip(map(same, keys, keys), ids, strict=True))
        elif tag == "fixed":
            keys, *rest = _columns_of(frame[1:], ROW_TYPES)
            for col in (rest[4], rest[9], rest[10]):  # allowed paths, folders, problems
                _check_shared(col, _str_tuple)
            keys = tuple(map(same, keys, keys))
            states = map(state_of, rest[0])
            fixed.update(zip(keys, map(make_row, zip(keys, states, *rest[1:], strict=True)), strict=True))
        elif tag == "volatile":
            keys, *columns = _columns_of(frame[1:], FACT_TYPES)
            for col in (columns[0], columns[5], columns[11]):  # folders, allowed paths, receipt problems
                _check_shared(col, _str_tuple)
            _check_shared(columns[6], _inputs_ok)
            volatile.update(zip(map(same, keys, keys), zip(*columns, strict=True), strict=True))
        else:
            raise ValueError("malformed index")
    if frame != ("end", frames + 1) or fh.read(1):
        raise ValueError("malformed index")
    return Index(config, tree, listed, fixed, volatile, leases)


def _columns_of(value: tuple[Any, ...], types: tuple[set[type], ...]) -> tuple[tuple[Any, ...], ...]:
    """`value` as equal columns of the given types, or ValueError."""
    if len(value) != len(types):
        raise ValueError("malformed index")
    size = len(value[0]) if type(value[0]) is tuple else -1
    for col, allowed in zip(value, types, strict=True):
        if type(col) is not tuple or len(col) != size or not set(map(type, col)) <= allowed:
            raise ValueError("malformed index")
    return value


def _check_shared(column: tuple[Any, ...], ok: Callable[[Any], bool]) -> None:
    """Check each distinct object of a column once (a frame shares repeated tuples)."""
    if not all(map(ok, dict(zip(map(id, column), column, strict=True)).values())):
        raise ValueError("malformed index")


def _str_tuple(value: object) -> bool:
    return type(value) is tuple and all(type(v) is str for v in value)


def _inputs_ok(value: object) -> bool:
    return type(value) is tuple and all(
        type(p) is tuple and len(p) == 2 and type(p[0]) is str and type(p[1]) in (str, _NONE) for p in value
    )


def _valid_settled(settled: object, folders: tuple[str, ...]) -> bool:
    if not (type(settled) is dict and settled.keys() == set(folders)):
        return False
    for folder, entry in settled.items():
        if not (type(entry) is tuple and len(entry) == 2):
            return False
        here, leases = entry
        if not (here is None or type(here) is tuple) or (leases is None) != (folder != "running"):
            return False
        if leases is not None and not (type(leases) is dict and set(map(type, leases)) <= {str}):
            return False
    return True


def _valid_lease(item: tuple[object, object]) -> bool:
    key, entry = item
    if not (type(key) is str and type(entry) is tuple and len(entry) == 2 and type(entry[0]) is bytes):
        return False
    parsed = entry[1]
    if type(parsed) is str:
        return True
    return type(parsed) is tuple and tuple(map(type, parsed)) == (str, str, int, float, float)


def _valid_tree(item: tuple[object, object]) -> bool:
    rel, entry = item
    return type(rel) is str and type(entry) is tuple and len(entry) == 5 and type(entry[4]) in (str, _NONE)


def _valid_config(config: object) -> bool:
    if not (type(config) is tuple and len(config) == 5 and type(config[4]) is tuple and len(config[4]) == 2):
        return False
    required, fault = config[4]
    return type(required) is bool and type(fault) in (str, _NONE)
