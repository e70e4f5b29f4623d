"""The architecture topic's tree under "## The layout" lists every module of `core/` and
`tui/`, each once, and nothing that is not there.

In the tree a folder is a line whose name ends in `/`; what is indented two spaces more
below it is inside it. Every name is followed by what it does. `__init__.py` files are not
listed: their package's folder line says what the package is.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOPIC = ROOT / "tui/reference/architecture.md"
PACKAGES = ("core", "tui")
ENTRY = re.compile(r"^(?P<indent>(?:  )*)(?P<name>[\w.]+/?) +(?P<job>\S.*)$")


def layout_tree() -> list[str]:
    """The lines of the text block in the architecture topic's "The layout" section."""
    topic = TOPIC.read_text()
    section = topic.split("\n## The layout\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```text\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the section has a text block"
    return block.group(1).splitlines()


def listed() -> list[str]:
    """Every path the tree names, folders ending in `/`, relative to the checkout."""
    paths: list[str] = []
    folders: list[str] = []
    for line in layout_tree():
        entry = ENTRY.match(line)
        assert entry is not None, f"not a tree entry (a name, then its job): {line!r}"
        depth = len(entry["indent"]) // 2
        assert depth <= len(folders), f"indented below no folder: {line!r}"
        del folders[depth:]
        path = "".join(folders) + entry["name"]
        paths.append(path)
        if path.endswith("/"):
            folders.append(entry["name"])
    return paths


def on_disk() -> set[str]:
    """Every module and package folder of core/ and tui/, but `__init__.py` files."""
    found: set[str] = set()
    for package in PACKAGES:
        for module in (ROOT / package).rglob("*.py"):
            rel = module.relative_to(ROOT)
            if "__pycache__" in rel.parts:
                continue
            if module.name == "__init__.py":
                found.add(f"{rel.parent.as_posix()}/")
            else:
                found.add(rel.as_posix())
    return found


def test_the_tree_parses_and_lists_each_path_once() -> None:
    paths = listed()
    assert paths, "the tree lists something"
    twice = sorted({p for p in paths if paths.count(p) > 1})
    assert not twice, f"listed more than once: {twice}"


def test_every_module_is_in_the_tree() -> None:
    missing = sorted(on_disk() - set(listed()))
    assert not missing, f"modules the architecture topic's tree does not list: {missing}"


def test_everything_in_the_tree_exists() -> None:
    gone = sorted(p for p in listed() if not (ROOT / p).exists() or p.endswith("/__init__.py"))
    assert not gone, f"the architecture topic's tree lists what is not there (or an __init__.py): {gone}"
