"""The rules genjob holds every input to, in one place: on the client and on the generator host.

Stdlib only, and written for any python3 from 3.8 on: the client ships this module's
source to the generator host together with the runner (`core.work.transport.base.runner_source`),
so the runner checks a bundle by the very rules the client checks a result by.

 - paths: `check_relpath`, `check_allowed_paths`
 - JSON: `loads_strict` (no duplicate keys, NaN, Infinity, huge integers or deep nesting)
 - limits: `Limits`, what a job may ship and bring back
 - tar members: `MemberCheck`, `checked_members`, `read_tar` (regular files only, each name
   once, within the count and sizes, validated before a byte is written; each raw header
   checked before tarfile reads what it announces)
 - output tails: `TailBuffer`, the last bytes of a generator's output; `LineCap`, a live
   view of it whose lines are cut at a length
"""

from __future__ import annotations

import dataclasses
import io
import json
import typing
import unicodedata

if typing.TYPE_CHECKING:
    import tarfile

MAX_PATH_BYTES = 4096
MAX_COMPONENT_BYTES = 255
RESERVED_TOP = frozenset({".gen", ".git"})
MAX_JSON_DEPTH = 32
MAX_INT_DIGITS = 30


def _unsafe_char(c: str) -> str | None:
    """Why ``c`` may not stand in a path, or None: controls (C0, DEL, C1), and the
    invisible format characters (bidi overrides, zero-width) and line separators that
    could make a path show as another one on a terminal."""
    code = ord(c)
    if code < 0x20 or 0x7F <= code < 0xA0:
        return f"control character U+{code:04X}"
    if code < 0x80:
        return None
    if unicodedata.category(c) in ("Cf", "Zl", "Zp", "Cs"):
        return f"invisible or format character U+{code:04X}"
    return None


def check_relpath(path: str) -> str:
    """Return ``path`` unchanged if it is a safe repository-relative POSIX path.

    The one rule for every path a job names, a generator sends back or a receipt lists,
    on the client and on the generator host alike. Refuses, with a ValueError naming the
    fault: non-strings, empty or over-long paths (``MAX_PATH_BYTES`` in UTF-8), text that
    is not valid UTF-8, control and invisible format characters, backslashes, absolute
    paths, empty, ``.`` or ``..`` components, and paths under a top-level ``.gen`` or
    ``.git`` (the repository's own machinery is never a job's output).
    """
    if not isinstance(path, str):
        raise ValueError(f"path must be a string, not {type(path).__name__}")
    if not path:
        raise ValueError("empty path")
    try:
        encoded = path.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("path is not valid UTF-8") from None
    if len(encoded) > MAX_PATH_BYTES:
        raise ValueError(f"path longer than {MAX_PATH_BYTES} bytes")
    for c in path:
        why = _unsafe_char(c)
        if why:
            raise ValueError(f"{why} in path")
    if "\\" in path:
        raise ValueError("backslash in path")
    if path.startswith("/"):
        raise ValueError("absolute path")
    parts = path.split("/")
    for part in parts:
        if part == "":
            raise ValueError("empty component '' is not allowed")
        if part in (".", ".."):
            raise ValueError(f"path component {part!r} is not allowed")
        if len(part.encode("utf-8")) > MAX_COMPONENT_BYTES:
            raise ValueError(f"path component longer than {MAX_COMPONENT_BYTES} bytes")
    if parts[0] in RESERVED_TOP:
        raise ValueError(f"path under {parts[0]}/ is not allowed")
    return path


def check_allowed_paths(paths: object, max_files: int) -> list[str]:
    """Validate a job's ``allowed_paths`` list: safe, unique, within the count limit."""
    if not isinstance(paths, list):
        raise ValueError("allowed_paths must be a list")
    if len(paths) > max_files:
        raise ValueError(f"allowed_paths has {len(paths)} entries, over max_files ({max_files})")
    seen = set()
    for path in paths:
        try:
            check_relpath(path)
        except ValueError as exc:
            raise ValueError(f"allowed path {path!r}: {exc}") from None
        if path in seen:
            raise ValueError(f"{path!r}: listed twice in allowed_paths")
        seen.add(path)
    return list(paths)


