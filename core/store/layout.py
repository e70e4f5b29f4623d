"""Where things live under `.gen/`, and how the repository root is found."""

from __future__ import annotations

import contextlib
import os
import stat
import tomllib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from core.errors import BadInput, NotFound, Untrusted
from core.store.ownership import operator_owners, require_trusted, user_name

GEN = ".gen"
STATE_DIRS = ("queue", "running", "receipts", "applied", "rejected")
# Where a key's job document may be, most final first: the first found decides.
JOB_FOLDERS = ("applied", "rejected", "running", "queue")
OTHER_DIRS = (
    "out",
    "attempts",
    "trusted_keys",
    "logs",
    "journal",
    "cache",
    "checks",
    "scratch",
    "fleet",
    "candidates",
)


def user_config_dir() -> Path:
    """The operator's genjob folder: `$XDG_CONFIG_HOME/genjob` (default `~/.config/genjob`)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "genjob"


def config_folder(*parts: str) -> Path:
    """The operator's genjob folder, or a folder in it, each level genjob makes there
    0700 whatever the umask (a level made with the umask's mode would not be trusted)."""
    folder = user_config_dir()
    folder.parent.mkdir(parents=True, exist_ok=True)  # $XDG_CONFIG_HOME itself is the user's
    for level in (folder, *(folder.joinpath(*parts[: i + 1]) for i in range(len(parts)))):
        with contextlib.suppress(FileExistsError):
            level.mkdir(mode=0o700)
    return folder.joinpath(*parts)


# The state a job in each folder is in, by the name the user sees (before what leases,
# receipts and the tree add to it).
FOLDER_STATE = {"queue": "QUEUED", "running": "RUNNING", "applied": "APPLIED", "rejected": "REJECTED"}


@dataclass(frozen=True)
class Layout:
    """Paths of one repository's `.gen/`. Pure: nothing here touches the disk.

    The folder paths are computed once per layout: they are on every hot path.
    """

    root: Path

    @cached_property
    def gen(self) -> Path:
        return self.root / GEN

    @cached_property
    def config(self) -> Path:
        return self.gen / "config.toml"

    @cached_property
    def queue(self) -> Path:
        return self.gen / "queue"

    @cached_property
    def running(self) -> Path:
        return self.gen / "running"

    @cached_property
    def receipts(self) -> Path:
        return self.gen / "receipts"

    @cached_property
    def applied(self) -> Path:
        return self.gen / "applied"

    @cached_property
    def rejected(self) -> Path:
        return self.gen / "rejected"

    @cached_property
    def out(self) -> Path:
        return self.gen / "out"

    @cached_property
    def attempts(self) -> Path:
        return self.gen / "attempts"

    @cached_property
    def trusted_keys(self) -> Path:
        return self.gen / "trusted_keys"

    @cached_property
    def logs(self) -> Path:
        return self.gen / "logs"

    @cached_property
    def journal(self) -> Path:
        return self.gen / "journal"

    @cached_property
    def cache(self) -> Path:
        return self.gen / "cache"

    @cached_property
    def checks(self) -> Path:
        """Check records: `checks/<key>/<name>.json`, each bound to the bytes it checked."""
        return self.gen / "checks"

    @cached_property
    def scratch(self) -> Path:
        """The scratch trees checks run in; each is removed when its run ends."""
        return self.gen / "scratch"

    @cached_property
    def fleet(self) -> Path:
        """What each generator host last did: one small file per configured host."""
        return self.gen / "fleet"

    @cached_property
    def events(self) -> Path:
        return self.gen / "events.jsonl"

    @cached_property
    def lock(self) -> Path:
        """Held for every state change other than a claim (which is a bare rename)."""
        return self.gen / "state.lock"

    @cached_property
    def apply_lock(self) -> Path:
        """Held for every apply of the tree: the repository's one writer (`core.review.writer_lock`)."""
        return self.gen / "apply.lock"

    def job_file(self, folder: str, key: str) -> Path:
        return self.gen / folder / f"{key}.json"

    def lease(self, key: str) -> Path:
        return self.running / f"{key}.lease"

    def cancel_request(self, key: str) -> Path:
        """Written by `genjob cancel`; the worker running the job stops when it sees it."""
        return self.running / f"{key}.cancel"

    def receipt(self, key: str) -> Path:
        return self.receipts / f"{key}.json"

    def signature(self, key: str) -> Path:
        return self.receipts / f"{key}.sig"

    def attestation(self, key: str) -> Path:
        """An applied job's in-toto attestation bundle (`core.review.attest`)."""
        return self.gen / "attestations" / f"{key}.intoto.jsonl"

    def ssh_signature(self, key: str) -> Path:
        """The receipt's OpenSSH signature (SSHSIG), for `ssh-keygen -Y verify`."""
        return self.receipts / f"{key}.json.sshsig"

    def out_dir(self, digest: str) -> Path:
        return self.out / digest

    def attempts_file(self, key: str) -> Path:
        return self.attempts / f"{key}.jsonl"

    def log_dir(self, key: str) -> Path:
        return self.logs / key

    def journal_file(self, key: str) -> Path:
        return self.journal / f"{key}.json"

    def check_parts(self, key: str, candidate: int | None = None, *, merged: str | None = None) -> list[str]:
        """Where the check records of `key` live, below `.gen/`: `checks/<key>/` for the
        job's receipt, `checks/<key>/candidate-<n>/` for its candidate n's, and
        `checks/<key>/merged-<digest>/` for the bytes a merge of it would write."""
        if merged is not None:
            return ["checks", key, f"merged-{merged}"]
        return ["checks", key] + ([f"candidate-{candidate}"] if candidate is not None else [])

    def check_dir(self, key: str, candidate: int | None = None, *, merged: str | None = None) -> Path:
        return self.gen.joinpath(*self.check_parts(key, candidate, merged=merged))

    def check_record(
        self, key: str, name: str, candidate: int | None = None, *, merged: str | None = None
    ) -> Path:
        return self.check_dir(key, candidate, merged=merged) / f"{name}.json"

    @cached_property
    def candidates(self) -> Path:
        """Best-of-N: each job's candidates, each with its own receipt and outputs."""
        return self.gen / "candidates"

    def candidates_of(self, key: str) -> Path:
        return self.candidates / key

    def candidate(self, key: str, number: int) -> Path:
        return self.candidates / key / str(number)

    def fleet_file(self, host: str) -> Path:
        return self.fleet / f"{host}.json"

    def all_dirs(self) -> list[Path]:
        return [self.gen / d for d in STATE_DIRS + OTHER_DIRS]


def find_root(start: Path | None = None, explicit: Path | None = None) -> Layout:
    """The repository whose `.gen/` holds `start` (default: cwd), found by walking up.

    The walk stops at the top of the git repository it starts in: a `.gen/` above it
    belongs to some other folder (perhaps another user's), never to this repository.
    """
    if explicit is not None:
        root = Path(os.path.abspath(explicit))
        if not (root / GEN).is_dir():
            raise NotFound(f"{root}: no {GEN}/ here (run `genjob init` there first)")
        return _checked(Layout(root))
    here = Path(os.path.abspath(start or Path.cwd()))
    for candidate in (here, *here.parents):
        if (candidate / GEN).is_dir():
            return _checked(Layout(candidate))
        if os.path.lexists(candidate / ".git"):
            raise NotFound(
                f"{candidate}: a git repository with no {GEN}/ "
                "(run `genjob init` there, or name another with --root)"
            )
    raise NotFound(f"{here}: not inside a genjob repository (no {GEN}/ above; run `genjob init`)")


def safe_directories() -> frozenset[str]:
    """The repositories of other users the operator chose to use anyway, as git's
    `safe.directory`: `safe_directories` under `[policy]` in the operator's config.toml
    (read here with tomllib alone: finding the root must stay cheap; `core.store.config`
    validates the whole file where it is loaded)."""
    folder = user_config_dir()
    path = folder / "config.toml"
    if not os.path.lexists(path):
        return frozenset()
    require_trusted(path, folder, operator_owners(), "an operator config")
    try:
        with open(path, "rb") as fh:
            listed = tomllib.load(fh).get("policy", {}).get("safe_directories", [])
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError, AttributeError) as exc:
        raise BadInput(f"{path}: not valid TOML ({exc})") from None
    if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
        raise BadInput(f"{path}: policy.safe_directories: a list of folder paths")
    return frozenset(os.path.abspath(os.path.expanduser(p)) for p in listed)


