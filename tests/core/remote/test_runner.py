"""The runner, run locally as ``python -c BOOTSTRAP`` exactly as a transport starts it."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
from shipkit import wait_dead

from core.remote.rules import HELLO, MAX_EXTENSION_BYTES, Limits, check_relpath, read_tar
from core.remote.runner import (
    BOOTSTRAP,
    MAX_OPEN_OUTPUTS,
    collect,
    container_id,
    render_command,
    write_result,
    write_tar,
)
from core.work.bundle import make_bundle, make_header
from core.work.transport.base import header_line, runner_preamble, runner_source

NONCE = b"0123456789abcdef0123456789abcdef"

pytestmark = pytest.mark.timeout(120)

PY = shlex.quote(sys.executable)
LIMITS = Limits(max_file_bytes=4096, max_total_bytes=10_000, max_files=10, max_tail_bytes=64)
LIMITS_BIG = Limits(max_file_bytes=1 << 20, max_total_bytes=1 << 21, max_files=10, max_tail_bytes=64)


class Run:
    """A runner subprocess whose stdin stays open until the test says otherwise."""

    def __init__(self, payload: bytes, tmp: Path) -> None:
        self.tmpdir = tmp / "runner-tmp"
        self.tmpdir.mkdir()
        env = {"PATH": os.environ["PATH"], "TMPDIR": str(self.tmpdir), "SECRET": "s3cret"}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", BOOTSTRAP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        self.out = bytearray()
        self.err = bytearray()
        self._threads = [
            threading.Thread(target=self._copy, args=(self.proc.stdout, self.out), daemon=True),
            threading.Thread(target=self._copy, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        assert self.proc.stdin is not None
        self.proc.stdin.write(payload)
        self.proc.stdin.flush()

    @staticmethod
    def _copy(src: io.BufferedReader, dst: bytearray) -> None:
        while chunk := src.read1(65536):
            dst += chunk

    def wait_for_output(self, text: bytes) -> None:
        deadline = time.monotonic() + 30
        while text not in self.err:
            assert time.monotonic() < deadline, f"no {text!r} in {bytes(self.err)!r}"
            time.sleep(0.02)

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def finish(self) -> tuple[dict, dict[str, bytes]]:
        code = self.proc.wait(timeout=60)
        for thread in self._threads:
            thread.join(timeout=10)
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        assert code == 0, bytes(self.err).decode(errors="replace")
        hello, _, result_tar = bytes(self.out).partition(b"\n")
        assert hello.startswith(HELLO + NONCE + b" "), hello
        self.facts = json.loads(hello[len(HELLO + NONCE) + 1 :])
        members = dict(read_tar(result_tar, 100, 1 << 20, 1 << 22))
        result = json.loads(members.pop("result.json"))
        outputs = {name.removeprefix("outputs/"): data for name, data in members.items()}
        assert sorted(result["outputs"]) == sorted(outputs)
        assert list(self.tmpdir.iterdir()) == [], "workspace left behind"
        return result, outputs


def start(
    tmp: Path,
    generator: str,
    paths: list[str],
    files: dict[str, bytes] | None = None,
    *,
    instruction: str = "Make it better.",
    timeout: float = 30,
    limits: Limits = LIMITS,
) -> Run:
    doc = json.dumps({"instruction": instruction, "allowed_paths": paths}).encode()
    bundle = make_bundle(doc, instruction, paths, files or {}, limits=limits)
    header = make_header(generator, timeout, limits, bundle)
    return Run(stdin_payload(header, bundle), tmp)


def stdin_payload(header: dict, bundle: bytes) -> bytes:
    """Everything a transport writes to the runner's stdin, at once."""
    return runner_preamble(NONCE) + header_line(header, bundle) + bundle


def run(
    tmp: Path, generator: str, paths: list[str], files: dict[str, bytes] | None = None, **kw: object
) -> tuple[dict, dict[str, bytes]]:
    return start(tmp, generator, paths, files, **kw).finish()  # type: ignore[arg-type]


def script(tmp: Path, code: str) -> str:
    path = tmp / f"gen_{abs(hash(code))}.py"
    path.write_text(code)
    return f"{PY} {shlex.quote(str(path))}"


def test_demo_generator_round_trip(tmp_path: Path) -> None:
    project = shlex.quote(str(Path(__file__).resolve().parents[3]))
    gen = f"PYTHONPATH={project} {PY} -m core.remote.demo_generator"
    result, outputs = run(tmp_path, gen, ["a.py", "new/b.py"], {"a.py": b"x = 1\n"})
    assert result["exit_code"] == 0 and result["violations"] == [] and result["error"] is None
    assert outputs["a.py"] == b"x = 1\n# genjob demo edit\n# instruction: Make it better.\n"
    assert outputs["new/b.py"].startswith(b"# genjob demo edit\n")
    assert "edited a.py" in result["tail"]


