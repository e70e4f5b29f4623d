"""Transports that run ``core/remote/runner.py`` on a generator host: locally, over SSH, or
through any command that yields a pipe to a Python there."""

from core.work.transport.base import HostKeyError, JobSpec, RunOutcome, Transport, remote_command, run_job
from core.work.transport.command import CommandTransport
from core.work.transport.local import LocalTransport
from core.work.transport.ssh import SSHTransport

__all__ = [
    "CommandTransport",
    "HostKeyError",
    "JobSpec",
    "LocalTransport",
    "RunOutcome",
    "SSHTransport",
    "Transport",
    "remote_command",
    "run_job",
]
