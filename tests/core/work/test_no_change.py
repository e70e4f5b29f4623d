"""Nothing changed is not success: a generator that exits 0 and changes nothing gets an
`ok` receipt flagged wherever it is shown, and `[policy] refuse_no_change` rejects it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from corekit import cli, mint
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from rich.console import Console
from shipkit import host_block, write_config

from core.read.inspect_job import job_detail
from core.read.preflight import preflight
from core.store.layout import Layout
from core.work.ship import ship
from tui.render import preflight_text, verification_text

pytestmark = pytest.mark.timeout(120)

NOTHING = "nothing changed: the generator exited 0 and every output equals its input"


def hosts(layout: Layout, tmp: Path, refuse: bool = False) -> None:
    """`idle` exits 0 touching nothing; `same` rewrites each file with its own bytes;
    `edits` changes src/app.py only."""
    same = tmp / "same.py"
    same.write_text(
        "import sys\nfor p in sys.argv[1:]:\n    d = open(p, 'rb').read()\n    open(p, 'wb').write(d)\n"
    )
    edits = tmp / "edits.py"
    edits.write_text("open('src/app.py', 'a').write('# edited\\n')\n")
    write_config(
        layout,
        host_block("idle", None, "true"),
        host_block("same", None, f"python3 {same} {{paths}}"),
        host_block("edits", None, f"python3 {edits}"),
    )
    if refuse:
        text = layout.config.read_text().replace("[policy]\n", "[policy]\nrefuse_no_change = true\n", 1)
        layout.config.write_text(text)


def render(renderable: object) -> str:
    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


@pytest.mark.parametrize("host", ["idle", "same"])
def test_a_run_that_changed_nothing_is_flagged_by_ship_verify_and_show(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, host: str
) -> None:
    hosts(repo, tmp_path)
    job = mint(repo, "Change it.", ["src/app.py", "src/util.py"])
    shipped = cli("ship", job.key, "--host", host, "-q", root=repo.root)
    assert f"{job.key}: ok on {host}" in shipped.stdout, shipped.output
    assert f"{job.key}: {NOTHING}" in shipped.stdout
    verified = cli("verify", job.key, root=repo.root)
    assert f"note: {NOTHING}" in verified.stdout
    data = json.loads(cli("show", job.key, "--json", root=repo.root).stdout)
    assert data["verification"]["unchanged"] is True
    assert NOTHING in cli("show", job.key, root=repo.root).stdout


def test_a_run_that_changed_one_file_is_not_flagged(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    hosts(repo, tmp_path)
    job = mint(repo, "Change it.", ["src/app.py", "src/util.py"])
    shipped = cli("ship", job.key, "--host", "edits", "-q", root=repo.root)
    assert f"{job.key}: ok on edits" in shipped.stdout and "nothing changed" not in shipped.stdout
    assert (
        json.loads(cli("show", job.key, "--json", root=repo.root).stdout)["verification"]["unchanged"]
        is False
    )


async def test_a_new_file_the_generator_did_not_make_is_nothing_changed(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    hosts(repo, tmp_path)
    job = mint(repo, "Make it.", [], ["src/made.py"])
    res = await ship(repo, job.key, "idle")
    assert res.status == "ok" and res.unchanged


def test_the_boards_detail_and_preflight_say_nothing_changed(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    hosts(repo, tmp_path)
    job = mint(repo, "Change it.")
    assert cli("ship", job.key, "--host", "idle", "-q", root=repo.root).exit_code == 0
    detail = job_detail(repo, job.key)
    assert NOTHING in render(verification_text(detail.verification, True))
    assert NOTHING in render(preflight_text(preflight(repo, detail)))


def test_refuse_no_change_rejects_the_run_with_the_reason(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    hosts(repo, tmp_path, refuse=True)
    job = mint(repo, "Change it.")
    shipped = cli("ship", job.key, "--host", "idle", "-q", root=repo.root)
    assert shipped.exit_code == 1
    assert f"{job.key}: rejected ({NOTHING} (policy.refuse_no_change)) on idle" in shipped.stdout
    data = json.loads(cli("show", job.key, "--json", root=repo.root).stdout)
    assert data["state"] == "FAILED"
    assert json.loads(repo.receipt(job.key).read_bytes())["status"] == "rejected"
    assert any(NOTHING in json.dumps(r) for r in data["attempt_records"])
    edited = mint(repo, "Change it too.", ["src/app.py", "src/util.py"])
    assert cli("ship", edited.key, "--host", "edits", "-q", root=repo.root).exit_code == 0


def test_candidates_that_changed_nothing_are_flagged(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    hosts(repo, tmp_path)
    job = mint(repo, "Change it.")
    shipped = cli("ship", job.key, "--host", "idle", "--candidates", "2", "-q", root=repo.root)
    assert shipped.stdout.count("ok, but nothing changed on idle") == 2, shipped.output