def test_generator_sees_clean_env_and_private_workspace(tmp_path: Path) -> None:
    code = """
import json, os
print("argv-ok", flush=True)
json.dump({"env": dict(os.environ), "cwd": os.getcwd(), "ls": sorted(os.listdir("."))},
          open("report.json", "w"))
"""
    result, outputs = run(tmp_path, script(tmp_path, code), ["report.json", "a.txt"], {"a.txt": b"a"})
    report = json.loads(outputs["report.json"])
    env = report["env"]
    shell_made = {"PWD", "SHLVL", "_"}
    assert set(env) - shell_made == {
        "PATH",
        "HOME",
        "LANG",
        "PYTHONSAFEPATH",
        "GENJOB_INSTRUCTION_FILE",
        "GENJOB_JOB_FILE",
        "GENJOB_WORKDIR",
    }
    assert env["LANG"] == "C.UTF-8"
    assert env["GENJOB_WORKDIR"] == report["cwd"]
    assert report["ls"] == ["a.txt"]
    for key in ("HOME", "GENJOB_INSTRUCTION_FILE", "GENJOB_JOB_FILE"):
        assert not env[key].startswith(report["cwd"] + os.sep)
    assert result["violations"] == []


def test_placeholders_are_quoted_values(tmp_path: Path) -> None:
    paths = ["a b.txt", "it's.txt", "-rf", "$(x).txt"]
    code = """
import json, os, sys
args = sys.argv[1:]
inst = open(args[0], "rb").read().decode()
job = json.load(open(args[1]))
open("argv.json", "w").write(json.dumps({"args": args, "inst": inst, "paths": job["allowed_paths"]}))
"""
    gen = script(tmp_path, code) + " {instruction_file} {job_file} {workdir} {paths}"
    result, outputs = run(tmp_path, gen, [*paths, "argv.json"], instruction="hi {paths}")
    got = json.loads(outputs["argv.json"])
    assert got["args"][3:] == ["a b.txt", "it's.txt", "./-rf", "$(x).txt", "argv.json"]
    assert got["inst"] == "hi {paths}"
    assert got["paths"] == [*paths, "argv.json"]
    assert result["violations"] == []


def test_render_command_is_one_pass() -> None:
    values = {"instruction_file": "'/x/{paths}'", "job_file": "j", "paths": "p", "workdir": "w"}
    assert render_command("{instruction_file} {paths} {other} ${HOME}", values) == (
        "'/x/{paths}' p {other} ${HOME}"
    )


def test_nonzero_exit_and_tail_limit(tmp_path: Path) -> None:
    code = "import sys\nprint('x' * 500)\nprint('last words', flush=True)\nsys.exit(7)\n"
    run_ = start(tmp_path, script(tmp_path, code), ["a.py"])
    result, outputs = run_.finish()
    assert result["exit_code"] == 7 and not result["timed_out"]
    assert result["tail"].endswith("last words\n") and len(result["tail"]) == 64
    assert b"x" * 500 in run_.err, "live output is streamed whole to stderr"
    assert outputs == {}


def hanging(pids: Path, prefix: str = "") -> str:
    """A shell that starts a child, records both pids at once, then waits for good."""
    child = f"{PY} -c 'import time; time.sleep(600)'"
    return f'{prefix}{child} & echo "$$ $!" > {shlex.quote(str(pids))}; echo started; wait'


def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    result, _ = run(tmp_path, hanging(pids), ["a.py"], timeout=1)
    assert result["timed_out"] and result["exit_code"] is None
    assert wait_dead([int(p) for p in pids.read_text().split()]) == []


def test_generator_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    result, _ = run(tmp_path, hanging(pids, prefix="trap '' TERM; "), ["a.py"], timeout=0.5)
    assert result["timed_out"]
    assert wait_dead([int(p) for p in pids.read_text().split()]) == []


@pytest.mark.parametrize("how", ["eof", "sigterm", "sighup"])
def test_client_gone_cancels(tmp_path: Path, how: str) -> None:
    pids = tmp_path / "pids"
    run_ = start(tmp_path, hanging(pids), ["a.py"], {"a.py": b"a"})
    run_.wait_for_output(b"started")
    if how == "eof":
        run_.close_stdin()
    else:
        run_.proc.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGHUP)
    result, outputs = run_.finish()
    assert result["cancelled"] and outputs == {}
    assert wait_dead([int(p) for p in pids.read_text().split()]) == []


