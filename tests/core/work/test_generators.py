"""The generators genjob ships with: the stand-in says what it is, and `tidy` edits for real.

`tidy` is a real, offline generator (ruff as a codemod host): a round trip through it
changes code the way ruff does, with no model, key or network.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from corekit import cli, mint, tree_state
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import core
from core.review.apply_job import apply_job
from core.store.config import load_config
from core.store.layout import Layout
from core.work.fleet import fleet
from core.work.ship import ship

MESSY = b"import sys, os\nimport json\ndef total( items ):\n  return sum( json.loads(items) )\n"


async def test_tidy_is_a_real_round_trip(repo: Layout, signer: Ed25519PrivateKey) -> None:
    (repo.root / "src/messy.py").write_bytes(MESSY)
    (repo.root / "docs/guide.md").write_bytes(b"Not python:   left  as is.\n")
    job = mint(repo, "Tidy these files.", ["src/messy.py", "docs/guide.md"])
    res = await ship(repo, job.key, "tidy")
    assert res.status == "ok", res.reason
    apply_job(repo, job.key)
    tidied = (repo.root / "src/messy.py").read_text()
    assert tidied == "import json\n\n\ndef total(items):\n    return sum(json.loads(items))\n"
    assert (repo.root / "docs/guide.md").read_bytes() == b"Not python:   left  as is.\n"
    ruff = [sys.executable, "-m", "ruff", "format", "--no-cache", "-"]
    expected = subprocess.run(ruff, input=tidied, capture_output=True, text=True).stdout
    assert tidied == expected


# What a run of `tidy` and `genjob hosts` say where ruff is not installed.
INSTALL_RUFF = "pip install ruff there, or uv tool install genjob --with ruff"


@pytest.fixture(scope="session")
def without_ruff(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """genjob installed as a user installs it (not editable, its runtime dependencies only,
    as the lock file pins them, from uv's cache) into an environment of its own, whose
    Python has no ruff: its bin folder. The lock's own URLs need no index in the cache."""
    venv = tmp_path_factory.mktemp("without-ruff") / "venv"
    uv = shutil.which("uv")
    assert uv is not None, "the suite runs under uv"
    project = Path(core.__file__).resolve().parents[1]
    install = [uv, "sync", "-q", "--frozen", "--no-dev", "--no-editable", "--offline"]
    install += ["--project", str(project), "--python", sys.executable]
    subprocess.run(install, check=True, env={**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)})
    python = venv / "bin" / "python"
    assert subprocess.run([python, "-c", "import ruff"], capture_output=True).returncode != 0
    return venv / "bin"


