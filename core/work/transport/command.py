"""Run the runner through any program that yields a pipe to a Python on the far side.

Git and rsync ride any remote shell (``GIT_SSH_COMMAND``, ``rsync -e``); this transport
does the same for ``kubectl exec -i``, ``docker exec -i``, ``srun``, ``bwrap`` or
OpenSSH's own ``ssh`` client with the operator's config (ControlMaster, ProxyJump, agent).
The host's ``command`` is an argv template; the runner's start is appended to it:

- as five arguments, ``python3 -I -S -c BOOTSTRAP``, for engines that exec an argv as given;
- as one shell-quoted argument when the far side reads it through a shell, as ``ssh``
  does (it joins its arguments into a line for the login shell). A template whose
  program is ``ssh`` is taken to be one, as git guesses its ssh variant from the name;
  ``mode`` says so explicitly.

The protocol on the pipe is the one every transport speaks (`core.work.transport.base.drive`):
limits, validation, cancel and the result tar are the same as over asyncssh. The client
runs in its own session with no controlling terminal, so it can never stop to prompt
for a password or a host key: it fails instead, and its own message is the reason.

A generator host is untrusted, so OpenSSH's client gets ``-a -x -o ClearAllForwardings=yes``
before the template's own options: no agent, X11 display or port forwarding that the
user's ssh config sets up for every host reaches it. A template that asks for one itself
keeps that one: ``-A`` or ``-o ForwardAgent=...`` the agent, ``-X``, ``-Y`` or
``-o ForwardX11=yes`` the display, ``-L``, ``-R``, ``-D`` or their ``-o`` forms its ports.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Awaitable, Mapping, Sequence
from typing import Literal

from core.remote import runner
from core.work.transport.base import (
    STOP_WAIT,
    HostKeyError,
    OutputCallback,
    Prepared,
    ResultCallback,
    RunOutcome,
    Session,
    StartCallback,
    drive,
    remote_command,
    runner_start,
)

CommandMode = Literal["argv", "shell"]

# OpenSSH's words when it refuses a host key (any version since 4): the one failure that
# needs an operator rather than a retry.
_HOST_KEY_FAILED = b"Host key verification failed."
_CHANGED = b"REMOTE HOST IDENTIFICATION HAS CHANGED"
_FINGERPRINT = re.compile(rb"SHA256:[A-Za-z0-9+/]{43}")
_HOST_NAMED = re.compile(r"(?:known|Host key) for (\S+) ")
# How much of the client's last words an error quotes.
_REASON_CHARS = 300


def guess_mode(argv: Sequence[str]) -> CommandMode:
    """ "shell" when the program is OpenSSH's client (which hands its arguments to a login
    shell as one line), else "argv"."""
    return "shell" if os.path.basename(argv[0]) == "ssh" else "argv"


# OpenSSH's client options that take an argument (ssh(1), OpenSSH 9); the rest are flags.
# It reads options before and after the destination, up to the remote command or "--".
_SSH_ARGUMENTS = frozenset("BbcDEeFIiJLlmOoPpQRSWw")
# What the user's ssh config may forward to every host: how to turn it off, and how a
# template asks for it, by a flag or by an `-o` keyword (lowercase) set to anything but no.
_FORWARDS = (
    (("-a",), frozenset("A"), frozenset({"forwardagent"})),
    (("-x",), frozenset("XY"), frozenset({"forwardx11"})),
    (
        ("-o", "ClearAllForwardings=yes"),
        frozenset("LRD"),
        frozenset({"localforward", "remoteforward", "dynamicforward"}),
    ),
)
_NO = frozenset({"no", "false"})
_OPTION = re.compile(r"\s*([A-Za-z0-9]+)\s*(?:=|\s)\s*(.*)", re.DOTALL)


def ssh_options(args: Sequence[str]) -> tuple[set[str], dict[str, str]]:
    """The flags and the ``-o`` settings (keyword lowercased, the first one kept, as ssh
    keeps it) that OpenSSH's client reads from `args`, its arguments after the program."""
    flags: set[str] = set()
    settings: dict[str, str] = {}
    words = iter(args)
    destination = False
    for word in words:
        if word == "--":
            break
        if not word.startswith("-") or word == "-":
            if destination:
                break  # the remote command
            destination = True
            continue
        for at, letter in enumerate(word[1:], start=1):
            flags.add(letter)
            if letter in _SSH_ARGUMENTS:
                value = word[at + 1 :] or next(words, "")
                if letter == "o" and (match := _OPTION.fullmatch(value)):
                    settings.setdefault(match.group(1).lower(), match.group(2).strip().lower())
                break
    return flags, settings


def without_forwarding(argv: Sequence[str]) -> list[str]:
    """`argv` with OpenSSH's forwardings turned off, each one unless `argv` asks for it;
    any other program's argv as it is."""
    if os.path.basename(argv[0]) != "ssh":
        return list(argv)
    flags, settings = ssh_options(argv[1:])
    off: list[str] = []
    for option, asking_flags, keywords in _FORWARDS:
        asked = flags & asking_flags or any(settings.get(k, "no") not in _NO for k in keywords)
        if not asked:
            off.extend(option)
    return [argv[0], *off, *argv[1:]]


def runner_argv(argv: Sequence[str], python: str, mode: CommandMode) -> list[str]:
    """The full command line: the template (OpenSSH's forwardings off), then the runner's
    start as `mode` wants it."""
    argv = without_forwarding(argv)
    if mode == "shell":
        return [*argv, remote_command(python)]
    return [*argv, *runner_start(python)]