def test_eof_before_bundle_is_complete(tmp_path: Path) -> None:
    doc = json.dumps({"allowed_paths": []}).encode()
    bundle = make_bundle(doc, "x", [], {})
    payload = stdin_payload(make_header("true", 5, LIMITS, bundle), bundle)
    run_ = Run(payload[:-100], tmp_path)
    run_.close_stdin()
    result, _ = run_.finish()
    assert result["cancelled"] and "bundle" in result["error"]


def test_violations_are_named(tmp_path: Path) -> None:
    code = """
import os
open("ok.py", "w").write("fine")
open("stray.txt", "w").write("no")
os.makedirs("deep/er", exist_ok=True)
os.symlink("/etc/passwd", "link.py")
os.mkdir("dir.py")
os.mkfifo("fifo.py")
open("big.py", "w").write("x" * 5000)
os.rename("pkg", "elsewhere")
os.symlink("/etc", "pkg")
"""
    paths = ["ok.py", "link.py", "dir.py", "fifo.py", "big.py", "pkg/mod.py"]
    result, outputs = run(tmp_path, script(tmp_path, code), paths, {"pkg/mod.py": b"m"})
    assert sorted(outputs) == ["ok.py"]
    found = "\n".join(result["violations"])
    for expected in (
        "link.py: symlink at an allowed path",
        "dir.py: directory at an allowed path",
        "fifo.py: fifo at an allowed path",
        "big.py: 5000 bytes, over max_file_bytes",
        "pkg/mod.py: parent pkg is not a directory",
        "stray.txt: file created outside the allowed paths",
        "deep: directory created outside the allowed paths",
        "elsewhere: directory created outside the allowed paths",
        "pkg: symlink where a folder of allowed paths belongs",
    ):
        assert expected in found


def test_total_output_limit(tmp_path: Path) -> None:
    code = "for name in 'abc':\n    open(name, 'w').write('x' * 4000)\n"
    result, outputs = run(tmp_path, script(tmp_path, code), ["a", "b", "c"])
    assert sorted(outputs) == ["a", "b"]
    assert result["violations"] == ["c: outputs over max_total_bytes (10000)"]


def test_outputs_are_read_as_they_are_sent_and_a_change_meanwhile_is_named(tmp_path: Path) -> None:
    """An output is read when it goes out, at the size it was collected at: one that
    something left behind shortened or lengthened since is named, and the tar stays whole,
    each hash that of the bytes sent."""
    work = tmp_path / "work"
    work.mkdir()
    for name in ("same", "shorter", "longer"):
        (work / name).write_bytes(name.encode() * 100)
    outputs, violations = collect(str(work), ["same", "shorter", "longer"], LIMITS)
    assert violations == [] and {o.size for o in outputs.values()} == {400, 700, 600}
    (work / "shorter").write_bytes(b"cut")
    with (work / "longer").open("ab") as f:
        f.write(b"more")
    result = {"violations": [], "error": None}
    out = io.BytesIO()
    write_result(out, result, outputs)
    members = dict(read_tar(out.getvalue(), 10, 1 << 20, 1 << 20))
    claimed = json.loads(members.pop("result.json"))["outputs"]
    assert members == {
        "outputs/same": b"same" * 100,
        "outputs/shorter": b"cut" + bytes(697),
        "outputs/longer": b"longer" * 100,
    }
    assert claimed == {
        rel.removeprefix("outputs/"): hashlib.sha256(data).hexdigest() for rel, data in members.items()
    }
    assert result["violations"] == [
        "longer: changed while it was being sent",
        "shorter: changed while it was being sent",
    ]
    assert all(o.handle.closed for o in outputs.values())


def test_many_outputs_keep_few_files_open_and_all_arrive(tmp_path: Path) -> None:
    """A job of many outputs (max_files is 1,000 by default) must not run the host out of
    open files: past the first few, each is read when collected."""
    work = tmp_path / "work"
    work.mkdir()
    names = [f"f{i:03}.py" for i in range(MAX_OPEN_OUTPUTS * 3)]
    for name in names:
        (work / name).write_text(f"# {name}\n")
    fds = len(os.listdir("/proc/self/fd"))
    outputs, violations = collect(str(work), names, Limits(max_files=1000, max_total_bytes=1 << 20))
    assert violations == []
    assert len(os.listdir("/proc/self/fd")) - fds <= MAX_OPEN_OUTPUTS
    result = {"violations": [], "error": None}
    out = io.BytesIO()
    write_result(out, result, outputs)
    members = dict(read_tar(out.getvalue(), 1000, 1 << 20, 1 << 20))
    members.pop("result.json")
    assert members == {f"outputs/{n}": f"# {n}\n".encode() for n in names}
    assert result["violations"] == []
    assert len(os.listdir("/proc/self/fd")) == fds


