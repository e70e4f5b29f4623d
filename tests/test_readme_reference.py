"""The reference shipped in `tui/reference/`, `genjob help`, and the short README that
points to them.

`genjob help` runs as the real program, as a process: piped it prints a topic's own
Markdown, in a terminal (a pseudo-terminal here) Rich draws it, and it never loads
Textual. The topics are held to the code they describe: every command and option, the
hosts' and the operator's config examples, and no link that cannot work from inside a
package.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest

from core.store.config import DEFAULT_CONFIG, Config, OperatorConfig
from tui.cli.commands import main
from tui.reference import HERE, TOPICS, summary, topic_text

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GENJOB = Path(sys.executable).parent / "genjob"
README_LIMIT = 8192


def genjob(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GENJOB), *args], capture_output=True, text=True, cwd=ROOT)


def loaded_packages(*args: str) -> set[str]:
    """The top-level packages `genjob ARGS` imports, stdout a pipe."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", str(GENJOB), *args], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }


def in_a_terminal(*args: str) -> tuple[str, str]:
    """What `genjob ARGS` writes to a pseudo-terminal 100 columns wide, and the modules it
    loaded (from `-X importtime`, on stderr, a pipe)."""
    main_fd, child_fd = pty.openpty()
    env = {**os.environ, "COLUMNS": "100", "TERM": "xterm-256color"}
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", str(GENJOB), *args],
        stdout=child_fd,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
        text=True,
    )
    os.close(child_fd)
    chunks: list[bytes] = []
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        chunks.append(chunk)
    _, stderr = proc.communicate()
    os.close(main_fd)
    assert proc.returncode == 0, stderr[-2000:]
    return b"".join(chunks).decode(), stderr


# -- the topics ----------------------------------------------------------------------------------
def test_every_topic_file_is_listed_and_every_listed_topic_has_a_file() -> None:
    on_disk = sorted(p.stem for p in HERE.glob("*.md"))
    assert on_disk == sorted(TOPICS)


@pytest.mark.parametrize("topic", TOPICS)
def test_a_topic_opens_with_its_title_and_one_line_on_what_it_covers(topic: str) -> None:
    title, line, *_ = topic_text(topic).split("\n\n")
    assert re.fullmatch(r"# [A-Z][^\n]*", title), f"{topic}: starts with a `# ` title"
    assert "\n" not in line and line.endswith(".") and len(line) <= 120, f"{topic}: {line!r}"
    assert summary(topic) == line


@pytest.mark.parametrize("topic", TOPICS)
def test_a_topic_has_no_link_that_breaks_inside_the_package(topic: str) -> None:
    """Links to files or images resolve against nothing once the topic is in a wheel."""
    assert not re.findall(r"\]\([^)]*\)", topic_text(topic)), f"{topic} holds a Markdown link"


def test_the_commands_topic_names_every_command_and_each_of_its_options() -> None:
    table = topic_text("commands").split("\n## Every command\n", 1)[1].split("\n## ", 1)[0]
    rows = {m[1]: m[0] for m in re.finditer(r"^\| `genjob (\w+).*$", table, re.M)}
    ctx = click.Context(main)
    commands = main.list_commands(ctx)
    assert sorted(rows) == sorted(commands), "one row per command"
    for name in commands:
        command = main.get_command(ctx, name)
        assert command is not None
        options = [p.opts for p in command.params if isinstance(p, click.Option) and "--help" not in p.opts]
        missing = [opts for opts in options if not any(named_in(opt, rows[name]) for opt in opts)]
        assert not missing, f"genjob {name}: options missing from its row: {missing}"


