"""Each command loads what it uses: the real `genjob` program, run as a process, on a
small queue, with Python reporting every module it imports (`-X importtime`).

`ls`, `show` and `verify` never load the board (textual, rich) or the SSH stack
(asyncssh); a plain `ls` loads neither click nor pydantic nor cryptography either, and
says exactly what `ls` through click says.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from corekit import cli, mint, receive, set_config
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.store.layout import Layout
from core.store.pins import pins_file
from tui.cli.plain import plain_board, plain_ls

GENJOB = Path(sys.executable).parent / "genjob"
UI_AND_SSH = {"textual", "rich", "asyncssh"}


def run_genjob(layout: Layout, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """`genjob ARGS` in the repository; its result and the top-level packages it imported."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", str(GENJOB), *args],
        cwd=layout.root,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    loaded = set()
    kept = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:"):
            name = line.rsplit("|", 1)[1].strip()
            loaded.add(name.split(".")[0])
        else:
            kept.append(line)
    proc.stderr = "\n".join(kept)
    assert loaded, "importtime reported nothing"
    return proc, loaded


@pytest.fixture
def small_queue(repo: Layout, signer: Ed25519PrivateKey) -> tuple[Layout, str, str]:
    """A queued job and a received one whose signed receipt verifies; config.toml and the
    operator's pins were written a minute ago, and listed once since (its policy is in the snapshot index)."""
    queued = mint(repo, "Queued, waiting.", ["README.md"])
    received = mint(repo, "Received, signed.", ["src/app.py"])
    receive(repo, received.key, {"src/app.py": b"def main():\n    return 2\n"}, signer)
    then = time.time() - 60
    os.utime(repo.config, (then, then))
    os.utime(pins_file(repo.root), (then, then))
    assert run_genjob(repo, "ls")[0].returncode == 0
    return repo, queued.key, received.key


def test_plain_ls_loads_no_click_pydantic_cryptography_ui_or_ssh(
    small_queue: tuple[Layout, str, str],
) -> None:
    layout, _, received = small_queue
    heavy = UI_AND_SSH | {"click", "pydantic", "cryptography"}
    for args in (["ls"], ["ls", "--json"], ["ls", "--state", "received"], ["--root", str(layout.root), "ls"]):
        proc, loaded = run_genjob(layout, *args)
        assert proc.returncode == 0, proc.stderr
        assert received in proc.stdout
        assert not loaded & heavy, (args, loaded & heavy)
        assert "core" in loaded  # the listing engine did run


def test_plain_ls_says_what_ls_through_click_says(small_queue: tuple[Layout, str, str]) -> None:
    layout, queued, received = small_queue
    for args in (["ls"], ["ls", "--json"], ["ls", "--state", "QUEUED", "--state=received"]):
        proc, _ = run_genjob(layout, *args)
        through_click = cli(*args, root=layout.root)
        assert without_ages(proc.stdout) == without_ages(through_click.stdout)
        assert proc.stderr == through_click.stderr
    assert queued in proc.stdout and received in proc.stdout


def without_ages(listing: str) -> str:
    """The listing with each row's age blanked: the two runs may fall on either side of a
    second."""
    return re.sub(r"(?m)^(\S{32}  \S+ +) *\d+[smhd] ", lambda m: m.group(1).rstrip() + " AGE ", listing)


def test_ls_in_other_forms_goes_through_click(small_queue: tuple[Layout, str, str]) -> None:
    layout, _, _ = small_queue
    proc, loaded = run_genjob(layout, "ls", "--help")
    assert proc.returncode == 0 and "--state" in proc.stdout and "click" in loaded
    proc, loaded = run_genjob(layout, "ls", "--state", "bogus")
    assert proc.returncode == 2 and "'bogus' is not one of" in proc.stderr and "click" in loaded


def test_show_and_verify_load_neither_the_board_nor_ssh(small_queue: tuple[Layout, str, str]) -> None:
    layout, queued, received = small_queue
    for args, code in (
        (["show", received], 0),
        (["show", queued, "--json"], 0),
        (["verify", received], 0),
        (["verify", received, "--json"], 0),
    ):
        proc, loaded = run_genjob(layout, *args)
        assert proc.returncode == code, proc.stderr
        assert received in proc.stdout or queued in proc.stdout
        assert not loaded & UI_AND_SSH, (args, loaded & UI_AND_SSH)
    proc, _ = run_genjob(layout, "verify", received)
    assert "apply may run" in proc.stdout


def test_a_plain_ls_into_a_closed_pipe_stops_quietly(small_queue: tuple[Layout, str, str]) -> None:
    layout, _, _ = small_queue
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write now fails with EPIPE, as `genjob ls | head` can
    try:
        proc = subprocess.run([str(GENJOB), "ls"], cwd=layout.root, stdout=write_end, stderr=subprocess.PIPE)
    finally:
        os.close(write_end)
    assert proc.returncode == 1
    assert proc.stderr == b""