def test_escaped_daemon_does_not_hang_the_runner(tmp_path: Path) -> None:
    """A grandchild in its own session keeps the output pipe open; the runner still ends."""
    pidfile = tmp_path / "daemon"
    code = f"""
import subprocess, sys
p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
open({str(pidfile)!r}, "w").write(str(p.pid))
"""
    try:
        result, _ = run(tmp_path, script(tmp_path, code), ["a.py"])
        assert result["exit_code"] == 0
    finally:
        os.kill(int(pidfile.read_text()), signal.SIGKILL)


@pytest.mark.parametrize(
    ("members", "fault"),
    [
        (
            [("job.json", b'{"allowed_paths": ["a"]}'), ("instruction.txt", b"x"), ("files/b", b"")],
            "'files/b': not files/<an allowed path>",
        ),
        ([("job.json", b'{"allowed_paths": ["../a"]}'), ("instruction.txt", b"x")], "'..'"),
        ([("job.json", b'{"allowed_paths": []}')], "instruction.txt is missing"),
        (
            [("job.json", b'{"allowed_paths": [], "allowed_paths": []}'), ("instruction.txt", b"")],
            "duplicate key",
        ),
    ],
)
def test_runner_refuses_bad_bundles(tmp_path: Path, members: list[tuple[str, bytes]], fault: str) -> None:
    bundle = write_tar(members)
    run_ = Run(stdin_payload(make_header("true", 5, LIMITS, bundle), bundle), tmp_path)
    result, _ = run_.finish()
    assert fault in result["error"] and result["exit_code"] is None


@pytest.mark.parametrize(
    ("members", "fault"),
    [
        (
            [("files/a", b""), ("job.json", b'{"allowed_paths": ["a"]}'), ("instruction.txt", b"x")],
            "job.json is missing (it comes first)",
        ),
        (
            [("job.json", b'{"allowed_paths": ["a"]}'), ("files/a", b""), ("instruction.txt", b"x")],
            "instruction.txt is missing (it comes second)",
        ),
        (
            [
                ("job.json", b'{"allowed_paths": ["a"]}'),
                ("instruction.txt", b"x"),
                ("files/a", b"1"),
                ("files/a", b"2"),
            ],
            "'files/a': duplicate member",
        ),
        ([], "job.json is missing"),
    ],
)
def test_runner_refuses_bundles_out_of_order(
    tmp_path: Path, members: list[tuple[str, bytes]], fault: str
) -> None:
    bundle = write_tar(members)
    result, _ = Run(stdin_payload(make_header("true", 5, LIMITS, bundle), bundle), tmp_path).finish()
    assert fault in result["error"] and result["exit_code"] is None


def test_files_are_written_while_the_bundle_still_arrives(tmp_path: Path) -> None:
    big, rest = os.urandom(512 * 1024), os.urandom(128 * 1024)
    doc = json.dumps({"instruction": "x", "allowed_paths": ["a.bin", "b.bin"]}).encode()
    bundle = make_bundle(doc, "x", ["a.bin", "b.bin"], {"a.bin": big, "b.bin": rest}, limits=LIMITS_BIG)
    payload = stdin_payload(make_header("cat b.bin >> a.bin", 5, LIMITS_BIG, bundle), bundle)
    run_ = Run(payload[:-1024], tmp_path)  # all but the end of b.bin and the archive
    deadline = time.monotonic() + 30
    while not any(p.stat().st_size == len(big) for p in run_.tmpdir.glob("genjob-*/work/a.bin")):
        assert time.monotonic() < deadline, "a.bin was not written before the bundle was complete"
        time.sleep(0.02)
    assert run_.proc.stdin is not None
    run_.proc.stdin.write(payload[-1024:])
    run_.proc.stdin.flush()
    result, outputs = run_.finish()
    assert result["exit_code"] == 0 and outputs["a.bin"] == big + rest


