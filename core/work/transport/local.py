"""Run the runner as a local subprocess, through the same bootstrap as over SSH.

A generator is code genjob did not write, and on this machine it would otherwise run
with all of the operator's rights. So the runner (and the generator it starts) runs
under bubblewrap (`core.review.sandbox`) whenever that works here: no network unless the host
allows it, no unix socket (`core.review.seccomp`), nothing of the user's home, SSH keys or
genjob's key folder, and one writable folder, made for the run and removed after it,
that holds the job's workspace. The host's `read_only` paths are opened and judged as
what they lead to, and bound as opened (`core.review.read_only`). Where
bwrap cannot run, a host left at `sandbox = "auto"` runs unsandboxed and every place that
names the host says so (`isolation`); `sandbox = "bwrap"` refuses instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Awaitable, Sequence
from pathlib import Path

import core
from core.remote.rules import passed_env
from core.review import sandbox
from core.review.host_sandbox import LocalSandbox
from core.work.transport.base import (
    STOP_WAIT,
    OutputCallback,
    Prepared,
    ResultCallback,
    RunOutcome,
    Session,
    StartCallback,
    drive,
    runner_start,
)

# The folder that holds the `core` package, for the generator's PYTHONPATH.
PROJECT_ROOT = Path(core.__file__).resolve().parents[1]
# A run's callbacks, as `run` gets them: the result, the output, the start.
_Callbacks = tuple[ResultCallback, OutputCallback | None, StartCallback | None]


def local_env(python: str, pass_env: Sequence[str] = ()) -> dict[str, str]:
    """A clean environment whose PATH starts with ``python``'s folder, so that
    ``python3 -m core.remote.demo_generator`` finds this interpreter and, via PYTHONPATH, ``core``;
    with the variables of this process's environment that `pass_env` names."""
    path = os.environ.get("PATH") or os.defpath
    folder = os.path.dirname(python)
    return {
        **passed_env(pass_env, os.environ),
        "PATH": f"{folder}{os.pathsep}{path}" if folder else path,
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(PROJECT_ROOT),
    }


class LocalTransport:
    """Runs each job in a local ``python -I -S -c BOOTSTRAP`` subprocess in its own session,
    confined as `confine` says (default: unsandboxed, for a caller that chose so).

    ``slack`` is added to the header's timeout to bound the whole run, upload included.
    ``pass_env`` names the variables of genjob's environment the runner gets (and, through
    the job's header, its generator); nothing else of it reaches them.
    """

    def __init__(
        self,
        python: str = sys.executable,
        *,
        slack: float = 60.0,
        confine: LocalSandbox | None = None,
        pass_env: Sequence[str] = (),
    ) -> None:
        self.python = python
        self.slack = slack
        self.confine = confine or LocalSandbox("none")
        self.pass_env = tuple(pass_env)

    def _launch(self, folder: Path) -> sandbox.Launch:
        """The command line of one run whose writable folder is `folder`."""
        command = runner_start(self.python)
        kind = self.confine.kind_now()
        if kind == "none":
            return sandbox.Launch(
                command, local_env(self.python, self.pass_env), str(folder), False, self.confine.describe()
            )
        spec = sandbox.Confinement(
            folder,
            read_only=(PROJECT_ROOT, *self.confine.read_only),
            named_by=self.confine.named_by,
            network=self.confine.network,
            # The workspace goes in the writable folder, on disk, not in the sandbox's /tmp.
            env={
                **passed_env(self.pass_env, os.environ),
                "PYTHONPATH": str(PROJECT_ROOT),
                "TMPDIR": str(folder),
            },
        )
        return sandbox.launch(spec, command)

    async def run(
        self,
        job: Awaitable[Prepared],
        on_result: ResultCallback,
        on_output: OutputCallback | None = None,
        cancel: asyncio.Event | None = None,
        *,
        on_start: StartCallback | None = None,
    ) -> RunOutcome:
        folder = Path(tempfile.mkdtemp(prefix="genjob-local-"))
        try:
            return await self._run_in(folder, job, (on_result, on_output, on_start), cancel)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    async def _run_in(
        self, folder: Path, job: Awaitable[Prepared], callbacks: _Callbacks, cancel: asyncio.Event | None
    ) -> RunOutcome:
        try:
            how = self._launch(folder)
        except sandbox.SandboxError as exc:
            return RunOutcome(0, b"", None, f"cannot start the local runner: {exc}")
        sub = asyncio.subprocess
        try:
            run = await sandbox.start(how, stdin=sub.PIPE, stdout=sub.PIPE, stderr=sub.PIPE)
        except FileNotFoundError:
            return RunOutcome(0, b"", None, f"{how.argv[0]} not found")
        except OSError as exc:
            return RunOutcome(0, b"", None, f"cannot start {how.argv[0]}: {exc.strerror}")
        async with run:
            return await self._drive(run.proc, job, callbacks, cancel)

    async def _drive(
        self,
        proc: asyncio.subprocess.Process,
        job: Awaitable[Prepared],
        callbacks: _Callbacks,
        cancel: asyncio.Event | None,
    ) -> RunOutcome:
        stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr
        if stdin is None or stdout is None or stderr is None:
            raise RuntimeError("a subprocess started with three pipes has three pipes")

        async def stop() -> None:
            """SIGTERM and EOF: the runner kills its generator and removes its workspace
            (in a sandbox, bwrap's end takes every process in it along); if it has not
            exited by then, kill its process group."""
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), STOP_WAIT)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()

        session = Session(
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            wait=proc.wait,
            stop=stop,
            lost=(ConnectionResetError, BrokenPipeError),
            python=self.python,
        )
        try:
            on_result, on_output, on_start = callbacks
            return await drive(session, job, on_result, on_output, cancel, self.slack, on_start)
        finally:
            stdin.close()

    async def close(self) -> None:
        """Nothing is held between jobs."""