def test_plain_ls_accepts_only_what_click_would_take_as_is(tmp_path: Path) -> None:
    a_file = tmp_path / "f"
    a_file.write_text("")
    assert plain_ls(["ls"]) == (None, [], False)
    assert plain_ls(["ls", "--json", "--state", "stale", "--state=QUEUED"]) == (
        None,
        ["stale", "QUEUED"],
        True,
    )
    assert plain_ls(["--root", str(tmp_path), "ls"]) == (tmp_path, [], False)
    assert plain_ls([f"--root={tmp_path}", "ls", "--json"]) == (tmp_path, [], True)
    for argv in (
        [],
        ["show"],
        ["ls", "--help"],
        ["ls", "-h"],
        ["ls", "--state"],
        ["ls", "--state", "nope"],
        ["ls", "--jso"],
        ["ls", "extra"],
        ["--root"],
        ["--root", "ls"],
        ["--root=", "ls"],
        ["--root", str(a_file), "ls"],
        ["--rooted", "x", "ls"],
        ["--help", "ls"],
    ):
        assert plain_ls(argv) is None, argv


def test_plain_board_accepts_only_what_click_would_take_as_is(tmp_path: Path) -> None:
    a_file = tmp_path / "f"
    a_file.write_text("")
    assert plain_board(["tui"]) == (None, False)
    assert plain_board(["tui", "--readonly"]) == (None, True)
    assert plain_board(["--root", str(tmp_path), "tui"]) == (tmp_path, False)
    assert plain_board([f"--root={tmp_path}", "tui", "--readonly"]) == (tmp_path, True)
    for argv in (
        [],
        ["ls"],
        ["tui", "--help"],
        ["tui", "--readonly", "--readonly"],
        ["tui", "--read"],
        ["tui", "extra"],
        ["--readonly", "tui"],
        ["--root", "tui"],
        ["--root=", "tui"],
        ["--root", str(a_file), "tui"],
        ["demo"],
    ):
        assert plain_board(argv) is None, argv


def test_a_plain_tui_outside_a_repository_says_what_click_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`genjob tui` is opened without click; its refusals are the same line and exit code."""
    elsewhere = tmp_path / "no-repo"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # where the in-process click run looks, as the program does
    for args in (["tui"], ["--root", str(elsewhere), "tui", "--readonly"]):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", str(GENJOB), *args],
            cwd=elsewhere,
            capture_output=True,
            text=True,
        )
        lines = proc.stderr.splitlines()
        loaded = {
            line.rsplit("|", 1)[1].strip().split(".")[0] for line in lines if line.startswith("import time:")
        }
        said = "".join(f"{line}\n" for line in lines if not line.startswith("import time:"))
        through_click = cli(*args)
        assert "click" not in loaded and "textual" not in loaded, args
        assert "no .gen/" in said, said
        assert (proc.returncode, said) == (through_click.exit_code, through_click.stderr), args


def loaded_by(code: str, cwd: Path) -> tuple[str, set[str]]:
    """What a fresh interpreter prints running `code`, and the top-level packages it imported."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], cwd=cwd, capture_output=True, text=True, check=True
    )
    names = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    return proc.stdout, names


def test_the_board_loads_no_pydantic_cryptography_or_ssh_before_its_first_frame(
    small_queue: tuple[Layout, str, str],
) -> None:
    layout, _, _ = small_queue
    _, loaded = loaded_by("import tui.app", layout.root)
    assert "textual" in loaded
    assert not loaded & {"pydantic", "cryptography", "asyncssh", "click"}, loaded


def test_a_scan_gives_its_first_rows_before_reading_a_changed_config(
    small_queue: tuple[Layout, str, str],
) -> None:
    """The policy is read after the rows: a config.toml just written (so not in the
    index) costs the board's names and first rows nothing, and the policy still follows it."""
    layout, _, _ = small_queue
    text = layout.config.read_text()
    assert "\nrequire_signature = true\n" in text
    set_config(layout, text.replace("\nrequire_signature = true\n", "\nrequire_signature = false\n"))
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from core.store.layout import Layout\n"
        "from core.read.board_view import board_listing\n"
        "from core.read.snapshot import read_policy, refresh\n"
        f"layout = Layout(Path({str(layout.root)!r}))\n"
        "listing = board_listing(str(layout.gen))\n"
        "first = refresh(layout, listing.operators)\n"
        "print(len(listing.where), len(first), 'pydantic' in sys.modules)\n"
        "policy, _ = read_policy(layout)\n"
        "print(policy.signature_required, 'pydantic' in sys.modules)\n"
    )
    out, _ = loaded_by(code, layout.root)
    assert out.split("\n")[:2] == ["2 1 False", "False True"], out


def test_a_ship_of_one_loads_none_of_the_candidates_machinery(small_queue: tuple[Layout, str, str]) -> None:
    """A job shipped once asks how many candidates to run, and loads nothing else of them."""
    layout, queued, _ = small_queue
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", str(GENJOB), "ship", queued, "-q"],
        cwd=layout.root,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{queued}: ok on local" in proc.stdout
    loaded = {
        line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")
    }
    assert "core.work.ship" in loaded
    assert not loaded & {"core.review.candidates", "core.work.ship_candidates"}, loaded & {
        "core.review.candidates",
        "core.work.ship_candidates",
    }
