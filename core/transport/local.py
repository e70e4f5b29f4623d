"""Run the runner as a local subprocess, through the same bootstrap as over SSH."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable
from pathlib import Path

from core import runner
from core.transport.base import (
    STOP_WAIT,
    OutputCallback,
    Prepared,
    RunOutcome,
    Session,
    drive,
)

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def local_env(python: str) -> dict[str, str]:
    """A clean environment whose PATH starts with ``python``'s folder, so that
    ``python3 -m core.demo_generator`` finds this interpreter and, via PYTHONPATH, ``core``."""
    path = os.environ.get("PATH") or os.defpath
    folder = os.path.dirname(python)
    return {
        "PATH": f"{folder}{os.pathsep}{path}" if folder else path,
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(PROJECT_ROOT),
    }


class LocalTransport:
    """Runs each job in a local ``python -c BOOTSTRAP`` subprocess in its own session.

    ``slack`` is added to the header's timeout to bound the whole run, upload included.
    """

    def __init__(self, python: str = sys.executable, *, slack: float = 60.0) -> None:
        self.python = python
        self.slack = slack

    async def run(
        self,
        job: Awaitable[Prepared],
        on_result: OutputCallback,
        on_output: OutputCallback | None = None,
        cancel: asyncio.Event | None = None,
    ) -> RunOutcome:
        try:
            proc = await asyncio.create_subprocess_exec(
                self.python,
                "-c",
                runner.BOOTSTRAP,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=local_env(self.python),
                start_new_session=True,
            )
        except FileNotFoundError:
            return RunOutcome(0, b"", None, f"{self.python} not found")
        except OSError as exc:
            return RunOutcome(0, b"", None, f"cannot start {self.python}: {exc.strerror}")
        stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr
        if stdin is None or stdout is None or stderr is None:
            raise RuntimeError("a subprocess started with three pipes has three pipes")

        async def stop() -> None:
            """SIGTERM and EOF: the runner kills its generator and removes its workspace;
            if it has not exited by then, kill its process group."""
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
            return await drive(session, job, on_result, on_output, cancel, self.slack)
        finally:
            stdin.close()

    async def close(self) -> None:
        """Nothing is held between jobs."""
