"""genjob's runner on a Python with a partial standard library: Debian's python3-minimal.

A real install of it, made without a container: Debian's own `python3.11` binary and the
files its packages `libpython3.11-minimal` and `python3.11-minimal` install (`dpkg -L`),
laid out under a prefix of the test's own (`<prefix>/usr/bin/python3.11` finds its
standard library at `<prefix>/usr/lib/python3.11`, as a relocated install does). Such a
Python lacks `json`, `tarfile`, `shutil`, `shlex` and `dataclasses`: the runner names
each when it is asked to run or probed, and runs once exactly those are added.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from corekit import cli
from shipkit import bwrap_argv, toml_str, write_config

import core.errors
import core.remote.rules
import core.remote.runner
from core.remote import preflight
from core.store.layout import Layout
from core.work.transport import CommandTransport, JobSpec, LocalTransport, Transport, run_job

pytestmark = pytest.mark.timeout(120)

DEBIAN_PYTHON = Path("/usr/bin/python3.11")
MINIMAL_PACKAGES = ("libpython3.11-minimal", "python3.11-minimal")
# What python3-minimal leaves out of what the runner imports (tempfile needs shutil).
LACKING = ["dataclasses", "json", "shlex", "shutil", "tarfile"]
FULL_STDLIB = DEBIAN_PYTHON.parents[1] / "lib/python3.11"


def package_files(package: str) -> list[Path]:
    listed = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True, check=True).stdout
    return [Path(line) for line in listed.splitlines() if line.startswith("/usr/") and Path(line).is_file()]


def install_minimal(prefix: Path, extra: tuple[str, ...] = ()) -> str:
    """python3-minimal under `prefix`, with the modules `extra` names taken from the full
    standard library; the path of its interpreter. The binary is copied (Python finds its
    prefix from where it is); the library's files are linked."""
    if not DEBIAN_PYTHON.is_file() or shutil.which("dpkg") is None:
        pytest.skip("needs Debian's python3.11 and dpkg to lay out python3-minimal")
    try:
        files = [f for package in MINIMAL_PACKAGES for f in package_files(package)]
    except subprocess.CalledProcessError:
        pytest.skip(f"{' and '.join(MINIMAL_PACKAGES)} are not installed")
    for source in files:
        target = prefix / source.relative_to("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if source == DEBIAN_PYTHON:
            shutil.copy2(source, target)
        else:
            target.symlink_to(source)
    for name in extra:
        package = FULL_STDLIB / name
        source = package if package.is_dir() else package.with_suffix(".py")
        (prefix / source.relative_to("/")).symlink_to(source)
    return str(prefix / DEBIAN_PYTHON.relative_to("/"))


@pytest.fixture(scope="module")
def minimal_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    return install_minimal(tmp_path_factory.mktemp("python3-minimal"))


def empty_job(generator: str = "true") -> JobSpec:
    doc = json.dumps({"instruction": "nothing", "allowed_paths": ["out.txt"]}).encode()
    return JobSpec(doc, "nothing", ["out.txt"], dict, generator, 30.0)


async def run_there(transport: Transport, tmp_path: Path, generator: str = "true") -> str | None:
    outcome, info = await run_job(transport, empty_job(generator), tmp_path / "out")
    if outcome.error is not None:
        return outcome.error
    assert info is not None and info.exit_code == 0
    return None


def lacks(modules: list[str]) -> str:
    return (
        f"lacks standard library modules genjob's runner needs: {', '.join(modules)} (a minimal "
        "install, such as Debian's python3-minimal, leaves them out): install the full python3 "
        "there, or set the host's `python` to one that has them"
    )


def probe_version(python: str) -> str:
    return subprocess.run(
        [python, "-I", "-S", "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


@pytest.mark.parametrize("kind", ["local", "command-bwrap"])
async def test_python3_minimal_is_named_with_all_it_lacks(
    minimal_python: str, tmp_path: Path, kind: str
) -> None:
    transport: Transport = (
        LocalTransport(minimal_python)
        if kind == "local"
        else CommandTransport(bwrap_argv(), python=minimal_python)
    )
    error = await run_there(transport, tmp_path)
    which = f"Python {probe_version(minimal_python)} at {minimal_python}"
    assert (
        error == f"the generator host's {minimal_python} cannot run genjob's runner: {which} {lacks(LACKING)}"
    )


async def test_a_python_that_lacks_one_module_is_told_that_one(tmp_path: Path) -> None:
    python = install_minimal(tmp_path / "prefix", ("dataclasses", "json", "shlex", "shutil"))
    error = await run_there(LocalTransport(python), tmp_path)
    assert error is not None and error.endswith(lacks(["tarfile"]))


async def test_the_runner_runs_on_python3_minimal_with_exactly_what_it_named(tmp_path: Path) -> None:
    """What the preflight names is all the runner needs beyond python3-minimal."""
    python = install_minimal(tmp_path / "prefix", tuple(LACKING))
    assert await run_there(LocalTransport(python), tmp_path, "echo done > out.txt") is None
    assert (tmp_path / "out/out.txt").read_text() == "done\n"


def test_hosts_probe_says_what_python3_minimal_lacks(repo: Layout, minimal_python: str) -> None:
    write_config(
        repo,
        f'[hosts.slim]\ntransport = "command"\ncommand = ["env"]\n'
        f'python = {toml_str(minimal_python)}\ngenerator = "true"\n',
    )
    shown = json.loads(cli("hosts", "--probe", "--host", "slim", "--json", root=repo.root).output)
    [host] = shown
    assert host["rtt"] is None
    assert host["last_error"]["reason"].endswith(lacks(LACKING))


def imported_modules(module: object) -> set[str]:
    """The top-level names of every module `module`'s source imports, anywhere in it."""
    tree = ast.parse(Path(str(getattr(module, "__file__", ""))).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found - {"__future__", "core"}


def test_the_preflight_checks_every_module_the_runner_imports() -> None:
    shipped = (core.remote.runner, core.remote.rules, core.errors)
    needed = set().union(*(imported_modules(m) for m in shipped))
    assert needed - set(preflight.PREFLIGHT_NEEDS) == {"sys"}, "sys is built in"


def test_the_preflights_names_stay_apart_from_the_runners() -> None:
    """The runner runs in the preflight's globals: no name of one may be the other's."""
    ours = {n for n in vars(preflight) if not n.startswith("__")}
    assert all(n.startswith(("preflight", "PREFLIGHT", "UNFIT", "sys")) for n in ours), ours
    shipped = set().union(*(set(vars(m)) for m in (core.remote.runner, core.remote.rules, core.errors)))
    assert ours & shipped <= {"sys"}
