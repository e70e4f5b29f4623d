"""A repository left by an apply killed between two swaps, for the recover tests of the
core and of the board: a three-target job received, then `apply_job` killed at a chosen
moment in a copy of the repository."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from corekit import mint, receive, set_config, tree_files
from crashkit import first_crash_where
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.model.models import Job
from core.review.apply_job import apply_job
from core.store.layout import Layout
from core.store.signing import load_private_key

NEW = {
    "src/app.py": b"def main():\n    return 2\n",
    "src/pkg/mod.py": b"VALUE = 3\n",
    "src/util.py": b"def helper(x):\n    return x * 3\n",
}
PATHS = sorted(NEW)  # the order apply swaps them in: app.py (0), pkg/mod.py (1), util.py (2)


def received(layout: Layout, signer: Ed25519PrivateKey | None) -> Job:
    job = mint(layout, "Three outputs.", ["src/app.py", "src/util.py"], ["src/pkg/mod.py"])
    assert receive(layout, job.key, NEW, signer).won
    return job


def written(count: int, originals: int | None = None) -> Callable[[Path], bool]:
    """At a kill: exactly `count` targets hold their outputs (and, if given, that many
    originals are kept in the journal's folder)."""

    def holds(root: Path) -> bool:
        now = tree_files(root)
        done = sum(now.get(p) == NEW[p] for p in PATHS) == count
        kept = Path(root, ".gen/journal")
        have = sum(1 for p in kept.glob("*/*") if p.name.isdigit()) if kept.exists() else 0
        return done and (originals is None or have == originals)

    return holds


# Where the kill lands: mid-way through the first swap (the original not yet moved into
# the journal's folder), or after the last swap, every original kept, before the record.
KILLS = {"after-the-first-swap": written(1), "after-the-last-swap": written(3, originals=2)}


def untrust_the_key(layout: Layout, job: Job) -> str:
    for pub in layout.trusted_keys.iterdir():
        pub.unlink()
    return "signature: "


def killed_apply(repo: Layout, tmp_path: Path, kill: str, signed: bool = True) -> tuple[Layout, Job]:
    """A copy of `repo` left by an apply of a three-target job killed at `kill`."""
    if not signed:
        set_config(
            repo, repo.config.read_text().replace("require_signature = true", "require_signature = false")
        )
    job = received(repo, _signer(signed))
    root = first_crash_where(
        repo.root, tmp_path / "killed", lambda r: apply_job(Layout(r), job.key), KILLS[kill]
    )
    return Layout(root), job


def _signer(signed: bool) -> Ed25519PrivateKey | None:
    return load_private_key() if signed else None
