"""Transports that run ``core/runner.py`` on a generator host: locally or over SSH."""

from core.transport.base import JobSpec, RunOutcome, Transport, remote_command, run_job
from core.transport.local import LocalTransport
from core.transport.ssh import HostKeyError, SSHTransport

__all__ = [
    "HostKeyError",
    "JobSpec",
    "LocalTransport",
    "RunOutcome",
    "SSHTransport",
    "Transport",
    "remote_command",
    "run_job",
]
