"""One consistent read of `.gen/` for `genjob ls`, and single jobs read again.

Names first (`core.read.folders`), then facts only where needed: `take_snapshot(states=...)`
reads just the keys that may be in those states (`--state RECEIVED` reads running/ alone).
A full snapshot keeps what it read in the index (`core.read.listing_index`): whole rows
where they met no lease, clock or candidates, the facts of the others. The next takes a
kept row as it is while its files and tree files hold, reads only the files replaced
since, and the config only when one of its files changed.
`refresh` reads given keys again (after file events; for `show`, replay, the board).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from core.errors import GenjobError
from core.model.lifecycle import State
from core.model.protected import DEFAULT_PROTECTED
from core.read.folders import Names, folder_keys, list_names, may_turn_out
from core.read.listing_index import NAME, NO_INDEX, Index, Policy, read_index, write_index
from core.read.rows import JobRow, KeyFacts, RowMaker, meets_tree, racy_after, read_facts
from core.store.layout import JOB_FOLDERS, Layout, user_config_dir
from core.store.pins import pins_file
from core.store.tree import make_folder

__all__ = ["JobRow", "Snapshot", "job_row", "read_policy", "refresh", "take_snapshot"]


@dataclass
class Snapshot:
    """Every job listed (or those in the states asked for) with the policy they are shown under."""

    rows: dict[str, JobRow]
    taken_at: float
    signature_required: bool
    config_error: str | None = None
    unsandboxed_checks: tuple[str, ...] = ()
    config_held: str | None = None
    protected_paths: tuple[str, ...] = DEFAULT_PROTECTED
    counts: Counter[State] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.counts = Counter(row.state for row in self.rows.values())


def _config_policy(path: Path) -> Policy:
    """What config.toml says, read by the config's models (pydantic: loaded only then)."""
    from core.store.config import load_config

    if not path.exists():
        return Policy(True, None, (), None, DEFAULT_PROTECTED)
    try:
        config = load_config(path)
    except GenjobError as exc:
        return Policy(True, str(exc), (), None, DEFAULT_PROTECTED)
    unsandboxed = tuple(name for name, check in config.checks.items() if check.sandbox == "none")
    held = config.held.hint if config.held is not None else None
    return Policy(
        config.policy.require_signature, None, unsandboxed, held, tuple(config.policy.protected_paths)
    )


