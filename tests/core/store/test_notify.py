"""Notifications: events, the operator's `[notify]`, and each channel with real programs."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
import time
from pathlib import Path

import pytest
from corekit import set_config
from shipkit import wait_dead

from core.errors import BadInput
from core.store.config import NotifySettings, load_config, load_operator_config
from core.store.layout import Layout, user_config_dir
from core.store.notify import SCHEMA, Event, Notifier, check_failed, host_failed, receipt_arrived

ALL = ["receipt", "check_failed", "approval", "host_failed"]


def operator_config(text: str) -> Path:
    folder = user_config_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.toml"
    path.write_text(textwrap.dedent(text))
    return path


def writes_stdin_to(path: Path) -> list[str]:
    """A command that appends what it reads on stdin to `path`."""
    code = f"import sys; open({str(path)!r}, 'ab').write(sys.stdin.buffer.read())"
    return [sys.executable, "-c", code]


def settings(**channels: object) -> NotifySettings:
    return NotifySettings.model_validate(channels)


def notifier(s: NotifySettings, said: list[str], bells: list[int] | None = None) -> Notifier:
    rung = bells if bells is not None else []
    return Notifier(s, Path("/repo"), "test", bell=lambda: rung.append(1), said=said.append)


def stand_in_notify_send(folder: Path, log: Path) -> None:
    """A `notify-send` on PATH that keeps its argv, one JSON list a line."""
    folder.mkdir(parents=True, exist_ok=True)
    program = folder / "notify-send"
    program.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    program.chmod(program.stat().st_mode | stat.S_IXUSR)


def test_a_command_gets_each_event_it_opted_into_as_json_on_stdin(tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    said: list[str] = []
    n = notifier(settings(command={"run": writes_stdin_to(out), "events": ["receipt", "host_failed"]}), said)
    n.send(receipt_arrived("a" * 32, "ok", host="scratch"))
    n.send(check_failed("b" * 32, "tests", "tests failed: 2 errors"))  # not opted into
    n.send(host_failed("c" * 32, "gpu", 2, "ssh: connection refused"))
    n.close()
    docs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [d["event"] for d in docs] == ["receipt", "host_failed"]
    assert docs[0]["schema"] == SCHEMA and docs[0]["key"] == "a" * 32 and docs[0]["status"] == "ok"
    assert docs[0]["repository"] == "/repo" and docs[0]["source"] == "test" and docs[0]["host"] == "scratch"
    assert docs[1]["reason"] == "ssh: connection refused" and docs[1]["attempt"] == 2
    assert said == []


def test_nothing_is_sent_by_default(tmp_path: Path) -> None:
    said: list[str] = []
    bells: list[int] = []
    n = notifier(NotifySettings(), said, bells)
    for kind in ALL:
        n.send(Event(kind, "a" * 32, "x"))
    n.close()
    assert bells == [] and said == [] and n._thread is None


def test_the_bell_rings_only_for_its_events() -> None:
    bells: list[int] = []
    n = notifier(settings(bell={"events": ["check_failed"]}), [], bells)
    n.deliver(receipt_arrived("a" * 32, "ok"))
    n.deliver(check_failed("a" * 32, "tests", "failed"))
    assert bells == [1]


def test_a_failing_command_is_said_and_the_next_event_still_goes_out(tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    fails = [sys.executable, "-c", "import sys; sys.stderr.write('no route\\x1b[2J to host'); sys.exit(3)"]
    said: list[str] = []
    failing = notifier(settings(command={"run": fails, "events": ALL}), said)
    failing.deliver(receipt_arrived("a" * 32, "ok"))
    assert said == [f"notify command {sys.executable}: exit 3: no route\u241b[2J to host"]
    working = notifier(settings(command={"run": writes_stdin_to(out), "events": ALL}), said)
    working.deliver(receipt_arrived("a" * 32, "ok"))
    assert out.exists()


def test_a_command_that_hangs_is_killed_with_what_it_started(tmp_path: Path) -> None:
    pidfile = tmp_path / "child"
    hangs = ["sh", "-c", f"sleep 600 & echo $! > {pidfile}; wait"]
    said: list[str] = []
    notifier(settings(command={"run": hangs, "events": ALL, "timeout": 0.5}), said).deliver(
        receipt_arrived("a" * 32, "ok")
    )
    assert said == ["notify command sh: stopped after 0.5 s"]
    # The group is killed as the call returns; the kill lands once the child next runs.
    assert wait_dead([int(pidfile.read_text())]) == []


def test_a_command_that_cannot_start_is_said(tmp_path: Path) -> None:
    said: list[str] = []
    missing = str(tmp_path / "no-such-hook")
    notifier(settings(command={"run": [missing], "events": ALL}), said).deliver(
        receipt_arrived("a" * 32, "ok")
    )
    assert len(said) == 1 and said[0].startswith(f"notify command {missing}: cannot run it (")


def test_send_never_waits_for_a_slow_command(tmp_path: Path) -> None:
    """The board's loop and the worker's call `send`: a command that blocks holds only the
    notifier's own thread, and what waits past MAX_WAITING is dropped and said once."""
    gate = tmp_path / "gate"
    blocks = [
        sys.executable,
        "-c",
        f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.01)",
    ]
    said: list[str] = []
    n = notifier(settings(command={"run": blocks, "events": ALL, "timeout": 300}), said)
    for _ in range(200):
        n.send(receipt_arrived("a" * 32, "ok"))
    assert said == ["notifications: more than 64 waiting; receipt dropped"]
    gate.write_text("")
    n.close()