def test_runner_refuses_link_members(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo("files/a")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/shadow"
        tf.addfile(info)
    bundle = buf.getvalue()
    result, _ = Run(stdin_payload(make_header("true", 5, LIMITS, bundle), bundle), tmp_path).finish()
    assert "'files/a': symlink, not a regular file" in result["error"]


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME])
def test_runner_refuses_an_oversized_extension_header_unread(tmp_path: Path, kind: bytes) -> None:
    """The bundle is read by the same rules as a result: a header over its cap is refused
    before the megabyte it claims is read (only a few bytes of it follow here)."""
    first = write_tar([("job.json", b'{"allowed_paths": ["a"]}')])[:1024]  # its header and data
    info = tarfile.TarInfo("././@PaxHeader")
    info.type, info.size = kind, 1 << 20
    bundle = first + info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict") + b"1" * 4096
    result, _ = Run(stdin_payload(make_header("true", 5, LIMITS, bundle), bundle), tmp_path).finish()
    assert result["error"].startswith("bundle: member 2 (") and result["exit_code"] is None
    assert result["error"].endswith(
        f"'././@PaxHeader'): {1 << 20} bytes, over the cap of {MAX_EXTENSION_BYTES} bytes"
    )


@pytest.mark.parametrize(
    ("header", "fault"),
    [
        ({"v": 1}, "protocol version 1"),
        ({"timeout": -1}, "timeout must be a positive number"),
        ({"generator": ""}, "generator must be a non-empty string"),
        ({"limits": {"max_files": 1}}, "limits must have exactly"),
    ],
)
def test_runner_refuses_bad_headers(tmp_path: Path, header: dict, fault: str) -> None:
    bundle = make_bundle(b'{"allowed_paths": []}', "x", [], {})
    full = {**make_header("true", 5, LIMITS, bundle), **header}
    result, _ = Run(stdin_payload(full, bundle), tmp_path).finish()
    assert fault in result["error"]


def test_the_runner_source_is_self_contained() -> None:
    """The blob the host runs imports nothing outside the standard library."""
    source = runner_source().decode()
    imports = {
        line.split()[1].split(".")[0] for line in source.splitlines() if line.startswith(("import ", "from "))
    }
    assert imports <= set(sys.stdlib_module_names) | {"__future__"}
    assert "'" not in BOOTSTRAP
    assert check_relpath("a/b") == "a/b"


ID = "4f2c" + "0" * 56 + "9a1b"
NO_CGROUP_NAMESPACE = "0::/\n"


@pytest.mark.parametrize(
    ("mountinfo", "cgroup"),
    [
        # docker at its default data root, and at one of the daemon's own (--data-root):
        # with a cgroup namespace of its own (docker's default on cgroup v2) the cgroup
        # file names nothing, and the bound /etc/hostname is what names the container.
        (f"175 174 254:0 /var/lib/docker/containers/{ID}/hostname /etc/hostname rw - ext4 /dev/vda rw", ""),
        (f"176 174 254:0 /srv/engine/containers/{ID}/resolv.conf /etc/resolv.conf rw - ext4 /dev/vda rw", ""),
        (
            f"177 174 254:0 /tmp/genjob-docker-x/data/containers/{ID}/hosts /etc/hosts rw - ext4 /dev/vda rw",
            "",
        ),
        # podman, rootful and rootless
        (f"80 79 0:40 /var/lib/containers/storage/overlay-containers/{ID}/userdata/hosts /etc/hosts rw", ""),
        (f"81 79 0:40 /gen/.local/share/containers/storage/overlay-containers/{ID}/userdata/hosts /x", ""),
        # cgroup v1 (or v2 in the host's cgroup namespace), docker and podman
        ("", f"4:memory:/docker/{ID}\n"),
        ("", f"0::/machine.slice/libpod-{ID}.scope\n"),
    ],
)
def test_the_container_id_is_found_wherever_the_engine_keeps_its_data(
    mountinfo: str, cgroup: str, tmp_path: Path
) -> None:
    (tmp_path / "mountinfo").write_text(f"156 76 0:59 / / rw - overlay overlay rw\n{mountinfo}\n")
    (tmp_path / "cgroup").write_text(cgroup or NO_CGROUP_NAMESPACE)
    assert container_id(str(tmp_path)) == ID


def test_no_container_id_outside_a_container(tmp_path: Path) -> None:
    (tmp_path / "mountinfo").write_text(f"22 1 254:0 /srv/containers/{ID[:12]}/x /x rw - ext4 /dev/vda rw\n")
    (tmp_path / "cgroup").write_text(NO_CGROUP_NAMESPACE)
    assert container_id(str(tmp_path)) is None
    assert container_id(str(tmp_path / "gone")) is None
