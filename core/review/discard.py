"""Discarding an INVALID job: its unreadable files are set aside as evidence, never deleted.

A job file that does not parse (truncated, hand-edited, written by something else) or a
receipt that does not parse keeps its key INVALID for ever: nothing can claim, apply or
reject it. `discard` moves exactly the files that do not parse, with their signature,
into the job's evidence folder `.gen/logs/<key>/` (as `discarded-<folder>-<name>-<ms>`,
beside late receipts) through `core.store.evidence`; what parses stays where it is, so a job
whose only fault was its receipt shows again as ORPHANED and can be requeued.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.errors import BadInput, NotFound, WrongState
from core.model.models import check_key
from core.store.durable import flocked
from core.store.events import record_event
from core.store.evidence import set_aside
from core.store.job_state import read_job_file
from core.store.layout import JOB_FOLDERS, Layout


@dataclass(frozen=True)
class Discarded:
    key: str
    moved: tuple[str, ...]  # the files' former paths, relative to `.gen/`
    kept: tuple[Path, ...]  # where each one is now
    faults: tuple[str, ...]  # why each did not parse


def _unreadable(layout: Layout, key: str) -> list[tuple[Path, str]]:
    """The key's files that do not parse, each with its fault (a bad receipt brings its .sig)."""
    # Imported here: receipts bring cryptography, which a board need not load to start.
    from core.store.receipts import load_receipt

    bad = []
    for folder in JOB_FOLDERS:
        path = layout.job_file(folder, key)
        if not path.exists():
            continue
        try:
            read_job_file(path, folder)
        except BadInput as exc:
            bad.append((path, str(exc)))
    try:
        load_receipt(layout, key)
    except BadInput as exc:
        bad.append((layout.receipt(key), str(exc)))
        if layout.signature(key).exists():
            bad.append((layout.signature(key), "the signature of a receipt that does not parse"))
    return bad


def discard(layout: Layout, key: str) -> Discarded:
    """Set aside every file of `key` that does not parse; WrongState when all of them do."""
    check_key(key)
    with flocked(layout.lock):
        bad = _unreadable(layout, key)
        if not bad:
            if not any(layout.job_file(f, key).exists() for f in JOB_FOLDERS):
                raise NotFound(f"{key}: no such job in {layout.gen}")
            raise WrongState(f"{key}: every file of it parses; only an INVALID job is discarded")
        moved, kept = [], []
        for path, _ in bad:
            moved.append(f"{path.parent.name}/{path.name}")
            kept.append(set_aside(layout, key, path, f"discarded-{path.parent.name}-{path.name}"))
        record_event(
            layout, "discarded", key, moved=moved, kept=[str(p.relative_to(layout.root)) for p in kept]
        )
    return Discarded(key, tuple(moved), tuple(kept), tuple(fault for _, fault in bad))
