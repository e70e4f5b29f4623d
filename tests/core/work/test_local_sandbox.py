"""The local transport's sandbox: a generator on this machine cannot reach the user's home,
SSH keys or worker key, write outside its workspace, or use the network, unless its host
allows the network; and where the sandbox cannot run, every view says so.

Real bwrap, real generators, real sockets and real cancels.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from checkkit import processes_with, unique_sleep
from corekit import cli, mint, set_config
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from shipkit import toml_str, write_config

from core.errors import BadInput
from core.review import sandbox
from core.review.host_sandbox import LocalSandbox
from core.store.config import load_config
from core.store.layout import Layout, user_config_dir
from core.work.fleet import fleet
from core.work.ship import ShipResult, ship

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(sandbox.bwrap_problem() is not None, reason="bwrap cannot run here"),
]

PROBE = """\
import json, os, socket, sys, time
home, key, repo, escape_ro, escape_tmp, port = sys.argv[1:7]
found = {}
def attempt(name, fn):
    try:
        fn()
        found[name] = "done"
    except Exception as exc:
        found[name] = type(exc).__name__
def connect():
    with socket.create_connection(("127.0.0.1", int(port)), timeout=5) as s:
        s.sendall(b"hello from the generator")
attempt("ssh_key", lambda: open(os.path.join(home, ".ssh", "id_ed25519")).read())
attempt("home", lambda: os.listdir(home))
attempt("worker_key", lambda: open(key, "rb").read())
attempt("tree", lambda: open(os.path.join(repo, "src", "app.py"), "a").write("tampered"))
attempt("read_only", lambda: open(escape_ro, "w").write("escaped"))
attempt("tmp", lambda: open(escape_tmp, "w").write("escaped"))
attempt("loopback", connect)
open("src/app.py", "w").write(json.dumps(found, sort_keys=True))
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home folder with an SSH key in it, as the user's."""
    folder = tmp_path / "home"
    (folder / ".ssh").mkdir(parents=True)
    (folder / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    monkeypatch.setenv("HOME", str(folder))
    return folder


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP port on this machine's loopback that counts who connects."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        yield server


def probe_host(tmp_path: Path, repo: Layout, home: Path, port: int, **settings: object) -> list[Path]:
    """Configure host `gen`: PROBE with the paths it tries; returns the two escape paths."""
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    script = tools / "probe.py"
    script.write_text(PROBE)
    escape_ro = tools / "escaped.txt"
    escape_tmp = Path("/tmp") / f"genjob-escaped-{os.getpid()}-{tmp_path.name}"
    key = user_config_dir() / "worker_ed25519"
    args = [str(home), str(key), str(repo.root), str(escape_ro), str(escape_tmp), str(port)]
    generator = " ".join([sys.executable, str(script), *args])
    lines = [
        "[hosts.gen]",
        'transport = "local"',
        f"generator = {toml_str(generator)}",
        f"read_only = [{toml_str(str(tools))}]",
        "timeout = 60",
    ]
    lines += [f"{name} = {json.dumps(value)}" for name, value in settings.items()]
    write_config(repo, "\n".join(lines) + "\n")
    return [escape_ro, escape_tmp]


async def ship_gen(repo: Layout, key: str, **kwargs: object) -> ShipResult:
    return await ship(repo, key, "gen", worker_id="tester", **kwargs)  # type: ignore[arg-type]


def accepted(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


async def test_a_generator_cannot_reach_keys_home_tree_or_network(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, home: Path, listener: socket.socket
) -> None:
    escapes = probe_host(tmp_path, repo, home, listener.getsockname()[1])
    assert (user_config_dir() / "worker_ed25519").exists(), "the key it tries is there"
    job = mint(repo)
    before = (repo.root / "src/app.py").read_bytes()
    res = await ship_gen(repo, job.key)
    assert res.status == "ok", res.reason
    found = json.loads((repo.out_dir(job.digest) / "src/app.py").read_bytes())
    assert found == {
        "ssh_key": "FileNotFoundError",
        "home": "FileNotFoundError",
        "worker_key": "FileNotFoundError",
        "tree": "FileNotFoundError",
        "read_only": "OSError",  # a read-only filesystem
        "tmp": "done",  # its own /tmp, in memory, gone with it
        "loopback": "ConnectionRefusedError",  # a network of its own, with nothing on it
    }
    assert (repo.root / "src/app.py").read_bytes() == before
    assert not any(p.exists() for p in escapes), "nothing written outside its workspace"
    assert not accepted(listener), "nothing reached this machine's loopback"


async def test_a_host_that_allows_the_network_reaches_it_and_nothing_more(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, home: Path, listener: socket.socket
) -> None:
    probe_host(tmp_path, repo, home, listener.getsockname()[1], network=True)
    job = mint(repo)
    res = await ship_gen(repo, job.key)
    assert res.status == "ok", res.reason
    found = json.loads((repo.out_dir(job.digest) / "src/app.py").read_bytes())
    assert found["loopback"] == "done" and accepted(listener)
    assert found["ssh_key"] == found["worker_key"] == found["tree"] == "FileNotFoundError"


async def test_a_cancel_leaves_no_process_of_the_sandbox(
    repo: Layout, signer: Ed25519PrivateKey, tmp_path: Path, private_tmp: Path
) -> None:
    marker = f"genjob-sandbox-sleeper-{os.getpid()}-{tmp_path.name}"
    sleeper = f"sh -c 'sleep 600 & exec -a {marker} sleep 600' & echo started; wait"
    write_config(repo, f'[hosts.gen]\ntransport = "local"\ngenerator = {toml_str(sleeper)}\n')
    job = mint(repo)
    cancel = asyncio.Event()

    def on_output(chunk: bytes) -> None:
        if b"started" in chunk:
            cancel.set()

    res = await ship_gen(repo, job.key, on_output=on_output, cancel=cancel)
    assert (res.status, res.reason) == ("aborted", "cancelled by the operator")
    assert not processes_with(marker)
    assert not list(private_tmp.glob("genjob-local-*")), "its workspace went with it"


async def test_a_process_the_generator_detached_is_gone_when_the_ship_returns(
    repo: Layout, signer: Ed25519PrivateKey
) -> None:
    marker = unique_sleep()
    detach = f"setsid sleep {marker} > /dev/null 2>&1 & echo '# seen' >> src/app.py"
    write_config(repo, f'[hosts.gen]\ntransport = "local"\ngenerator = {toml_str(detach)}\n')
    job = mint(repo)
    res = await ship_gen(repo, job.key)
    assert res.status == "ok", res.reason
    assert processes_with(marker) == []


def test_read_only_paths_that_would_show_the_home_or_keys_refuse_the_run(
    repo: Layout, signer: Ed25519PrivateKey, home: Path
) -> None:
    for path in ("~", "~/.ssh", str(user_config_dir())):
        block = f'[hosts.gen]\ntransport = "local"\ngenerator = "true"\nread_only = [{toml_str(path)}]\n'
        write_config(repo, block)
        job = mint(repo, f"read {path}")
        shipped = cli("ship", job.key, root=repo.root)
        assert shipped.exit_code == 1
        assert (
            "did not start" in shipped.output
            and f"read-only path {os.path.expanduser(path)}" in shipped.output
        )


def test_hosts_and_ship_say_whether_a_local_host_is_sandboxed(
    repo: Layout, signer: Ed25519PrivateKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(
        repo,
        '[hosts.boxed]\ntransport = "local"\ngenerator = "python3 -m core.remote.demo_generator"\n\n'
        '[hosts.open]\ntransport = "local"\nsandbox = "none"\n'
        'generator = "python3 -m core.remote.demo_generator"\n',
    )
    listed = cli("hosts", root=repo.root).output
    assert "sandboxed (bwrap): no network, no unix sockets, only its workspace writable" in listed
    assert 'UNSANDBOXED (sandbox = "none")' in listed
    views = {v.name: v for v in fleet(repo, load_config(repo.config))}
    assert (views["boxed"].sandboxed, views["open"].sandboxed) == (True, False)
    job = mint(repo)
    shipped = cli("ship", job.key, "--host", "open", root=repo.root)
    assert shipped.exit_code == 0, shipped.output + shipped.stderr
    assert 'note: open ran UNSANDBOXED (sandbox = "none")' in shipped.output


def test_without_bwrap_auto_runs_unsandboxed_and_says_so_and_bwrap_refuses(
    repo: Layout, signer: Ed25519PrivateKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox, "bwrap_problem", lambda: "bwrap (bubblewrap) is not installed")
    write_config(
        repo,
        '[hosts.auto]\ntransport = "local"\ngenerator = "python3 -m core.remote.demo_generator"\n\n'
        '[hosts.strict]\ntransport = "local"\nsandbox = "bwrap"\n'
        'generator = "python3 -m core.remote.demo_generator"\n',
    )
    assert LocalSandbox("auto").describe().startswith("UNSANDBOXED: bwrap (bubblewrap) is not installed")
    job = mint(repo)
    shipped = cli("ship", job.key, "--host", "auto", root=repo.root)
    assert shipped.exit_code == 0, shipped.output + shipped.stderr
    assert "note: auto ran UNSANDBOXED: bwrap (bubblewrap) is not installed" in shipped.output
    other = mint(repo, "another")
    refused = cli("ship", other.key, "--host", "strict", root=repo.root)
    assert refused.exit_code == 1
    assert 'sandbox = "bwrap": bwrap (bubblewrap) is not installed' in refused.output
    assert not (repo.root / "src/app.py").read_bytes().endswith(b"another\n")


@pytest.mark.parametrize(
    ("setting", "fault"),
    [
        (
            'transport = "ssh"\naddress = "a@b"\nidentity = "k"\nsandbox = "none"',
            'for transport = "local" hosts',
        ),
        ('transport = "local"\nread_only = ["tools"]', "'tools' is not an absolute path"),
        ('transport = "local"\nsandbox = "firejail"', "sandbox"),
    ],
)
def test_a_bad_sandbox_setting_names_the_file_and_the_fault(repo: Layout, setting: str, fault: str) -> None:
    set_config(repo, f'[hosts.gen]\ngenerator = "true"\n{setting}\n')
    with pytest.raises(BadInput, match=str(repo.config)) as err:
        load_config(repo.config)
    assert fault in str(err.value)


def local_host(repo: Layout, generator: str, read_only: Path) -> None:
    write_config(
        repo,
        f'[hosts.gen]\ntransport = "local"\nsandbox = "bwrap"\ngenerator = {toml_str(generator)}\n'
        f"read_only = [{toml_str(str(read_only))}]\ntimeout = 60\n",
    )


@pytest.mark.parametrize("where", ["last", "middle"])
def test_a_read_only_path_that_leads_into_ssh_through_a_link_refuses_the_run(
    repo: Layout, signer: Ed25519PrivateKey, home: Path, tmp_path: Path, where: str
) -> None:
    """Judged as what it resolves to, whichever component is the link."""
    if where == "last":
        (tmp_path / "keys").symlink_to(home / ".ssh")
        given = tmp_path / "keys"
    else:
        (tmp_path / "tools").symlink_to(home)
        given = tmp_path / "tools" / ".ssh"
    local_host(repo, "cat id_ed25519 > src/app.py", given)
    job = mint(repo)
    shipped = cli("ship", job.key, root=repo.root)
    # The host cannot start the run: its fault, so the job is back in the queue.
    assert shipped.exit_code == 1 and "did not start" in shipped.output
    assert f".gen/config.toml: [hosts.gen]: read-only path {given} (it leads to {home / '.ssh'})" in (
        shipped.output.replace("\n", " ")
    )
    assert "would show ~/.ssh" in shipped.output
    assert "PRIVATE KEY" not in (repo.root / "src/app.py").read_text()


async def test_a_read_only_folder_swapped_for_a_link_to_ssh_after_it_was_judged_shows_what_was_judged(
    repo: Layout,
    signer: Ed25519PrivateKey,
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "tool.txt").write_text("the tool that was judged\n")
    local_host(repo, f"cat {tools}/* > src/app.py", tools)
    job = mint(repo)
    start = sandbox.start

    async def swapped_then_started(how: sandbox.Launch, **kwargs: int) -> sandbox.Started:
        tools.rename(tmp_path / "tools-judged")
        tools.symlink_to(home / ".ssh")
        return await start(how, **kwargs)

    monkeypatch.setattr(sandbox, "start", swapped_then_started)
    res = await ship_gen(repo, job.key)
    assert res.status == "ok", res.reason
    got = (repo.out_dir(job.digest) / "src/app.py").read_text()
    assert "PRIVATE KEY" not in got
    assert got == "the tool that was judged\n"


def test_a_local_runs_pythonpath_is_the_folder_that_holds_core() -> None:
    from core.work.transport.local import local_env

    folder = Path(local_env(sys.executable)["PYTHONPATH"])
    assert (folder / "core" / "__init__.py").is_file() and (
        folder / "core" / "remote" / "runner.py"
    ).is_file()