def named_in(option: str, row: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", row) is not None


def test_the_hosts_topics_local_host_is_the_one_init_writes() -> None:
    written = tomllib.loads(DEFAULT_CONFIG)["hosts"]["local"]
    shown = tomllib.loads(toml_blocks("hosts")[0])["hosts"]["local"]
    assert (shown["transport"], shown["generator"]) == (written["transport"], written["generator"])


def test_every_config_example_of_the_hosts_topic_is_valid() -> None:
    """A whole host table validates as one; a preset's lone `generator` line does in a host."""
    for block in toml_blocks("hosts"):
        doc = tomllib.loads(block)
        if "hosts" not in doc:
            assert set(doc) == {"generator"}, block
            doc = {"hosts": {"preset": {"transport": "local", **doc}}}
        Config.model_validate(doc)


def test_the_trust_topics_operator_floor_is_a_valid_operator_config() -> None:
    OperatorConfig.model_validate(tomllib.loads(toml_blocks("trust")[0]))


def toml_blocks(topic: str) -> list[str]:
    return re.findall(r"```toml\n(.*?)```", topic_text(topic), re.DOTALL)


# -- genjob help ---------------------------------------------------------------------------------
def test_help_with_no_topic_lists_every_topic_with_its_line() -> None:
    proc = genjob("help")
    assert proc.returncode == 0 and proc.stderr == ""
    listed = [line.split(None, 1) for line in proc.stdout.splitlines() if line.startswith("  ")]
    assert [(name, text) for name, text in listed] == [(t, summary(t)) for t in TOPICS]
    assert "genjob help TOPIC" in proc.stdout


@pytest.mark.parametrize(
    ("given", "topic"),
    [("threat-model", "threat-model"), ("thr", "threat-model"), ("Arch", "architecture"), ("f", "formats")],
)
def test_piped_a_topic_is_its_own_markdown(given: str, topic: str) -> None:
    proc = genjob("help", given)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout == topic_text(topic)


@pytest.mark.parametrize(
    ("given", "fault"),
    [
        ("zzz", "no topic 'zzz'"),
        ("t", "'t' could be trust or threat-model"),
        ("", "no topic ''"),
        ("../../README", "no topic '../../README'"),  # a path names no file to read
        ("/etc/passwd", "no topic '/etc/passwd'"),
    ],
)
def test_an_unknown_or_ambiguous_topic_gets_one_line_naming_the_topics(given: str, fault: str) -> None:
    proc = genjob("help", given)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert fault in proc.stderr and f"the topics: {', '.join(TOPICS)}" in proc.stderr


def test_a_topic_name_with_escape_sequences_is_shown_not_obeyed() -> None:
    proc = genjob("help", "\x1b]8;;http://x\x07\x1b[2J")
    assert proc.returncode == 2 and "\x1b" not in proc.stderr and "␛" in proc.stderr


def test_in_a_terminal_rich_draws_the_topic_and_textual_is_not_loaded() -> None:
    shown, stderr = in_a_terminal("help", "formats")
    assert "\x1b[" in shown, "styled for the terminal"
    assert "## On disk" not in shown and "On disk" in shown, "headings drawn, not printed as Markdown"
    loaded = {
        line.rsplit("|", 1)[1].strip().split(".")[0] for line in stderr.splitlines() if "import time:" in line
    }
    assert "rich" in loaded and "textual" not in loaded


@pytest.mark.parametrize("args", [("help",), ("help", "hosts")])
def test_help_loads_neither_textual_nor_rich_when_piped(args: tuple[str, ...]) -> None:
    loaded = loaded_packages(*args)
    assert not loaded & {"textual", "rich", "asyncssh", "pydantic", "cryptography"}, sorted(loaded)


@pytest.mark.parametrize("args", [("help",), ("help", "threat-model")])
def test_a_reader_that_has_left_ends_help_quietly(args: tuple[str, ...]) -> None:
    """As `genjob help threat-model | true`: the pipe's reader is gone before help writes."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([str(GENJOB), *args], stdout=write_end, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)
    assert proc.returncode == 1 and proc.stderr == ""


def test_genjob_help_option_points_to_the_reference() -> None:
    proc = genjob("--help")
    assert proc.returncode == 0
    assert "genjob help TOPIC" in " ".join(proc.stdout.split())
    assert re.search(r"^  help\s", proc.stdout, re.M), "help is among the commands"


# -- the README ----------------------------------------------------------------------------------
def test_the_readme_is_short() -> None:
    size = len(README.read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes; the reference topics hold the rest"


def test_every_genjob_help_the_readme_names_is_a_topic_and_it_names_each() -> None:
    named = re.findall(r"genjob help ([a-z][\w-]*)", README.read_text())
    assert set(named) <= set(TOPICS), f"not topics: {sorted(set(named) - set(TOPICS))}"
    assert set(TOPICS) <= set(named), (
        f"topics the README's map leaves out: {sorted(set(TOPICS) - set(named))}"
    )


def test_every_genjob_help_a_topic_names_is_a_topic() -> None:
    for topic in TOPICS:
        named = set(re.findall(r"genjob help ([a-z][\w-]*)", topic_text(topic))) - {"TOPIC"}
        wrong = [n for n in named if not any(t.startswith(n) for t in TOPICS)]
        assert not wrong, f"{topic} names no topic: {wrong}"


def test_the_readme_shows_one_screenshot_that_exists() -> None:
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README.read_text())
    assert images == ["screenshots/board.svg"] and (ROOT / images[0]).is_file()


def test_the_screenshots_the_dashboard_topic_names_exist() -> None:
    named = set(re.findall(r"`([\w-]+\.svg)`", topic_text("dashboard")))
    on_disk = {p.name for p in (ROOT / "screenshots").glob("*.svg")}
    assert named == on_disk
