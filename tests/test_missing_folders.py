"""A `.gen/` that lost a folder: a fresh clone or an archive drops empty folders.

Every command of the CLI runs against a `.gen/` with one of its folders removed, under
umask 002: it makes the folder it writes (owner-writable only) or says in one line what
is missing, and never ends in a traceback. Nothing it leaves under `.gen/` is writable by
the group or by others.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from corekit import carry_pins, cli, dead_pid, make_repo, mint, receive, set_config, sha
from shipkit import host_block, script, write_config

from core.model.canonical import canonical
from core.review.apply import plan
from core.store.candidate_store import OUT, Holder, commit_candidate, staging
from core.store.layout import Layout
from core.store.queue import Claimer, claim, reject
from core.store.receipts import load_receipt, make_receipt
from core.store.signing import keygen, load_private_key, trust_repository

# The folders a clone or an archive may lose (each is empty on many a repository).
FOLDERS = (
    "journal",
    "out",
    "applied",
    "rejected",
    "logs",
    "checks",
    "attempts",
    "candidates",
    "fleet",
    "cache",
    "scratch",
    "queue",
    "running",
    "receipts",
    "trusted_keys",
)


@dataclasses.dataclass(frozen=True)
class Jobs:
    """The keys of the template's jobs, one in each state a command acts on."""

    queued: str
    received: str
    running: str
    orphaned: str
    rejected: str
    candidates: str
    journal: str
    invalid: str


@dataclasses.dataclass(frozen=True)
class Template:
    root: Path
    config_home: Path
    jobs: Jobs


def group_or_other_writable(gen: Path) -> list[str]:
    """Everything under `gen` (itself included) with a group or other write bit."""
    found = []
    for dirpath, dirnames, filenames in os.walk(gen):
        for name in [".", *dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022:
                found.append(f"{os.path.relpath(path, gen)} {stat.S_IMODE(st.st_mode):04o}")
    return found


def _candidates_job(layout: Layout, signer: object) -> str:
    job = mint(layout, "Pick one.", ["src/util.py"])
    c = Claimer(layout, "w1", pid=dead_pid()).claim(job.key)
    for number, text in ((1, b"one\n"), (2, b"two\n")):
        folder = staging(layout, c.key, c.lease.token, number)
        (folder / OUT / "src").mkdir(parents=True)
        (folder / OUT / "src/util.py").write_bytes(text)
        receipt = make_receipt(c.job, "ok", {"src/util.py": sha(text)}, "w1")
        holder = Holder("w1", c.lease.token, signer)  # type: ignore[arg-type]
        commit_candidate(layout, c.job, number, [1, 2], receipt, {"host": "here"}, holder)
    return job.key


def _journal_job(layout: Layout, signer: object) -> str:
    """A received job whose apply was killed before it wrote anything: its journal is open."""
    job = mint(layout, "Interrupted.", ["docs/guide.md"])
    receive(layout, job.key, {"docs/guide.md": b"guide, applied\n"}, signer)  # type: ignore[arg-type]
    receipt = load_receipt(layout, job.key)
    assert receipt is not None
    journal = {"key": job.key, "digest": job.digest, "targets": [t.to_dict() for t in plan(job, receipt)]}
    layout.journal_file(job.key).write_bytes(canonical(journal))
    return job.key


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Template]:
    base = tmp_path_factory.mktemp("missing-folders")
    config_home = base / "xdg"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CONFIG_HOME", str(config_home))
        layout = make_repo(base / "repo")
        trust_repository(layout, keygen())
        signer = load_private_key()
        generator = script(base, "gen", "open('src/app.py', 'a').write('# generated\\n')\n")
        write_config(layout, host_block("here", None, generator), lease_ttl=600.0)
        set_config(layout, layout.config.read_text() + '\n[checks.ok]\nrun = "true"\n')
        queued = mint(layout, "Queued.", ["src/app.py"]).key
        received = mint(layout, "Received.", ["src/app.py", "src/util.py"], ["src/pkg/new.py"])
        outputs = {"src/app.py": b"app, changed\n", "src/pkg/new.py": b"NEW = 1\n"}
        receive(layout, received.key, outputs, signer)
        running = mint(layout, "Running.", ["README.md"]).key
        claim(layout, "w1", running, ttl=600.0)
        orphaned = mint(layout, "Orphaned.", ["docs/guide.md", "README.md"]).key
        claim(layout, "w1", orphaned, pid=dead_pid())
        rejected = mint(layout, "Rejected.", ["src/util.py", "README.md"]).key
        reject(layout, rejected, "not now")
        jobs = Jobs(
            queued=queued,
            received=received.key,
            running=running,
            orphaned=orphaned,
            rejected=rejected,
            candidates=_candidates_job(layout, signer),
            journal=_journal_job(layout, signer),
            invalid="0" * 32,
        )
        (layout.queue / f"{jobs.invalid}.json").write_bytes(b"{not json")
        assert cli("ls", root=layout.root).exit_code == 0  # the listing's cache is made
        assert group_or_other_writable(layout.gen) == []
    yield Template(layout.root, config_home, jobs)


