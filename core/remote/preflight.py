"""The first thing a generator host runs: whether its Python can run genjob's runner.

BOOTSTRAP hands this file's source to whatever interpreter the host's `python` names,
so it is written for any of them, Python 2 included (no f-strings, type comments): it
checks the version, imports every standard library module the runner needs, then reads
the runner's source from stdin and runs it. A Python that does not fit is named on one
line of stderr that starts with UNFIT, with all it lacks, and the process exits with
UNFIT_STATUS before reading anything more. Debian's and Ubuntu's `python3-minimal`, the
python3 of many slim images, has no `json`, `tarfile`, `shutil`, `shlex` or `dataclasses`.

Its names share the runner's namespace (the runner runs in this module's globals, as
`__main__`), so each is prefixed, and a test holds them apart from the runner's.
"""

import sys

PREFLIGHT_OLDEST = (3, 8)
UNFIT = "genjob-runner: unfit python: "
UNFIT_STATUS = 3
# Every module genjob's runner and the rules it ships with import, at the top or within
# a function (a test holds this to their source).
PREFLIGHT_NEEDS = (
    "contextlib",
    "dataclasses",
    "fcntl",
    "fnmatch",
    "hashlib",
    "io",
    "json",
    "os",
    "re",
    "select",
    "shlex",
    "shutil",
    "signal",
    "stat",
    "subprocess",
    "tarfile",
    "tempfile",
    "time",
    "typing",
    "unicodedata",
)


def preflight_lacking(names):
    # type: (tuple[str, ...]) -> list[str]
    """The modules of `names` that cannot be imported here, or that one of them needs."""
    missing = set()
    for name in names:
        try:
            __import__(name)
        except ImportError as exc:
            missing.add(getattr(exc, "name", None) or name)
    return sorted(missing)


def preflight_unfit():
    # type: () -> str | None
    """Why this Python cannot run the runner, or None when it can."""
    version = ".".join(str(part) for part in sys.version_info[:3])
    which = "Python " + version + " at " + (sys.executable or "an unknown path")
    if tuple(sys.version_info[:2]) < PREFLIGHT_OLDEST:
        return which + " is too old: genjob's runner needs Python 3.8 or later"
    missing = preflight_lacking(PREFLIGHT_NEEDS)
    if missing:
        return (
            which
            + " lacks standard library modules genjob's runner needs: "
            + ", ".join(missing)
            + " (a minimal install, such as Debian's python3-minimal, leaves them out): install"
            " the full python3 there, or set the host's `python` to one that has them"
        )
    return None


def preflight():
    # type: () -> None
    """Say why this Python does not fit and exit, or read the runner and run it here."""
    why = preflight_unfit()
    if why is not None:
        sys.stderr.write(UNFIT + why + "\n")
        sys.stderr.flush()
        sys.exit(UNFIT_STATUS)
    stdin = sys.stdin.buffer
    source = stdin.read(int(stdin.readline()))
    exec(compile(source, "genjob-runner", "exec"), globals())


if __name__ == "__main__":
    preflight()