def require_own_root(layout: Layout) -> None:
    """Refuse a repository root or `.gen/` owned by another user, unless the operator
    listed it in `safe_directories`: its config, keys and jobs are that user's to set."""
    me = os.geteuid()
    for path in (layout.root, layout.gen):
        try:
            uid = os.lstat(path).st_uid
        except FileNotFoundError:
            continue
        if uid != me and str(layout.root) not in safe_directories():
            raise Untrusted(
                f"{path}: owned by {user_name(uid)}, not you ({user_name(me)}); genjob uses only a "
                f"repository of your own. If you trust it, add it to {user_config_dir() / 'config.toml'}: "
                f'[policy] safe_directories = ["{layout.root}"]'
            )


def _checked(layout: Layout) -> Layout:
    """Refuse at once a `.gen/` that is a symlink (state lives in a real folder at the
    repository root, on the tree's filesystem), one of another user's, and one whose audit
    log is not a regular file: most commands append to it after their work is done, and
    would fail then."""
    if os.path.islink(layout.gen):
        raise BadInput(f"{layout.gen}: a symlink; genjob keeps its state in a real folder at the repo root")
    require_own_root(layout)
    try:
        st = os.lstat(layout.events)
    except FileNotFoundError:
        return layout
    if not stat.S_ISREG(st.st_mode):
        raise BadInput(f"{layout.events}: not a regular file (the audit log must be one)")
    return layout
