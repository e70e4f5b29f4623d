"""What the operator pinned for one repository, kept in their own config folder.

A repository can arrive with its own `.gen/`: committed with `git add -f`, or inside an
archive. git writes those files as the operator, so who owns them says nothing of who
wrote them. What grants power over the operator's machine is therefore pinned outside
the repository, in ``$XDG_CONFIG_HOME/genjob/repositories/<id>.json``, where no
repository can write: the sha256 of what the repository's config would run, once the
operator allowed it (`genjob allow`), and the fingerprints of the worker keys the
operator pinned for it (`genjob trust`). A repository is known by the real path of its
root, as direnv knows an `.envrc`.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from core.errors import BadInput
from core.model.canonical import canonical, loads_strict, read_bytes
from core.store.durable import atomic_write
from core.store.layout import config_folder, user_config_dir
from core.store.ownership import operator_owners, require_trusted

SCHEMA = "genjob.pins.v1"
MAX_PINS_BYTES = 1 << 20


@dataclass(frozen=True)
class Pins:
    """The operator's pins for the repository at `root` (its real path)."""

    root: str
    config: str | None = None
    keys: frozenset[str] = frozenset()

    def document(self) -> dict[str, object]:
        return {"schema": SCHEMA, "root": self.root, "config": self.config, "keys": sorted(self.keys)}


def pins_folder() -> Path:
    return user_config_dir() / "repositories"


def real_root(root: Path) -> str:
    return os.path.realpath(root)


def pins_file(root: Path) -> Path:
    """Where the pins of the repository at `root` live: named by the hash of its real path."""
    name = hashlib.sha256(os.fsencode(real_root(root))).hexdigest()[:32]
    return pins_folder() / f"{name}.json"


def read_pins(root: Path) -> Pins:
    """The operator's pins for `root`; none pinned when there is no file.

    A file another user could have written, or one that does not parse, is refused with
    its fault: pins decide what may run, so a damaged one never silently counts as empty.
    """
    path = pins_file(root)
    if not os.path.lexists(path):
        return Pins(real_root(root))
    require_trusted(path, user_config_dir(), operator_owners(), "a repository's pins")
    doc = loads_strict(read_bytes(path, MAX_PINS_BYTES), str(path))
    keys = doc.get("keys") if isinstance(doc, dict) else None
    if (
        not isinstance(doc, dict)
        or set(doc) != {"schema", "root", "config", "keys"}
        or doc["schema"] != SCHEMA
        or not isinstance(doc["root"], str)
        or not (doc["config"] is None or isinstance(doc["config"], str))
        or not isinstance(keys, list)
        or not all(isinstance(k, str) for k in keys)
    ):
        raise BadInput(f"{path}: not a genjob pins file ({SCHEMA}); remove it and pin again")
    if doc["root"] != real_root(root):
        raise BadInput(f"{path}: pins {doc['root']!r}, not {real_root(root)!r}; remove it and pin again")
    return Pins(doc["root"], doc["config"], frozenset(keys))


@contextmanager
def _locked() -> Iterator[None]:
    folder = config_folder("repositories")
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def update_pins(root: Path, change: Callable[[Pins], Pins]) -> Pins:
    """Apply `change` to the pins of `root` under a lock, and write them durably."""
    with _locked():
        pins = change(read_pins(root))
        atomic_write(pins_file(root), canonical(pins.document()) + b"\n", mode=0o600)
        return pins


def pin_config(root: Path, digest: str) -> Pins:
    return update_pins(root, lambda p: dataclasses.replace(p, config=digest))


def pin_key(root: Path, fingerprint: str) -> Pins:
    return update_pins(root, lambda p: dataclasses.replace(p, keys=p.keys | {fingerprint}))
