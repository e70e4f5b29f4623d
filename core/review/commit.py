"""The commit `apply --commit` makes, and its retry.

An apply asked to commit writes that wish into its journal and its apply record
(`"commit": {"state": "pending", "sign": ...}`) before git runs; once git has committed,
the record says `{"state": "committed", "sha": ..., "signed": ...}`. A commit that git
refused (a pre-commit hook, a signing fault) or that was killed leaves the job APPLIED
and "applied, not committed", its paths unstaged again; `apply --commit` and `recover`
commit it later, with the same trailers. Before a retry commits, it looks in the
history for a commit with the job's `Genjob-Digest:` trailer (killed after git committed:
only the record was left to write), and it commits only paths still holding the bytes
the job wrote: a path edited since is the user's work, never committed as the job's.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any, Literal

from core.errors import GenjobError
from core.model.canonical import canonical, read_bytes, sha256_bytes
from core.model.models import Job
from core.review.attest import attest
from core.store.durable import atomic_write, flocked
from core.store.events import record_event
from core.store.layout import Layout
from core.store.queue import Located, locate
from core.store.repo import is_git_work_tree
from core.store.signing import load_operator_key, operator_key_path
from core.store.tree import closing, hash_at, open_dir, open_folder

CommitState = Literal["pending", "committed"]


def commit_state(record: dict[str, Any] | None) -> CommitState | None:
    """Whether an apply record's commit is pending or made; None when none was asked for."""
    applied = record.get("apply") if isinstance(record, dict) else None
    wish = applied.get("commit") if isinstance(applied, dict) else None
    state = wish.get("state") if isinstance(wish, dict) else None
    return state if state in ("pending", "committed") else None


def pending_commit(sign: bool) -> dict[str, Any]:
    """The apply record's `commit` while git has not committed it."""
    return {"state": "pending", "sign": sign}


def commit_applied(layout: Layout, loc: Located, *, sign: bool | None = None) -> str:
    """Commit an applied job whose commit is pending, or record the one git already made;
    returns the commit id. `sign` defaults to what the apply asked for."""
    wish = (loc.record or {}).get("apply", {}).get("commit", {})
    signed = bool(wish.get("sign")) if sign is None else sign
    sha = _committed_already(layout, loc.job)
    if sha is None:
        check_commit_ready(layout, sign=signed)
        paths = _unchanged_since_apply(layout, loc)
        sha = git_commit(layout, loc.job, paths, sign=signed)
    else:
        _mark_committed(layout, loc.key, sha, signed)
    return sha


def _committed_already(layout: Layout, job: Job) -> str | None:
    """The commit on HEAD's history that carries this job's digest trailer, if git made one."""
    trailer = f"Genjob-Digest: {job.digest}"
    try:
        proc = _git(layout, "log", "-F", f"--grep={trailer}", "--format=%H", "-n1", "HEAD", check=False)
    except OSError:
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def _unchanged_since_apply(layout: Layout, loc: Located) -> list[str]:
    """The applied paths, each still at the hash the apply wrote; else a GenjobError naming it."""
    applied = (loc.record or {}).get("apply", {})
    after = {t["path"]: t["after"] for t in applied.get("targets", []) if isinstance(t, dict)}
    paths = [p for p in applied.get("changed", []) if isinstance(p, str)]
    with closing(open_dir(layout.root)) as root:
        for rel in paths:
            if _hash_in(root, rel) != after.get(rel):
                raise GenjobError(
                    f"{rel}: changed since genjob applied job {loc.key}, so it is not committed as the "
                    "job's; commit it yourself (the apply stands)"
                )
    return paths


def _hash_in(root: int, rel: str) -> str | None:
    """sha256 of the regular file at `rel` below `root`, reached without links; None when absent."""
    *parents, name = rel.split("/")
    try:
        parent = open_folder(root, parents, rel)
    except FileNotFoundError:
        return None
    with closing(parent) as fd:
        return hash_at(fd, name, rel)


def _mark_committed(layout: Layout, key: str, sha: str, signed: bool) -> None:
    """Write the commit into the job's apply record, under the state lock."""
    with flocked(layout.lock):
        loc = locate(layout, key)
        if loc.folder != "applied" or loc.record is None:
            raise GenjobError(f"{key}: is no longer applied; the commit {sha} stands")
        apply = {**loc.record["apply"], "commit": {"state": "committed", "sha": sha, "signed": signed}}
        atomic_write(loc.path, canonical({"job": loc.job.document(), **loc.record, "apply": apply}))


