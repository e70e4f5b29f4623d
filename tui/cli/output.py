"""Everything the CLI prints goes through here, and every fault it ends on.

Untrusted text (from a job, receipt, lease, attempts file, audit log, path, worker id,
host or generator) is made visible field by field with `core.model.terminal.visible`, which
also shows a newline as a character, so a field can never fake a line of its own; and
every line is passed through `visible` once more on its way out, so nothing a caller
missed can drive the terminal.

A command that tells the operator's `[notify]` channels opens them with `notifying`, which
lets its last events out however the command ends.

Nothing here imports click: `genjob ls` prints through it without loading click.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from core.errors import GenjobError
from core.model.terminal import visible
from core.store.durable import environment_fault

if TYPE_CHECKING:
    from core.store.notify import Notifier

T = TypeVar("T")


def say(text: str = "", err: bool = False, nl: bool = True) -> None:
    stream = sys.stderr if err else sys.stdout
    if stream is None:  # no console at all (pythonw): nothing to show it on
        return
    line = visible(text, keep_newlines=True) + ("\n" if nl else "")
    try:
        stream.write(line)
    except UnicodeEncodeError:  # a console in an encoding that lacks some character
        encoding = stream.encoding or "ascii"
        stream.write(line.encode(encoding, "backslashreplace").decode(encoding))
    stream.flush()


def say_on_stderr(text: str) -> None:
    """A line beside a command's output, never in it: what a notification channel could not do."""
    say(text, err=True)


def fail(message: str, code: int) -> NoReturn:
    """One line on stderr naming the fault, then exit with `code`."""
    say(f"genjob: {visible(message)}", err=True)
    sys.exit(code)


def guarded(command: Callable[[], T]) -> T:
    """Runs `command`, turning every `GenjobError`, and every fault of the machine (a full
    disk, a read-only mount, no permission, a quota), into one line on stderr and its
    exit code."""
    try:
        return command()
    except GenjobError as exc:
        fail(str(exc), exc.exit_code)
    except OSError as exc:
        fault = environment_fault(exc, exc.filename or "genjob")
        if fault is None:
            raise
        fail(str(fault), fault.exit_code)
    except KeyboardInterrupt:
        fail("interrupted", 130)


# How long a command that is done waits for its last notifications to go out.
NOTIFY_DRAIN = 15.0


def terminal_bell() -> None:
    """The terminal bell, rung on stderr when that is a terminal (else there is none to ring);
    written as the one byte it is, which `say` would show as a character instead."""
    if sys.stderr is not None and sys.stderr.isatty():
        os.write(sys.stderr.fileno(), b"\a")


@contextlib.contextmanager
def notifying(root: Path, source: str, said: Callable[[str], None]) -> Iterator[Notifier]:
    """The operator's `[notify]` channels for one command run in repository `root`, the
    last events let out as the command ends, however it ends (an exit, a fault), for
    NOTIFY_DRAIN at most. `said` tells what a channel could not do."""
    from core.store.notify import Notifier  # loads pydantic: never for `genjob ls`

    notifier = Notifier.of_operator(root, source, bell=terminal_bell, said=said)
    try:
        yield notifier
    finally:
        notifier.close(NOTIFY_DRAIN)


def print_json(obj: Any) -> None:
    """JSON with every non-ASCII and control character escaped (``ensure_ascii``)."""
    say(json.dumps(obj, indent=2, default=str, ensure_ascii=True))