def no_duplicate_keys(pairs: list[tuple[str, typing.Any]]) -> dict[str, typing.Any]:
    """`object_pairs_hook` that refuses a key named twice (json keeps the last one)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}")
            seen.add(key)
    return out


def bounded_int(text: str) -> int:
    """`parse_int` that refuses integers of more than `MAX_INT_DIGITS` digits."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"integer with {len(text)} digits")
    return int(text)


def refuse_constant(name: str) -> typing.Any:
    """`parse_constant` that refuses NaN, Infinity and -Infinity."""
    raise ValueError(f"{name} is not JSON")


def json_depth(text: str) -> int:
    """Nesting depth of a JSON text, ignoring brackets inside strings."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def check_depth(text: str) -> None:
    """Refuse a text nested deeper than `MAX_JSON_DEPTH` (only one with many brackets can be)."""
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH and json_depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")


STRICT_DECODER = json.JSONDecoder(
    object_pairs_hook=no_duplicate_keys, parse_constant=refuse_constant, parse_int=bounded_int
)


def loads_strict(data: bytes) -> object:
    """Parse UTF-8 JSON by the strict rule, or raise ValueError naming the fault."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    check_depth(text)
    try:
        return STRICT_DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"malformed JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:  # a hook's refusal: a duplicate key, NaN, a huge integer
        raise ValueError(f"refused JSON ({exc})") from None


@dataclasses.dataclass(frozen=True)
class Limits:
    """Bounds on what a job may ship and bring back, and on the output kept as evidence.

    The one home of their names and defaults: `core.store.config` reads `[limits]` into this."""

    max_file_bytes: int = 64 << 20
    max_total_bytes: int = 512 << 20
    max_files: int = 1000
    max_tail_bytes: int = 64 << 10

    def __post_init__(self) -> None:
        for name, value in self.as_dict().items():
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive integer, not {value!r}")

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, value: object) -> Limits:
        """Limits from a header's mapping: exactly these keys, each a positive integer."""
        names = [f.name for f in dataclasses.fields(cls)]
        if not isinstance(value, dict) or sorted(value) != sorted(names):
            raise ValueError(f"limits must have exactly {', '.join(names)}")
        return cls(**value)


DEFAULT_LIMITS = Limits()