def test_notify_send_on_path_gets_the_text_shown_never_obeyed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reason is a generator's text: ESC, markup and a leading dash reach notify-send as
    characters, the body after `--`."""
    log = tmp_path / "argv.jsonl"
    stand_in_notify_send(tmp_path / "bin", log)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    n = notifier(settings(desktop={"events": ["host_failed"]}), [])
    n.deliver(host_failed("a" * 32, "gpu", 1, '\x1b]8;;http://x\x07<a href="http://x">fix</a>\nnext'))
    [argv] = [json.loads(line) for line in log.read_text().splitlines()]
    assert argv[:3] == ["--app-name=genjob", "--", "genjob: host failed"]
    body = argv[3]
    assert "\x1b" not in body and "\x07" not in body and "\n" not in body
    assert "<a" not in body and "&lt;a href" in body


def test_a_leading_dash_in_the_text_is_no_option_of_notify_send(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "argv.jsonl"
    stand_in_notify_send(tmp_path / "bin", log)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    notifier(settings(desktop={"events": ["check_failed"]}), []).deliver(
        check_failed("a" * 32, "tests", "--urgency=critical --icon=/etc/passwd")
    )
    [argv] = [json.loads(line) for line in log.read_text().splitlines()]
    assert argv.index("--") < argv.index("--urgency=critical --icon=/etc/passwd")


def test_without_notify_send_the_desktop_channel_says_so_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    said: list[str] = []
    n = notifier(settings(desktop={"events": ALL}), said)
    n.deliver(receipt_arrived("a" * 32, "ok"))
    n.deliver(receipt_arrived("b" * 32, "ok"))
    assert said == ["notify desktop: notify-send is not on PATH; no desktop notifications"]


def test_the_operators_notify_settings_load_from_their_own_config(tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    operator_config(
        f"""
        [notify.bell]
        events = ["approval"]
        [notify.command]
        run = {json.dumps(writes_stdin_to(out))}
        events = ["receipt"]
        timeout = 5
        """
    )
    n = Notifier.of_operator(tmp_path, "worker", bell=lambda: None, said=lambda _: None)
    assert n.settings.bell.events == ["approval"] and n.settings.command is not None
    n.deliver(receipt_arrived("a" * 32, "ok"))
    assert json.loads(out.read_text())["source"] == "worker"


@pytest.mark.parametrize(
    ("text", "fault"),
    [
        ('[notify.bell]\nevents = ["everything"]\n', "notify.bell.events.0: Input should be 'receipt'"),
        (
            '[notify.command]\nrun = []\nevents = ["receipt"]\n',
            "notify.command.run: List should have at least 1",
        ),
        ('[notify.command]\nrun = "curl x"\n', "notify.command.run: Input should be a valid list"),
        ("[notify.sms]\nevents = []\n", "notify.sms: unknown setting"),
    ],
)
def test_a_bad_notify_setting_is_one_message_naming_the_file(text: str, fault: str) -> None:
    path = operator_config(text)
    with pytest.raises(BadInput) as caught:
        load_operator_config()
    assert str(caught.value).startswith(f"{path}: {fault}")
    said: list[str] = []
    n = Notifier.of_operator(path.parent, "board", bell=lambda: None, said=said.append)
    assert said == [f"notifications are off: {caught.value}"] and n.settings == NotifySettings()


def test_a_repositorys_notify_is_refused_never_run(repo: Layout, tmp_path: Path) -> None:
    """A cloned repository's config.toml must never run a command with the operator's
    rights: `[notify]` there is refused, consent or not, and no notifier reads it."""
    out = tmp_path / "ran"
    set_config(
        repo, f"[notify.command]\nrun = {json.dumps(writes_stdin_to(out))}\nevents = {json.dumps(ALL)}\n"
    )
    with pytest.raises(BadInput) as caught:
        load_config(repo.config)
    assert str(caught.value) == (
        f"{repo.config}: [notify] runs a command with your rights, so it is yours to set, never a "
        "repository's: move it to your own config.toml (genjob help dashboard, Notifications)"
    )
    n = Notifier.of_operator(repo.root, "board", bell=lambda: None, said=lambda _: None)
    n.deliver(receipt_arrived("a" * 32, "ok"))
    assert n.settings == NotifySettings() and not out.exists()


def test_an_event_json_is_ascii_whatever_its_text(tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    n = notifier(settings(command={"run": writes_stdin_to(out), "events": ALL}), [])
    n.deliver(check_failed("a" * 32, "tests", "caf\u00e9 \u202e\x1b[31m"))
    raw = out.read_bytes()
    assert raw.isascii() and b"\x1b" not in raw
    assert json.loads(raw)["check"] == "tests"


def test_events_are_stamped_when_made() -> None:
    before = time.time()
    assert receipt_arrived("a" * 32, "ok").at >= before