# A line in which a client only restates a status its own exit gives: srun's "task 0:
# Exited with exit code 2" comes after slurmstepd's reason (an execve() that failed).
_RESTATED = re.compile(r"srun: error: \S+: tasks? [0-9,-]+: Exited with exit code \d+")


def last_words(tail: bytes) -> str:
    """The last non-empty line of a stderr tail that says more than an exit status, cut
    short, for an error message."""
    for line in reversed(tail.decode("utf-8", errors="replace").splitlines()):
        if line.strip() and not _RESTATED.fullmatch(line.strip()):
            line = line.strip()
            return line if len(line) <= _REASON_CHARS else line[:_REASON_CHARS] + "…"
    return ""


class CommandTransport:
    """Runs each job as ``argv + <runner start>`` in a local subprocess.

    ``env`` is the client's environment (default: this process's, so that ``ssh``,
    ``kubectl`` or ``docker`` find their own config, agent and credentials); nothing of
    it reaches the generator, whose environment the runner builds from scratch on the
    far side. ``slack`` is added to the header's timeout to bound a whole run.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        python: str = "python3",
        mode: CommandMode | None = None,
        env: Mapping[str, str] | None = None,
        slack: float = 60.0,
    ) -> None:
        if not argv or not argv[0]:
            raise ValueError("a command transport needs a program to run")
        self.argv = list(argv)
        self.python = python
        self.mode: CommandMode = mode or guess_mode(self.argv)
        self.env = dict(env) if env is not None else None
        self.slack = slack

    @property
    def program(self) -> str:
        return os.path.basename(self.argv[0])

    def describe(self) -> str:
        """The template as an operator would type it (the runner's part left out)."""
        return " ".join(self.argv)

    async def run(
        self,
        job: Awaitable[Prepared],
        on_result: ResultCallback,
        on_output: OutputCallback | None = None,
        cancel: asyncio.Event | None = None,
        *,
        on_start: StartCallback | None = None,
    ) -> RunOutcome:
        try:
            proc = await asyncio.create_subprocess_exec(
                *runner_argv(self.argv, self.python, self.mode),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.env,
                start_new_session=True,
            )
        except FileNotFoundError:
            return RunOutcome(0, b"", None, f"{self.argv[0]}: not found on this machine")
        except OSError as exc:
            return RunOutcome(0, b"", None, f"cannot start {self.argv[0]}: {exc.strerror}")
        stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr
        if stdin is None or stdout is None or stderr is None:
            raise RuntimeError("a subprocess started with three pipes has three pipes")

        async def stop() -> None:
            """EOF first: the runner on the far side takes it as a cancel, stops its
            generator and removes its workspace, and the client exits with it. A client
            that does not (a hung link) gets SIGTERM, then its process group SIGKILL."""
            stdin.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), STOP_WAIT)
                return
            for sig, grace in ((signal.SIGTERM, runner.KILL_GRACE), (signal.SIGKILL, None)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                if grace is None:
                    await proc.wait()
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), grace)
                    return

        session = Session(
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            wait=proc.wait,
            stop=stop,
            lost=(ConnectionResetError, BrokenPipeError),
            python=self.python,
            exit_reason=self._exit_reason,
        )
        try:
            outcome = await drive(session, job, on_result, on_output, cancel, self.slack, on_start)
        finally:
            stdin.close()
        self._check_host_key(outcome)
        return outcome

    def _exit_reason(self, status: int | None, tail: bytes) -> str:
        """The client's exit, in its own last words: ``ssh exited with status 255:
        Connection to host closed by remote host.``"""
        if status is not None and status < 0:
            what = f"{self.program} was killed by signal {-status}"
        else:
            what = f"{self.program} exited with status {status}"
        words = last_words(tail)
        return f"{what}: {words}" if words else what

    def _check_host_key(self, outcome: RunOutcome) -> None:
        """Raise HostKeyError when OpenSSH refused the host key before anything ran: the
        server's fingerprint when ssh printed it, and ssh's own advice."""
        tail = outcome.stderr_tail
        if outcome.result_bytes or outcome.exit_status != 255 or _HOST_KEY_FAILED not in tail:
            return
        lines = [line.strip() for line in tail.decode("utf-8", errors="replace").splitlines()]
        found = _FINGERPRINT.findall(tail)
        fingerprint = found[-1].decode() if found else None
        named = next((m for line in lines if (m := _HOST_NAMED.search(line))), None)
        host = named.group(1) if named else "the host"
        if _CHANGED in tail:
            remove = next((line for line in lines if line.startswith("ssh-keygen ")), None)
            raise HostKeyError(
                f"host key for {host} has CHANGED: the server presents {fingerprint or 'another key'}, "
                "and ssh refused it. If the change is expected, remove the old key from the "
                "known_hosts file ssh uses" + (f" ({remove})" if remove else "") + " and add the new one",
                fingerprint,
            )
        raise HostKeyError(
            f"host key for {host} is not known to ssh, which refused it: {' '.join(lines[-2:])} "
            "Check the key's fingerprint with the host's owner, then add it to the known_hosts "
            "file ssh uses for this host (ssh-keyscan prints the key)",
            fingerprint,
        )

    async def close(self) -> None:
        """Nothing is held between jobs (a ControlMaster, if the template sets one up, is
        the client's own)."""