class TailBuffer:
    """The last `limit` bytes of a stream of chunks (a generator's output, kept as evidence)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()

    def add(self, chunk: bytes) -> None:
        self.data += chunk
        if len(self.data) > self.limit:
            del self.data[: len(self.data) - self.limit]

    def __bytes__(self) -> bytes:
        return bytes(self.data)

    def __len__(self) -> int:
        return len(self.data)


class LineCap:
    """A live view of a stream of text (a generator's output) in which no line is longer
    than `limit` characters: what passes the cap is dropped as it arrives, never kept, and
    the line shows where it was cut. Nothing but the current line's length is held."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.column = 0  # characters of the current line shown so far
        self.cutting = False  # the current line passed the cap: the rest is dropped

    def feed(self, text: str) -> str:
        """What of `text` to show now, in order."""
        *ended, rest = text.split("\n")
        if ended and self._fit(ended):
            self.column = 0
            return text[: len(text) - len(rest)] + self._part(rest)
        shown = []
        for piece in ended:
            shown.append(self._part(piece) + "\n")
            self.column, self.cutting = 0, False
        shown.append(self._part(rest))
        return "".join(shown)

    def _fit(self, ended: list[str]) -> bool:
        """Whether these whole lines, the first one continuing the current line, all fit."""
        first_fits = not self.cutting and self.column + len(ended[0]) <= self.limit
        return first_fits and len(max(ended, key=len)) <= self.limit

    def _part(self, piece: str) -> str:
        """The shown part of the next `piece` of the current line (no newline in it)."""
        if self.cutting:
            return ""
        room = self.limit - self.column
        if len(piece) <= room:
            self.column += len(piece)
            return piece
        self.column, self.cutting = self.limit, True
        return piece[:room] + f" … [line cut at {self.limit} characters]"


def cut_lines(text: str, limit: int) -> str:
    """`text` with every line longer than `limit` characters cut there, marked as cut."""
    return LineCap(limit).feed(text)


# A member's type flag, as the tar formats define it (`tarfile` names them REGTYPE,
# AREGTYPE, DIRTYPE, ...). `tarfile` itself is imported where a tar is read: `genjob ls`
# loads this module and reads none.
_REGULAR = (b"0", b"\0")
_TAR_KINDS = {
    b"5": "directory",
    b"2": "symlink",
    b"1": "hard link",
    b"3": "character device",
    b"4": "block device",
    b"6": "fifo",
    b"7": "contiguous file",
    b"S": "sparse file",
}
# The headers whose data blocks describe the next member (or, `g`, every later one): tarfile
# reads each one whole, and before CPython 3.11.10 parses a pax one in quadratic time.
_EXTENSIONS = {
    b"x": "pax header",
    b"X": "pax header",  # Solaris' name for it, read the same way
    b"g": "pax global header",
    b"L": "GNU long name",
    b"K": "GNU long link",
}
# The longest extension genjob writes is one pax record holding a path of MAX_PATH_BYTES
# under outputs/ or files/: this leaves room for its prefix, length and keyword. The worst
# such header costs a vulnerable interpreter about 20 ms, not minutes.
MAX_EXTENSION_BYTES = MAX_PATH_BYTES + 512
BLOCK = 512


def _blocks(size: int) -> int:
    """`size` bytes rounded up to whole tar blocks."""
    return -(-size // BLOCK) * BLOCK


def header_number(field: bytes) -> int:
    """A tar header's number field, read as tarfile reads it: base-256 when its first byte
    is 0x80 (0xff: negative), else octal text up to the first NUL. Raises ValueError."""
    if field[:1] in (b"\x80", b"\xff"):
        value = int.from_bytes(field[1:], "big")
        return value - (1 << (8 * (len(field) - 1))) if field[:1] == b"\xff" else value
    text = field.split(b"\0", 1)[0].decode("ascii").strip()
    return int(text or "0", 8)


class MemberCheck:
    """What every tar member must be, in archive order: a plain regular file, not named
    before, within the count and the per-member and total sizes. Raises ValueError.

    `header` sees each raw 512-byte header before tarfile reads anything it announces;
    `__call__` sees each member as tarfile made it (after pax and GNU long names).
    `announced` counts the bytes of the archive that the headers accepted so far account
    for: tarfile may read no further (`_Announced`)."""

    def __init__(self, max_members: int, max_member_bytes: int, max_total_bytes: int) -> None:
        self.limits = (max_members, max_member_bytes, max_total_bytes)
        self.seen: set[str] = set()
        self.total = 0
        self.members = 0
        self.extensions: set[str] = set()  # the kinds seen since the last member
        self.announced = 0

    def header(self, block: bytes) -> None:
        """Refuse, before its data is read, a header that announces an extension over its
        cap, a second extension of one kind for one member, a sparse file, or one member
        too many."""
        max_members = self.limits[0]
        name = block[:100].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        self.announced += BLOCK
        kind = _EXTENSIONS.get(block[156:157])
        if kind is None:
            self.members += 1
            self.extensions.clear()
            if self.members > max_members:
                raise ValueError(f"{name!r}: more than {max_members} members")
            if block[156:157] == b"S":  # its map runs on in further header blocks
                raise ValueError(f"{name!r}: sparse file, not a regular file")
            return
        where = f"member {self.members + 1} ({kind} {name!r})"
        try:
            size = header_number(block[124:136])
        except ValueError:
            raise ValueError(f"{where}: unreadable size field") from None
        if size < 0:
            raise ValueError(f"{where}: negative size {size}")
        if size > MAX_EXTENSION_BYTES:
            raise ValueError(f"{where}: {size} bytes, over the cap of {MAX_EXTENSION_BYTES} bytes")
        if kind in self.extensions:
            raise ValueError(f"{where}: a second {kind} for one member")
        self.extensions.add(kind)
        self.announced += _blocks(size)

    def __call__(self, info: tarfile.TarInfo) -> None:
        _, max_member_bytes, max_total_bytes = self.limits
        name = info.name
        if info.type not in _REGULAR:
            kind = _TAR_KINDS.get(info.type, f"member type {info.type!r}")
            raise ValueError(f"{name!r}: {kind}, not a regular file")
        if info.sparse is not None:
            raise ValueError(f"{name!r}: sparse file, not a regular file")
        if name in self.seen:
            raise ValueError(f"{name!r}: duplicate member")
        self.seen.add(name)
        if info.size > max_member_bytes:
            raise ValueError(f"{name!r}: {info.size} bytes, over the limit of {max_member_bytes}")
        self.total += info.size
        if self.total > max_total_bytes:
            raise ValueError(f"{name!r}: archive content over the limit of {max_total_bytes} bytes")
        self.announced += _blocks(info.size)


class _Announced:
    """A tar's source as tarfile reads it, never past what the headers accepted so far
    account for (and the end-of-archive block): no header can make tarfile read and keep
    data none announced, such as a GNU sparse map running on through the stream."""

    def __init__(self, source: typing.Any, check: MemberCheck) -> None:
        self.source = source
        self.check = check
        self.taken = 0

    def read(self, n: int = -1) -> bytes:
        if self.taken >= self.check.announced + 2 * BLOCK:
            raise ValueError(f"member {self.check.members}: tar data beyond what its headers announce")
        data: bytes = self.source.read(n)
        self.taken += len(data)
        return data


def checked_members(
    source: typing.Any, check: MemberCheck
) -> typing.Iterator[tuple[str, int, typing.BinaryIO]]:
    """Each member of the tar read from ``source`` as it arrives, once ``check`` accepts
    it: its name, its size and a reader of its content (good until the next member).

    Every raw header goes through ``check.header`` first: through `TarInfo.frombuf`, which
    tarfile calls with each 512-byte block before it reads the data that block announces.
    """
    import tarfile

    class CheckedInfo(tarfile.TarInfo):
        @classmethod
        def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> typing.Any:
            info = super().frombuf(buf, encoding, errors)
            check.header(bytes(buf))
            return info

    # Any: tarfile's stubs ask for a whole file object, and a stream is only ever read.
    announced: typing.Any = _Announced(source, check)
    with tarfile.open(
        fileobj=announced,
        mode="r|",
        bufsize=1 << 16,
        tarinfo=CheckedInfo,
        encoding="utf-8",
        errors="surrogateescape",
    ) as archive:
        for info in archive:
            check(info)
            yield (
                info.name,
                info.size,
                typing.cast(typing.BinaryIO, archive.extractfile(info) or io.BytesIO()),
            )


def read_tar(
    data: bytes, max_members: int, max_member_bytes: int, max_total_bytes: int
) -> list[tuple[str, bytes]]:
    """Read an uncompressed in-memory tar, accepting nothing but plain regular files.

    Returns ``(name, content)`` pairs in archive order. Raises ValueError naming the member
    and the fault on: a member that is not a plain regular file, a duplicate name, too many
    members, a member or total over its size limit, an extension header over its cap, or
    a damaged archive. Names are returned as stored (after pax/GNU long-name headers);
    callers check them.
    """
    import tarfile

    members: list[tuple[str, bytes]] = []
    check = MemberCheck(max_members, max_member_bytes, max_total_bytes)
    try:
        for name, size, handle in checked_members(io.BytesIO(data), check):
            content = handle.read()
            if len(content) != size:
                raise ValueError(f"{name!r}: truncated member")
            members.append((name, content))
    except tarfile.TarError as exc:
        raise ValueError(f"damaged tar: {exc}") from None
    except EOFError:
        raise ValueError("damaged tar: unexpected end of data") from None
    return members
