"""The sandbox: real bwrap, real processes, real kills.

What a confined command can see, read, write and reach, and that nothing it started is
left when it ends, times out or is stopped.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from checkkit import processes_left, processes_with, unique_sleep

from core.review import sandbox
from core.review.sandbox import Confinement, Overlay, SandboxError, launch, run
from core.store import procfs
from core.store.signing import keygen

pytestmark = pytest.mark.skipif(sandbox.tools().bwrap is None, reason="bwrap is not installed")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home folder holding an SSH key, set as $HOME."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")
    (home / "notes.txt").write_text("private notes\n")
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def box(tmp_path: Path) -> Path:
    folder = tmp_path / "box"
    folder.mkdir()
    return folder


def sh(folder: Path | Overlay, script: str, **kw: object) -> sandbox.Finished:
    spec = Confinement(folder, **kw)  # type: ignore[arg-type]
    return asyncio.run(run(launch(spec, ["/bin/sh", "-c", script]), 60))


def out(finished: sandbox.Finished) -> str:
    return finished.tail.decode()


def test_the_command_runs_in_its_folder_with_python_and_a_clean_environment(
    box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GENJOB_TEST_SECRET", "leaked")
    done = sh(box, 'pwd; echo "[$GENJOB_TEST_SECRET]"; echo "$HOME"; python3 -c "print(6 * 7)"; touch made')
    assert done.exit_code == 0, out(done)
    assert out(done).splitlines() == [str(box), "[]", sandbox.SANDBOX_HOME, "42"]
    assert (box / "made").exists()
    assert done.sandboxed


def test_only_the_folder_is_writable(box: Path) -> None:
    prefix = Path(sys.prefix)
    script = f"""
        for target in /usr/genjob-x /etc/genjob-x {prefix}/genjob-x /genjob-x; do
            if touch "$target" 2>/dev/null; then echo "wrote $target"; fi
        done
        mount -o remount,rw,bind /usr 2>/dev/null && echo remounted
        touch /tmp/in-memory && echo tmp-ok
    """
    done = sh(box, script)
    assert "wrote" not in out(done) and "remounted" not in out(done), out(done)
    assert "tmp-ok" in out(done)
    assert not (prefix / "genjob-x").exists()


def test_home_ssh_keys_worker_key_and_other_files_are_not_visible(
    box: Path, home: Path, tmp_path: Path
) -> None:
    worker_pub = keygen()
    worker_key = worker_pub.with_suffix("")
    (tmp_path / "beside.txt").write_text("next to the folder\n")
    targets = [home / ".ssh" / "id_ed25519", home / "notes.txt", worker_key, tmp_path / "beside.txt"]
    script = "".join(f'cat "{t}" 2>/dev/null && echo "READ {t}"\n' for t in targets)
    script += f'ls "{home}" 2>/dev/null && echo LISTED-HOME\n'
    done = sh(box, script)
    assert "READ" not in out(done) and "LISTED" not in out(done), out(done)
    assert "secret" not in out(done)


def test_no_network_not_even_loopback(box: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        server.setblocking(False)
        port = server.getsockname()[1]
        code = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
            "    print('CONNECTED')\n"
            "except OSError as exc:\n"
            "    print('refused', exc)\n"
        )
        done = sh(box, f'python3 -c "{code}"')
        assert "refused" in out(done), out(done)
        with pytest.raises(BlockingIOError):
            server.accept()


def test_the_network_can_be_shared_when_asked(box: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        code = (
            f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('CONNECTED')"
        )
        done = sh(box, f'python3 -c "{code}"', network=True)
        assert "CONNECTED" in out(done), out(done)


@pytest.mark.parametrize("kind", ["bwrap", "none"])
def test_a_hanging_command_is_killed_at_its_timeout_with_no_process_left(box: Path, kind: str) -> None:
    marker = unique_sleep()
    # A background child, a grandchild in a group of its own, and the waiting parent.
    script = f"sleep {marker} & (set -m; sleep {marker} &) ; sleep {marker}"
    spec = Confinement(box, kind=kind)  # type: ignore[arg-type]
    done = asyncio.run(run(launch(spec, ["/bin/sh", "-c", script]), 1.0))
    assert done.timed_out and done.exit_code is None and not done.passed
    assert processes_left(marker) == []


def test_a_detached_process_dies_with_the_sandbox(box: Path) -> None:
    """Gone by the time `run` returns: bwrap exits before its init has emptied the PID
    namespace, and `run` waits for that too."""
    marker = unique_sleep()
    done = sh(box, f"setsid sleep {marker} > /dev/null 2>&1 & echo started")
    assert done.exit_code == 0
    assert processes_with(marker) == []


def test_an_unreaped_init_counts_as_gone() -> None:
    """A sandbox's init, once a zombie, has emptied its namespace: `run` does not wait
    for whoever adopted it to reap it (which can take seconds)."""
    proc = subprocess.Popen(["true"])
    here = int(os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]"))
    assert sandbox._in_namespace(os.getpid(), here)
    deadline = time.monotonic() + 10  # only bounds how long a failing test waits
    while procfs.alive(proc.pid):
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.005)
    assert not sandbox._in_namespace(proc.pid, here)
    proc.wait()
    assert not sandbox._in_namespace(proc.pid, here)


def test_a_cancel_stops_it_and_leaves_nothing(box: Path) -> None:
    marker = unique_sleep()

    async def scenario() -> sandbox.Finished:
        stop = asyncio.Event()
        seen = asyncio.Event()

        def on_output(chunk: bytes) -> None:
            if b"ready" in chunk:
                seen.set()

        how = launch(Confinement(box), ["/bin/sh", "-c", f"echo ready; sleep {marker}"])
        task = asyncio.ensure_future(run(how, 60, on_output, stop))
        await seen.wait()
        stop.set()
        return await task

    done = asyncio.run(scenario())
    assert done.cancelled and done.exit_code is None
    assert b"ready" in done.tail
    assert processes_left(marker) == []


def test_a_cancelled_task_kills_the_command(box: Path) -> None:
    marker = unique_sleep()

    async def scenario() -> None:
        seen = asyncio.Event()
        how = launch(Confinement(box), ["/bin/sh", "-c", f"echo ready; sleep {marker}"])
        task = asyncio.ensure_future(run(how, 60, lambda c: seen.set()))
        await seen.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert processes_left(marker) == []


def test_output_is_streamed_and_its_tail_capped(box: Path) -> None:
    chunks: list[bytes] = []
    how = launch(
        Confinement(box), ["/bin/sh", "-c", "i=0; while [ $i -lt 3000 ]; do echo line$i; i=$((i+1)); done"]
    )
    done = asyncio.run(run(how, 60, chunks.append, tail_bytes=100))
    assert b"".join(chunks).splitlines()[-1] == b"line2999"
    assert len(done.tail) == 100 and done.tail.endswith(b"line2999\n")
    assert done.output_bytes == len(b"".join(chunks))


def test_an_overlay_keeps_every_write_in_memory(tmp_path: Path) -> None:
    lower, mnt = tmp_path / "lower", tmp_path / "mnt"
    (lower / "sub").mkdir(parents=True)
    (lower / "sub" / "file.txt").write_text("original\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("original\n")
    os.link(outside, lower / "linked.txt")  # a hard link to a file outside the overlay
    mnt.mkdir()
    script = (
        "for f in sub/file.txt linked.txt; do echo changed > $f; done; rm -rf sub; touch new; cat linked.txt"
    )
    done = sh(Overlay(lower, mnt), script, at=tmp_path / "seen-here")
    assert done.exit_code == 0 and out(done) == "changed\n"
    assert (lower / "sub" / "file.txt").read_text() == "original\n"
    assert outside.read_text() == "original\n"
    assert sorted(os.listdir(lower)) == ["linked.txt", "sub"]
    assert os.listdir(mnt) == []


def test_a_sandbox_that_cannot_be_set_up_is_an_error_not_a_failed_command(tmp_path: Path) -> None:
    folder = tmp_path / "gone"
    folder.mkdir()
    how = launch(Confinement(folder), ["/bin/true"])
    folder.rmdir()
    with pytest.raises(SandboxError, match="could not be set up"):
        asyncio.run(run(how, 60))


@pytest.mark.parametrize("which", ["home", "ssh", "keys", "root", "missing", "relative"])
def test_read_only_paths_that_would_show_secrets_are_refused(box: Path, home: Path, which: str) -> None:
    keys = keygen().parent
    given = {
        "home": home,
        "ssh": home / ".ssh",
        "keys": keys,
        "root": Path("/"),
        "missing": home / "no-such-folder",
        "relative": Path("relative/path"),
    }[which]
    with pytest.raises(SandboxError, match="read-only path"):
        launch(Confinement(box, read_only=(given,)), ["/bin/true"])


def test_a_folder_inside_home_may_be_read(box: Path, home: Path) -> None:
    tools = home / ".local" / "tools"
    tools.mkdir(parents=True)
    (tools / "tool.txt").write_text("a tool\n")
    done = sh(
        box,
        f'cat "{tools}/tool.txt"; cat "{home}/notes.txt" 2>/dev/null || echo no-notes',
        read_only=(tools,),
    )
    assert out(done) == "a tool\nno-notes\n"


def test_without_bwrap_it_refuses_unless_told_to_run_unsandboxed(
    box: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox, "tools", lambda: sandbox.Tools(None, None, None, "/bin/sh"))
    with pytest.raises(SandboxError, match='sandbox = "none"'):
        launch(Confinement(box), ["/bin/true"])
    how = launch(Confinement(box, kind="none", home=box), ["/bin/sh", "-c", "pwd; echo $HOME"])
    assert not how.sandboxed and "UNSANDBOXED" in how.describe
    done = asyncio.run(run(how, 60))
    assert done.exit_code == 0 and not done.sandboxed
    assert out(done).splitlines() == [str(box), str(box)]


def test_an_overlay_needs_the_sandbox(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="overlay"):
        launch(Confinement(Overlay(tmp_path, tmp_path), at=tmp_path, kind="none"), ["/bin/true"])


def test_this_machine_can_sandbox() -> None:
    assert sandbox.bwrap_problem() is None


def open_descriptors() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def test_the_command_holds_no_descriptor_of_what_was_bound(box: Path, tmp_path: Path) -> None:
    """bwrap binds read-only paths from descriptors and must close them: an open folder
    from outside the sandbox would let the command climb out of it (openat(fd, ".."))."""
    tools = tmp_path / "tools"
    tools.mkdir()
    before = open_descriptors()
    code = (
        "import os\n"
        "held = []\n"
        "for fd in range(3, 1024):\n"
        "    try:\n"
        "        os.fstat(fd)\n"
        "        held.append(fd)\n"
        "    except OSError:\n"
        "        pass\n"
        "print(held)\n"
    )
    how = launch(Confinement(box, read_only=(tools,)), ["python3", "-c", code])
    assert how.fds, "the read-only paths are bound from descriptors"
    done = asyncio.run(run(how, 60))
    assert out(done) == "[]\n"
    assert open_descriptors() == before, "nothing is left open here either"


def test_a_refused_read_only_path_leaves_no_descriptor_open(box: Path, home: Path, tmp_path: Path) -> None:
    fine = tmp_path / "fine"
    fine.mkdir()
    before = open_descriptors()
    with pytest.raises(SandboxError, match=r"would show ~/\.ssh"):
        launch(Confinement(box, read_only=(fine, home / ".ssh")), ["/bin/true"])
    assert open_descriptors() == before


def test_a_launch_that_is_never_started_is_closed_by_its_owner(box: Path, tmp_path: Path) -> None:
    before = open_descriptors()
    how = launch(Confinement(box, read_only=(tmp_path,)), ["/bin/true"])
    assert open_descriptors() > before
    how.close()
    how.close()
    assert open_descriptors() == before