# What `apply --commit` says when git cannot say who commits, before anything is written.
NO_GIT_IDENTITY = (
    'git does not know who you are, so nothing was applied: run git config --global user.name "Your Name"'
    ' && git config --global user.email "you@example.com", then apply again'
)


def check_commit_ready(layout: Layout, *, sign: bool = False) -> None:
    """Refuse an apply that is to be committed and could not be, before it writes anything:
    the tree must be in a git work tree, and git must know who commits (`user.name` and
    `user.email`, or what git can tell by itself, as `git commit` would judge it); a signed
    commit needs the operator's key and OpenSSH's `ssh-keygen`, which git signs with."""
    if sign:
        load_operator_key()
        if shutil.which("ssh-keygen") is None:
            raise GenjobError("ssh-keygen: not found, and git signs commits with it; nothing was applied")
    if not is_git_work_tree(layout.root):
        where = layout.root
        raise GenjobError(f"{where}: not in a git work tree, so nothing was applied (git init makes one)")
    try:
        for who in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT"):
            if _git(layout, "var", who, check=False).returncode != 0:
                raise GenjobError(NO_GIT_IDENTITY)
    except OSError as exc:
        raise GenjobError(f"git: cannot run ({exc.strerror}), so nothing was applied") from None


def _git(
    layout: Layout, *args: str, check: bool = True, settings: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """`git ARGS` in the repository, its paths taken literally, with `-c` `settings` for
    this one command (OSError: git cannot run)."""
    given = [arg for setting in settings for arg in ("-c", setting)]
    proc = subprocess.run(
        ["git", "--literal-pathspecs", *given, "-C", str(layout.root), *args], capture_output=True, text=True
    )
    if check and proc.returncode != 0:
        why = proc.stderr.strip() or proc.stdout.strip()
        raise GenjobError(f"git {args[0]}: {why}")
    return proc


def git_commit(
    layout: Layout, job: Job, paths: list[str], *, sign: bool = False, trailers_after: Sequence[str] = ()
) -> str:
    """Commit exactly the applied paths, with `Genjob-` trailers naming the job and its
    receipt by digest; returns the commit id. Signed (`sign`), the commit carries an SSH
    signature by the operator's key, as `git -c gpg.format=ssh commit -S` makes it, and a
    trailer naming the job's attestation (`core.review.attest`), written first.

    Paths go to git as literal pathspecs: an allowed path such as ``:(glob)**`` or
    ``src/*.py`` names that one file, never a pattern over the user's other work.
    `check_commit_ready` has made sure, before the apply, that git can commit here.
    """
    first = job.instruction.strip().splitlines()[0][:72]
    trailers = [
        f"Genjob-Key: {job.key}",
        f"Genjob-Digest: {job.digest}",
        f"Genjob-Receipt: sha256:{sha256_bytes(read_bytes(layout.receipt(job.key)))}",
        *trailers_after,
    ]
    settings: list[str] = []
    if sign:
        attestation = attest(layout, job.key, load_operator_key())
        trailers.append(f"Genjob-Attestation: sha256:{sha256_bytes(read_bytes(attestation))}")
        settings = ["gpg.format=ssh", f"user.signingkey={operator_key_path()}"]
    message = f"{first}\n\nApplied by genjob from a verified receipt.\n\n" + "\n".join(trailers) + "\n"

    retry = (
        f"applied, not committed: `genjob apply {job.key} --commit` or `genjob recover` commits it "
        "once git can; the apply itself stands"
    )
    try:
        _git(layout, "add", "--", *paths, settings=settings)
        _git(
            layout, "commit", "-q", *(["-S"] if sign else []), "-m", message, "--", *paths, settings=settings
        )
        sha = _git(layout, "rev-parse", "HEAD").stdout.strip()
    except OSError as exc:
        raise GenjobError(f"git: cannot run ({exc.strerror}); {retry}") from None
    except GenjobError as exc:
        _unstage(layout, paths)
        record_event(layout, "commit-failed", job.key, why=str(exc)[:300])
        raise GenjobError(f"{exc} ({retry})") from None
    record_event(layout, "committed", job.key, commit=sha, signed=sign)
    _mark_committed(layout, job.key, sha, sign)
    return sha


def _unstage(layout: Layout, paths: list[str]) -> None:
    """Put the index entries of `paths` back as HEAD has them: a refused commit leaves nothing staged."""
    with contextlib.suppress(OSError):
        _git(layout, "reset", "-q", "HEAD", "--", *paths, check=False)