@pytest.mark.xdist_group("without-ruff")
def test_without_ruff_genjob_hosts_says_so_for_tidy_before_any_run(repo: Layout, without_ruff: Path) -> None:
    listed = subprocess.run(
        [without_ruff / "genjob", "--root", str(repo.root), "hosts"], capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    python3 = without_ruff / "python3"
    said = [line.strip() for line in listed.stdout.splitlines() if "needs" in line]
    assert said == [
        f"needs ruff, not installed for {python3}: `pip install ruff` there, "
        "or `uv tool install genjob --with ruff`"
    ], listed.stdout


@pytest.mark.xdist_group("without-ruff")
def test_without_ruff_a_tidy_run_fails_with_one_line_saying_how_to_install_it(
    repo: Layout, signer: Ed25519PrivateKey, without_ruff: Path
) -> None:
    (repo.root / "src/messy.py").write_bytes(MESSY)
    job = mint(repo, "Tidy this file.", ["src/messy.py"])
    before = tree_state(repo.root / "src")
    shipped = subprocess.run(
        [without_ruff / "genjob", "--root", str(repo.root), "ship", job.key, "--host", "tidy"],
        capture_output=True,
        text=True,
    )
    assert shipped.returncode != 0, shipped.stdout
    line = f"tidy needs ruff, not installed for {without_ruff / 'python3'}: {INSTALL_RUFF}"
    assert (shipped.stdout + shipped.stderr).count(line) == 1, (shipped.stdout, shipped.stderr)
    assert tree_state(repo.root / "src") == before


def test_with_ruff_installed_no_host_of_the_default_config_lacks_anything(repo: Layout) -> None:
    assert [(v.name, v.missing) for v in fleet(repo, load_config(repo.config))] == [
        ("local", None),
        ("tidy", None),
    ]
    listed = cli("hosts", root=repo.root)
    assert listed.exit_code == 0 and "needs" not in listed.stdout, listed.stdout


def test_a_local_host_running_a_module_its_python_lacks_is_named_with_the_module(repo: Layout) -> None:
    config = repo.config.read_text().replace(
        'generator = "python3 -m core.remote.demo_generator"',
        'generator = "python3 -m core.remote.demo_generator && python3 -m genjob_no_such_tool {paths}"',
    )
    repo.config.write_text(config)
    assert cli("allow", "--yes", root=repo.root).exit_code == 0
    views = {v.name: v.missing for v in fleet(repo, load_config(repo.config))}
    python3 = shutil.which("python3", path=os.path.dirname(sys.executable))
    assert views["local"] == (
        f"needs genjob_no_such_tool, not installed for {python3}: `pip install genjob_no_such_tool` "
        "there, or `uv tool install genjob --with genjob_no_such_tool`"
    )
    assert views["tidy"] is None


def test_init_and_ship_say_the_local_host_is_a_stand_in(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path
) -> None:
    assert load_config(repo.config).hosts["local"].stand_in
    assert not load_config(repo.config).hosts["tidy"].stand_in
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    out = cli("init", str(fresh)).stdout
    assert "`local` is a stand-in that only appends a comment" in out and "`tidy` runs ruff" in out
    job = mint(repo, "Anything.", ["src/app.py"])
    shipped = cli("ship", job.key, "-q", root=repo.root)
    assert shipped.exit_code == 0, shipped.stderr
    assert "runs genjob's stand-in generator, which only appends a comment" in shipped.stdout


def test_demo_no_tui_prints_commands_that_work_as_printed(tmp_path: Path) -> None:
    genjob = Path(sys.executable).parent / "genjob"
    out = subprocess.run(
        [str(genjob), "demo", str(tmp_path / "demo"), "--no-tui"], capture_output=True, text=True, check=True
    ).stdout
    listed = next(line for line in out.splitlines() if line.startswith("or list it:"))
    command = listed.removeprefix("or list it:").strip()
    proc = subprocess.run(["bash", "-c", command], cwd="/", capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "QUEUED" in proc.stdout and "RECEIVED" in proc.stdout
    holder = re.search(r"lease holder \(pid (\d+)\)", out)
    if holder:
        os.kill(int(holder.group(1)), signal.SIGTERM)


SHADOW = b"open('src/app.py', 'w').write('the job ran its own code as the generator\\n')\n"


async def test_a_job_naming_the_generators_own_module_cannot_run_its_own_code(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    """`python3 -m core.remote.demo_generator` (or `-m ruff`) runs in a workspace holding the
    job's files: a job over `core/__init__.py` and `core/remote/demo_generator.py` (a cloned
    repository's, say) must not stand in for the generator's own module."""
    for rel in ("core/__init__.py", "core/remote/demo_generator.py", "ruff/__init__.py", "ruff/__main__.py"):
        (repo.root / rel).parent.mkdir(exist_ok=True)
        (repo.root / rel).write_bytes(SHADOW)
    paths = ["core/__init__.py", "core/remote/demo_generator.py", "src/app.py"]
    for host in ("local", "tidy"):
        job = mint(
            repo,
            f"Edit these ({host}).",
            paths + (["ruff/__init__.py", "ruff/__main__.py"] if host == "tidy" else []),
        )
        res = await ship(repo, job.key, host)
        assert res.status == "ok", res.reason
        out = repo.out_dir(job.digest) / "src/app.py"
        assert b"the job ran its own code" not in out.read_bytes()


LONG = b'def f(alpha_argument, beta_argument, gamma_argument, delta_argument, epsilon_arg):\n    return "x"\n'
SETTINGS = {
    "pyproject.toml": (
        '[tool.ruff]\nline-length = 79\ncache-dir = "/elsewhere"\n'
        '[tool.ruff.format]\nquote-style = "single"\n'
    ),
    "ruff.toml": 'line-length = 79\n[format]\nquote-style = "single"\n',
    ".ruff.toml": 'line-length = 79\nformat = { quote-style = "single" }\n',
}


@pytest.mark.parametrize("name", sorted(SETTINGS))
async def test_tidy_formats_by_the_repositorys_own_ruff_settings(
    repo: Layout, signer: Ed25519PrivateKey, name: str
) -> None:
    (repo.root / name).write_text(SETTINGS[name])
    (repo.root / "src/long.py").write_bytes(LONG)
    job = mint(repo, "Tidy it.", ["src/long.py"])
    res = await ship(repo, job.key, "tidy")
    assert res.status == "ok", res.reason
    apply_job(repo, job.key)
    tidied = (repo.root / "src/long.py").read_text()
    assert "'x'" in tidied and max(len(line) for line in tidied.splitlines()) <= 79
    ruff = [sys.executable, "-m", "ruff", "format", "--no-cache", "--stdin-filename", "src/long.py", "-"]
    here = subprocess.run(ruff, input=LONG.decode(), capture_output=True, text=True, cwd=repo.root).stdout
    assert tidied == here, "tidy formats the job's file as ruff does in the repository itself"


async def test_tidy_with_a_ruff_settings_file_that_is_not_toml_fails_naming_it(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    (repo.root / "ruff.toml").write_text("line-length = = 79\n")
    assert load_config(repo.config).hosts["local"].generator == "python3 -m core.remote.demo_generator"
    job = mint(repo, "Tidy it.")
    res = await ship(repo, job.key, "tidy")
    assert res.status == "rejected" and res.reason == "the generator exited with status 2"
    log = (repo.logs / job.key / "attempt-1.log").read_text()
    assert re.search(r"genjob: .*ruff\.toml: not valid TOML .*tidy cannot pass its ruff settings", log)
