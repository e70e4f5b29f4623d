"""Everything the CLI prints goes through here.

Untrusted text (from a job, receipt, lease, attempts file, audit log, path, worker id,
host or generator) is made visible field by field with `core.terminal.visible`, which
also shows a newline as a character, so a field can never fake a line of its own; and
every line is passed through `visible` once more on its way out, so nothing a caller
missed can drive the terminal.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import click

from core.terminal import visible


def say(text: str = "", err: bool = False, nl: bool = True) -> None:
    click.echo(visible(text, keep_newlines=True), err=err, nl=nl)


def fail(message: str, code: int) -> NoReturn:
    """One line on stderr naming the fault, then exit with `code`."""
    say(f"genjob: {visible(message)}", err=True)
    sys.exit(code)


def print_json(obj: Any) -> None:
    """JSON with every non-ASCII and control character escaped (``ensure_ascii``)."""
    say(json.dumps(obj, indent=2, default=str, ensure_ascii=True))
