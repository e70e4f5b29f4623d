"""Read-only paths for a sandbox: opened once as descriptors, judged as opened, bound so.

A path judged by its name and bound by its name later loses to a racing writer: a
folder swapped for a link in between binds whatever the link names. And a repository's
links are its data, not the operator's word: a tracked ``.venv`` that links to a folder
of the operator's home would show that folder to a check. So each read-only path is
opened here as an ``O_PATH`` descriptor, judged as what that descriptor is, and bwrap
binds the descriptor (``--ro-bind-fd``), never the name.

Two kinds of path:
 - one inside a `Rules.tree` (a check's repository) is walked from the tree's root one
   component at a time with ``O_NOFOLLOW``; a link is followed only while it stays in
   the tree, and one that leads out of it is refused, naming where it leads;
 - any other (a host's tools, the interpreter genjob runs on) was named by the
   operator, so the kernel resolves it, links and all; what it resolves to is judged.
Either way what is bound must be a folder or a regular file (through a link in a tree:
a folder), not the whole filesystem or the writable folder, and must not be, hold or lie
within the user's home folder itself, ~/.ssh or genjob's key folder (a folder inside the
home is fine). In a tree it must not be the tree itself nor lie in its ``.git/`` or
``.gen/``, which a check never sees.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import BadInput
from core.store.layout import GEN, user_config_dir
from core.store.tree import closing

_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
# As many links as the kernel follows in one lookup before it says ELOOP.
MAX_LINKS = 40
HIDDEN_IN_TREE = (".git", GEN)


@dataclass(frozen=True)
class Bind:
    """A read-only path, open: the descriptor to bind and where the sandbox shows it."""

    fd: int
    at: Path


@dataclass(frozen=True)
class Rules:
    """What the read-only paths of one sandbox may show.

    named_by: who named them, for every message (a config file and its table).
    writable: the real path of the sandbox's writable folder.
    tree: a folder whose paths are walked without leaving it (a check's repository).
    """

    named_by: str
    writable: Path
    tree: Path | None = None


def private_paths() -> tuple[Path, ...]:
    """What a sandbox must never show: the user's home, SSH keys and genjob's key folder."""
    home = Path.home()
    return tuple(Path(os.path.realpath(p)) for p in (home, home / ".ssh", user_config_dir()))


def within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def private_fault(real: Path) -> str | None:
    """What of the user's `private_paths` `real` would show (None: nothing): it is or
    holds one, or lies within ~/.ssh or genjob's key folder."""
    home, ssh, keys = private_paths()
    for private, name in ((home, "your home folder"), (ssh, "~/.ssh"), (keys, "genjob's key folder")):
        if within(private, real) or (private != home and within(real, private)):
            return f"would show {name} ({private})"
    return None


def open_read_only(paths: Sequence[Path], rules: Rules) -> list[Bind]:
    """Each path open and judged, in order; BadInput naming `rules.named_by`, the path
    and the fault for the first that may not be shown (then none is left open)."""
    binds: list[Bind] = []
    try:
        for given in paths:
            binds.append(_open(given, rules))
    except BaseException:
        for bind in binds:
            os.close(bind.fd)
        raise
    return binds


def _open(given: Path, rules: Rules) -> Bind:
    if not given.is_absolute():
        raise BadInput(f"{rules.named_by}: read-only path {given} is not absolute")
    inside = _parts_in(given, rules.tree) if rules.tree is not None else None
    if rules.tree is not None and inside is not None:
        fd, names = _Walk(rules, given, rules.tree).run(inside)
        at = rules.tree.joinpath(*names)
    else:
        fd = _open_followed(given, rules)
        at = _real(fd)
    try:
        _judge(fd, given, rules)
    except BaseException:
        os.close(fd)
        raise
    return Bind(fd, at)


def _parts_in(path: Path, tree: Path) -> list[str] | None:
    """`path`'s components below `tree`, as written (`..` kept); None when it is not
    written below it."""
    if path.parts[: len(tree.parts)] != tree.parts:
        return None
    return list(path.parts[len(tree.parts) :])


def _open_followed(given: Path, rules: Rules) -> int:
    try:
        return os.open(given, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        raise BadInput(f"{rules.named_by}: read-only path {given} does not exist") from None
    except OSError as exc:
        raise BadInput(
            f"{rules.named_by}: read-only path {given} cannot be opened ({exc.strerror})"
        ) from None


def _real(fd: int) -> Path:
    """Where the open `fd` is on this machine, every link resolved."""
    return Path(os.readlink(f"/proc/self/fd/{fd}"))


@dataclass(frozen=True)
class _Link:
    """A link met on the walk: where it is, what it says, and where that is."""

    path: Path
    target: str
    leads: Path


class _Walk:
    """A path inside `tree`, walked from the tree's root through descriptors, following
    a link only while it leads to another place in the tree."""

    def __init__(self, rules: Rules, given: Path, tree: Path) -> None:
        self.rules = rules
        self.given = given
        self.tree = tree
        self.links = 0
        self.chain: list[int] = []  # the folders open on the way, the tree's root first
        self.names: list[str] = []  # their names below the root
        # What is left to walk, the next component last, each with the link it came from.
        self.todo: list[tuple[str, _Link | None]] = []

    def fault(self, text: str) -> BadInput:
        return BadInput(f"{self.rules.named_by}: read-only path {self.given} {text}")

    def run(self, parts: list[str]) -> tuple[int, list[str]]:
        """The descriptor of what `parts` lead to, and its components below the tree."""
        try:
            self.chain.append(os.open(self.tree, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
        except OSError as exc:
            raise self.fault(f"cannot be looked for: {self.tree} cannot be opened ({exc.strerror})") from None
        self.todo = [(p, None) for p in reversed(parts)]
        try:
            while self.todo:
                self._step(*self.todo.pop())
            if self.links and not stat.S_ISDIR(os.fstat(self.chain[-1]).st_mode):
                # A link that names a file beside it (`.venv` -> `.env`) would show what
                # the operator never named: a file is shown only when named itself.
                raise self.fault(
                    f"leads through a link to {self.tree.joinpath(*self.names)}, which is not a "
                    "folder; name that file in read_only itself if it may be read"
                )
            return self.chain.pop(), self.names
        finally:
            while self.chain:
                os.close(self.chain.pop())

    def _step(self, part: str, came_from: _Link | None) -> None:
        if part in ("", "."):
            return
        if part == "..":
            self._up(came_from)
            return
        fd = self._open_at(part)
        if not stat.S_ISLNK(os.fstat(fd).st_mode):
            self.chain.append(fd)
            self.names.append(part)
            return
        with closing(fd):
            target = os.readlink("", dir_fd=fd)
        self.links += 1
        if self.links > MAX_LINKS:
            raise self.fault(f"goes through more than {MAX_LINKS} links")
        link = _Link(self.tree.joinpath(*self.names, part), target, self._leads(target))
        if os.path.isabs(target):
            below = self._below_tree(Path(target))
            if below is None:
                raise self._leads_out(link)
            while self.names:  # an absolute target is walked again from the tree's root
                self._up(link)
            parts = below
        else:
            parts = target.split("/")
        self.todo.extend((p, link) for p in reversed(parts))

    def _up(self, came_from: _Link | None) -> None:
        if not self.names:
            if came_from is not None:
                raise self._leads_out(came_from)
            raise self.fault(
                "leads out of the repository; to let it read a folder outside the repository, "
                "name that folder by its absolute path"
            )
        self.names.pop()
        os.close(self.chain.pop())

    def _open_at(self, part: str) -> int:
        try:
            return os.open(part, _PATH_FLAGS, dir_fd=self.chain[-1])
        except FileNotFoundError:
            raise self.fault("does not exist") from None
        except OSError as exc:
            if exc.errno == errno.ENOTDIR:
                where = self.tree.joinpath(*self.names)
                raise self.fault(f"goes through {where}, which is not a folder") from None
            raise self.fault(f"cannot be opened ({exc.strerror})") from None

    def _leads(self, target: str) -> Path:
        """Where a link in the current folder that says `target` leads, with what is left
        of the path after it: what the operator would name instead."""
        rest = [p for p, _ in reversed(self.todo)]
        return Path(os.path.normpath(self.tree.joinpath(*self.names, target, *rest)))

    def _below_tree(self, target: Path) -> list[str] | None:
        for root in (self.tree, _real_tree(self.tree)):
            parts = _parts_in(target, root)
            if parts is not None:
                return parts
        return None

    def _leads_out(self, link: _Link) -> BadInput:
        there = "" if str(link.leads) == link.target else f", to {link.leads}"
        return self.fault(
            f"goes through {link.path}, a link to {link.target}: out of the repository{there}. "
            "A link in the repository is its data, not your word; if the check may read "
            f'{link.leads}, name it in read_only itself: read_only = ["{link.leads}"]'
        )


def _real_tree(tree: Path) -> Path:
    return Path(os.path.realpath(tree))


def _judge(fd: int, given: Path, rules: Rules) -> None:
    """Refuse what `fd` is when a sandbox may not show it (BadInput naming the fault)."""
    real = _real(fd)
    leads = "" if real == given else f" (it leads to {real})"
    named = f"{rules.named_by}: read-only path {given}{leads}"
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise BadInput(f"{named} is not a folder or a regular file; only those are shown read-only")
    if real == Path("/"):
        raise BadInput(f"{named} is the whole filesystem")
    fault = private_fault(real)
    if fault is not None:
        raise BadInput(f"{named} {fault}; name a folder that holds only what it needs to read")
    if real == rules.writable:
        raise BadInput(f"{named} is the writable folder itself")
    if rules.tree is not None:
        _judge_in_tree(real, named, rules.tree)


def _judge_in_tree(real: Path, named: str, tree: Path) -> None:
    top = _real_tree(tree)
    if not within(real, top):
        return
    below = real.relative_to(top).parts
    if not below:
        raise BadInput(
            f"{named} is the repository itself, its untracked files, .git/ and .gen/ with it; "
            "name the folders the check needs"
        )
    if below[0] in HIDDEN_IN_TREE:
        raise BadInput(f"{named} lies in the repository's {below[0]}/, which a check never sees")