def pubkey(t: Template) -> str:
    return str(t.config_home / "genjob/worker_ed25519.pub")


# Each command, with the job (or file) it acts on.
COMMANDS: dict[str, Callable[[Template], list[str]]] = {
    "init": lambda t: ["init", str(t.root)],
    "mint": lambda t: ["mint", "-m", "Add a line.", "README.md"],
    "ls": lambda t: ["ls"],
    "ls --json": lambda t: ["ls", "--json"],
    "show": lambda t: ["show", t.jobs.received],
    "show (prefix)": lambda t: ["show", t.jobs.received[:8]],
    "claim": lambda t: ["claim", t.jobs.queued, "--worker", "w2"],
    "requeue": lambda t: ["requeue", t.jobs.orphaned],
    "verify": lambda t: ["verify", t.jobs.received],
    "verify --candidate": lambda t: ["verify", t.jobs.candidates, "--candidate", "1"],
    "apply": lambda t: ["apply", t.jobs.received],
    "apply --candidate": lambda t: ["apply", t.jobs.candidates, "--candidate", "2"],
    "apply (journal)": lambda t: ["apply", t.jobs.journal],
    "reject": lambda t: ["reject", t.jobs.received, "--reason", "no"],
    "cancel": lambda t: ["cancel", t.jobs.running],
    "heartbeat": lambda t: ["heartbeat", t.jobs.running, "--worker", "w1"],
    "replay": lambda t: ["replay", t.jobs.rejected],
    "recover": lambda t: ["recover"],
    "keygen": lambda t: ["keygen", "--force"],
    "trust": lambda t: ["trust", pubkey(t)],
    "allow": lambda t: ["allow", "--yes"],
    "attest": lambda t: ["attest", t.jobs.received],
    "schema": lambda t: ["schema", "receipt"],
    "candidates": lambda t: ["candidates", t.jobs.candidates],
    "candidates --diff": lambda t: ["candidates", t.jobs.candidates, "--diff", "1", "--against", "2"],
    "check": lambda t: ["check", t.jobs.received],
    "discard": lambda t: ["discard", t.jobs.invalid],
    "hosts": lambda t: ["hosts"],
    "hosts --probe": lambda t: ["hosts", "--probe"],
    "ship": lambda t: ["ship", t.jobs.queued, "--host", "here", "-q"],
    "ship --candidates": lambda t: ["ship", t.jobs.queued, "--host", "here", "--candidates", "2", "-q"],
    "worker --once": lambda t: ["worker", "--once"],
}


@pytest.fixture
def copy(template: Template, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Template:
    """A fresh copy of the template, its worker key as this test's."""
    root = tmp_path / "repo"
    shutil.copytree(template.root, root, symlinks=True)
    config_home = tmp_path / "xdg"
    shutil.copytree(template.config_home, config_home)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    carry_pins(template.root, root)
    return Template(root, config_home, template.jobs)


@pytest.fixture
def umask_002() -> Iterator[None]:
    old = os.umask(0o002)
    try:
        yield
    finally:
        os.umask(old)


def test_every_command_is_covered() -> None:
    from tui.cli.commands import main

    named = {name.split()[0] for name in COMMANDS}
    # `tui` is the board's (tests/tui/test_tui_missing_folders.py); `demo` makes a repository of its own;
    # `help` reads only the reference shipped in the package, never a repository; `mcp` and `serve`
    # are the board's and the CLI's calls served to other clients (tests/tui/clients/).
    assert set(main.list_commands(None)) - named == {"demo", "help", "mcp", "serve", "tui"}  # type: ignore[arg-type]


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("missing", FOLDERS)
def test_a_command_on_a_gen_folder_without_a_subfolder(
    copy: Template, umask_002: None, monkeypatch: pytest.MonkeyPatch, missing: str, command: str
) -> None:
    layout = Layout(copy.root)
    shutil.rmtree(layout.gen / missing)
    monkeypatch.chdir(copy.root)
    res = cli(*COMMANDS[command](copy), root=copy.root if command != "init" else None)
    assert res.exit_code in (0, 1, 2), res.output
    problems = [line for line in res.stderr.splitlines() if line.startswith("genjob: ")]
    assert len(problems) <= 1, res.stderr
    assert "Traceback" not in res.output
    assert group_or_other_writable(layout.gen) == []
    made = layout.gen / missing
    if made.exists():
        assert stat.S_IMODE(os.lstat(made).st_mode) & 0o022 == 0