def policy_stamps(layout: Layout) -> list[int]:
    """(inode, size, mtime, ctime) of each file the policy is read from, zeros for one missing."""
    stamps: list[int] = []
    for path in (layout.config, user_config_dir() / "config.toml", pins_file(layout.root)):
        try:
            st = os.stat(path)
            stamps += (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        except OSError:
            stamps += (0, 0, 0, 0)
    return stamps


def read_policy(layout: Layout, index: Index | None = None) -> tuple[Policy, list[int]]:
    """The policy (the index's while none of its files changed) and the stamps it may be
    kept under: (inode, size, mtime, ctime) of config.toml, of the operator's, which sets a
    floor under it, and of the pins; none while one of them may still be changing."""
    stamps = policy_stamps(layout)
    if index is not None and index.policy is not None and index.policy_stamps == stamps:
        return index.policy, stamps
    racy = racy_after()
    return _config_policy(layout.config), stamps if all(mtime < racy for mtime in stamps[2::4]) else []


# A key in two folders is INCONSISTENT, a file named by no key INVALID: only a listing of
# every folder finds them. Any other state is found from fewer names (`_may_be`).
MIXED = frozenset({State.INCONSISTENT, State.INVALID})


def _may_be(gen: str, wanted: frozenset[State]) -> list[str]:
    """The keys that may be in `wanted` (none MIXED): those in a folder whose jobs alone may
    be, and those with a receipt or candidates; the others' names are never listed."""
    some = [f for f in JOB_FOLDERS if not wanted.isdisjoint(may_turn_out(f))]
    keys = [key for folder in (*some, "receipts") for key in folder_keys(f"{gen}/{folder}")]
    return list(dict.fromkeys([*keys, *folder_keys(f"{gen}/candidates", "")]))


Kept = TypeVar("Kept", JobRow, KeyFacts)


def tree_paths(row: JobRow) -> tuple[str, ...]:
    """The tree files a row was judged against."""
    return row.allowed_paths if meets_tree(row.schema, row.folders, row.receipt_status) else ()


def still_held(
    names: Names, kept: Mapping[str, Kept], inodes: Mapping[str, int], receipt_inodes: Mapping[str, int]
) -> dict[str, Kept]:
    """What `kept` holds of each key that is still in the one folder it was read in, by the
    same file (`inodes`), with the same receipt (`receipt_inodes`, or still none)."""
    files, where, receipts = names.files, names.where, names.files["receipts"]
    return {
        key: record
        for key, record in kept.items()
        if where.get(key) == record.folders
        and inodes[key] == files[record.folders[0]][key]
        and receipts.get(key, 0) == receipt_inodes.get(key, 0)
    }


def held_rows(names: Names, index: Index, moved: set[str]) -> dict[str, JobRow]:
    """The rows of `index` that still hold: their files as they were, no lease or candidates
    since, and no tree file they met changed (`moved`)."""
    held = still_held(names, index.rows, index.inodes, index.receipt_inodes)
    gone = names.leases | names.candidates
    if moved:
        gone |= {key for key, row in held.items() if not moved.isdisjoint(tree_paths(row))}
    for key in gone & held.keys():
        del held[key]
    return held


def held_facts(names: Names, known: dict[str, KeyFacts]) -> dict[str, KeyFacts]:
    """The facts of `known` that still hold: their files as they were."""
    inodes = {key: facts.inode for key, facts in known.items()}
    return still_held(names, known, inodes, {key: facts.receipt_inode for key, facts in known.items()})


def take_snapshot(
    layout: Layout, disk_cache: bool = True, *, states: Collection[State] = (), now: float | None = None
) -> Snapshot:
    """Every job (or those in `states`) with its state; `disk_cache`: use and keep the index."""
    gen, wanted = str(layout.gen), frozenset(states)
    if wanted and wanted.isdisjoint(MIXED):
        policy, _ = read_policy(
            layout, read_index(layout.cache / NAME, gen, facts=False) if disk_cache else None
        )
        some = refresh(layout, _may_be(gen, wanted), now=now)
        found = {key: row for key, row in some.items() if row is not None and row.state in wanted}
        return Snapshot(found, time.time() if now is None else now, **policy._asdict())
    index = (read_index(layout.cache / NAME, gen) if disk_cache else None) or NO_INDEX
    policy, stamps = read_policy(layout, index)
    names = list_names(gen)
    maker, racy = RowMaker(layout, now, index.leases, index.tree), racy_after()
    held, facts_held = held_rows(names, index, maker.tree_changes()), held_facts(names, index.known)
    rows, known, inodes, receipt_inodes = dict(held), {}, {}, {}
    receipts = names.files["receipts"]
    for key in itertools.chain(names.where, receipts.keys() - names.where.keys()):
        if key in held:
            continue
        folders, facts, settled = names.where.get(key, ()), facts_held.get(key), True
        if facts is None:
            facts, settled = read_facts(gen, key, folders, receipt=key in receipts, racy_ns=racy)
            if not facts.folders and facts.receipt is None:
                continue  # its files went since the listing
        rows[key] = row = maker.row(
            key, facts, leased=key in names.leases, candidates=key in names.candidates
        )
        if not settled or len(folders) != 1:  # a key in several folders (after a crash) is read again
            continue
        if maker.momentary:
            known[key] = facts
        else:
            held[key], inodes[key] = row, facts.inode
            if facts.receipt_inode:
                receipt_inodes[key] = facts.receipt_inode
    new = index._replace(
        policy=policy if stamps else None, policy_stamps=stamps, known=known, leases=maker.leases
    )
    if inodes or len(held) < len(index.rows):  # the rows kept changed
        tree = {rel: maker.tree[rel] for row in held.values() for rel in tree_paths(row)}
        inodes = {key: inodes.get(key) or index.inodes[key] for key in held}
        receipt_inodes.update(
            (key, index.receipt_inodes[key]) for key in held.keys() & index.receipt_inodes.keys()
        )
        new = new._replace(rows=held, inodes=inodes, receipt_inodes=receipt_inodes, tree=tree)
    # Leases alone changing (workers' heartbeats) do not write it again: each changed
    # lease costs one read next time, far less than writing every row.
    if disk_cache and new._replace(leases=index.leases)[1:] != index[1:]:
        with contextlib.suppress(OSError, ValueError, GenjobError):  # not kept costs a read next time
            make_folder(layout.cache, layout.gen)
            write_index(layout.cache / NAME, gen, new)
    found = {key: row for key, row in rows.items() if row.state in wanted} if wanted else rows
    return Snapshot(found, maker.now, **policy._asdict())


def refresh(
    layout: Layout, keys: Iterable[str], *, attempts: bool = False, now: float | None = None
) -> dict[str, JobRow | None]:
    """`keys` as their files are now (None: a key has none left); with `attempts`, each
    row counts its claims."""
    gen, maker, racy = str(layout.gen), RowMaker(layout, now), racy_after()
    out: dict[str, JobRow | None] = {}
    for key in keys:
        folders = tuple(f for f in JOB_FOLDERS if os.path.lexists(f"{gen}/{f}/{key}.json"))
        receipt, leased, candidates = (
            os.path.lexists(f"{gen}/{f}")
            for f in (f"receipts/{key}.json", f"running/{key}.lease", f"candidates/{key}")
        )
        facts, _ = read_facts(gen, key, folders, receipt=receipt, racy_ns=racy)
        gone = not facts.folders and facts.receipt is None
        out[key] = (
            None if gone else maker.row(key, facts, leased=leased, candidates=candidates, attempts=attempts)
        )
    return out


def job_row(layout: Layout, key: str, *, attempts: bool = False) -> JobRow | None:
    """The row of one job as its files are now, or None when it has none."""
    return refresh(layout, [key], attempts=attempts)[key]
