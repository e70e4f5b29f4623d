"""A repository's `.gen/config.toml` (`core.store.config`): the defaults, each bad setting named
with its file and fault, the host rules, and the refusal of a config another user could
have written. (Check settings: test_cli_check.py; the operator's floor: test_trust.py.)"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from core.errors import BadInput, GenjobError, TooLarge, Untrusted
from core.review.consent import allow_as_written
from core.store.config import (
    DEFAULT_CONFIG,
    MAX_CONFIG_BYTES,
    CheckRuns,
    Config,
    Limits,
    Policy,
    load_config,
    load_operator_config,
)
from core.store.layout import Layout, user_config_dir
from core.store.repo import init_repo


@pytest.fixture
def gen(tmp_path: Path) -> Layout:
    layout, _ = init_repo(tmp_path / "repo")
    return layout


def write(layout: Layout, text: str | bytes) -> Path:
    """Write the config as its operator would, and allow what it runs (`genjob allow`)."""
    data = text.encode() if isinstance(text, str) else text
    layout.config.write_bytes(data)
    os.chmod(layout.config, 0o644)
    with contextlib.suppress(GenjobError):
        allow_as_written(layout)
    return layout.config


def fault(layout: Layout, text: str | bytes) -> str:
    """The one-line error `load_config` gives for `text`, which must name the file."""
    path = write(layout, text)
    with pytest.raises(BadInput) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message.removeprefix(f"{path}: ")


# --- defaults ----------------------------------------------------------------------------


def test_a_missing_config_means_the_defaults(tmp_path: Path) -> None:
    config = load_config(tmp_path / ".gen" / "config.toml")
    assert config == Config()
    assert config.policy.require_signature is True
    assert config.policy.lease_ttl == 120.0
    assert config.policy.commit_on_approve is False
    assert config.policy.require_checks == [] and config.policy.candidates == 1
    assert config.limits == Limits(
        max_file_bytes=64 << 20, max_total_bytes=512 << 20, max_files=1000, max_tail_bytes=64 << 10
    )
    assert config.hosts == {} and config.checks == {}
    assert config.check_runs == CheckRuns(on_receipt=True, concurrency=2)


def test_an_empty_config_means_the_defaults(gen: Layout) -> None:
    write(gen, "")
    assert load_config(gen.config) == Config()


def test_the_config_init_writes_is_the_default_config(gen: Layout) -> None:
    assert gen.config.read_text() == DEFAULT_CONFIG
    config = load_config(gen.config)
    assert config.policy == Policy() and config.limits == Limits()
    assert sorted(config.hosts) == ["local", "tidy"]
    local, tidy = config.hosts["local"], config.hosts["tidy"]
    assert local.transport == "local" and local.stand_in and local.concurrency == 2
    assert tidy.transport == "local" and not tidy.stand_in and tidy.timeout == 120
    assert config.checks == {}  # the examples are commented out


def test_settings_are_read(gen: Layout) -> None:
    write(
        gen,
        "[policy]\nrequire_signature = false\nlease_ttl = 30.5\ncandidates = 3\n"
        "[limits]\nmax_files = 5\n"
        "[check_runs]\non_receipt = false\nconcurrency = 1\n"
        '[hosts.box]\ntransport = "ssh"\naddress = "gen@box"\nidentity = "~/.ssh/k"\n'
        'generator = "aider"\nport = 2222\npython = "/opt/py/bin/python3"\n',
    )
    config = load_config(gen.config)
    assert config.policy.require_signature is False and config.policy.lease_ttl == 30.5
    assert config.policy.candidates == 3 and config.limits.max_files == 5
    assert config.limits.max_file_bytes == Limits().max_file_bytes
    assert config.check_runs == CheckRuns(on_receipt=False, concurrency=1)
    box = config.hosts["box"]
    assert (box.address, box.identity, box.port, box.python) == (
        "gen@box",
        "~/.ssh/k",
        2222,
        "/opt/py/bin/python3",
    )
    assert box.known_hosts == "~/.ssh/known_hosts" and box.concurrency == 1 and box.timeout == 900


def test_a_config_is_frozen() -> None:
    with pytest.raises(ValueError, match="frozen"):
        Config().policy.require_signature = False  # type: ignore[misc]


# --- bad settings ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("[policy]\nrequire_signatures = true\n", "policy.require_signatures: unknown setting"),
        ("[polcy]\n", "polcy: unknown setting"),
        (
            '[policy]\nrequire_signature = "yes"\n',
            "policy.require_signature: Input should be a valid boolean",
        ),
        ('[policy]\nlease_ttl = "120"\n', "policy.lease_ttl: "),
        ("[policy]\nlease_ttl = 0\n", "policy.lease_ttl: Input should be greater than 0"),
        ("[policy]\nlease_ttl = 1e9\n", "policy.lease_ttl: Input should be less than or equal to"),
        ("[policy]\ncandidates = 17\n", "policy.candidates: Input should be less than or equal to 16"),
        ("[limits]\nmax_files = 0\n", "limits.max_files: Input should be greater than 0"),
        ("[limits]\nmax_file_bytes = 1.5\n", "limits.max_file_bytes: Input should be a valid integer"),
        (
            "[check_runs]\nconcurrency = 65\n",
            "check_runs.concurrency: Input should be less than or equal to 64",
        ),
        ("[check_runs]\non_receipt = 1\n", "check_runs.on_receipt: Input should be a valid boolean"),
        ("policy = 3\n", "policy: "),
    ],
)
def test_a_bad_setting_is_named_with_the_file_and_the_fault(gen: Layout, toml: str, expected: str) -> None:
    assert fault(gen, toml).startswith(expected)


def test_invalid_toml_is_named(gen: Layout) -> None:
    assert fault(gen, "[policy\n").startswith("not valid TOML (")
    assert fault(gen, "a = 1\na = 2\n").startswith("not valid TOML (")


def test_a_config_that_is_not_utf8_is_named(gen: Layout) -> None:
    assert fault(gen, b'[hosts.x]\ngenerator = "\xff"\n').startswith("not valid TOML (")


def test_a_config_over_its_size_cap_is_refused(gen: Layout) -> None:
    path = write(gen, "# " + "x" * MAX_CONFIG_BYTES + "\n")
    with pytest.raises(TooLarge, match=f"over the {MAX_CONFIG_BYTES}-byte limit"):
        load_config(path)


def test_a_config_that_is_a_fifo_is_refused_without_waiting(gen: Layout) -> None:
    gen.config.unlink()
    os.mkfifo(gen.config, 0o644)
    with pytest.raises(BadInput, match=r"config\.toml"):
        load_config(gen.config)


# --- hosts -------------------------------------------------------------------------------


def host(body: str, name: str = "h") -> str:
    return f"[hosts.{name}]\n{body}\n"


LOCAL = 'transport = "local"\ngenerator = "g"\n'
SSH = 'transport = "ssh"\ngenerator = "g"\naddress = "a@b"\nidentity = "k"\n'
COMMAND = 'transport = "command"\ngenerator = "g"\n'


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        (host('transport = "local"'), "hosts.h.generator: Field required"),
        (
            host('transport = "ftp"\ngenerator = "g"'),
            "hosts.h.transport: Input should be 'local', 'ssh' or 'command'",
        ),
        (
            host('transport = "local"\ngenerator = ""'),
            "hosts.h.generator: String should have at least 1 character",
        ),
        (host('transport = "ssh"\ngenerator = "g"'), 'hosts.h: an ssh host needs address = "user@host"'),
        (
            host('transport = "ssh"\ngenerator = "g"\naddress = "a@b"'),
            'hosts.h: an ssh host needs address = "user@host" and identity = "<key file>"',
        ),
        (
            host(LOCAL + 'python = "/usr/bin/python3"'),
            "hosts.h: python is for ssh hosts",
        ),
        (
            host(COMMAND),
            'hosts.h: a command host needs command = ["program"',
        ),
        (
            host(COMMAND + "command = []"),
            "hosts.h.command: List should have at least 1 item",
        ),
        (
            host(LOCAL + 'command = ["kubectl"]'),
            'hosts.h: command and command_mode are for transport = "command" hosts',
        ),
        (
            host(SSH + "network = true"),
            'hosts.h: sandbox, network and read_only are for transport = "local" hosts',
        ),
        (
            host(LOCAL + 'read_only = ["tools/agent"]'),
            "hosts.h: read_only: 'tools/agent' is not an absolute path (or one under ~)",
        ),
        (
            host(LOCAL + 'sandbox = "docker"'),
            "hosts.h.sandbox: Input should be",
        ),
        (
            host(SSH + "port = 65536"),
            "hosts.h.port: Input should be less than 65536",
        ),
        (
            host(LOCAL + "concurrency = 0"),
            "hosts.h.concurrency: Input should be greater than 0",
        ),
        (
            host(LOCAL + "candidates = 0"),
            "hosts.h.candidates: Input should be greater than",
        ),
        (
            host(LOCAL, name='"has space"'),
            "hosts: 'has space': a host name is up to 64 letters, digits, '.', '_' or '-'",
        ),
        (host(LOCAL, name="-dash"), "hosts: '-dash': a host name is"),
        (host(LOCAL, name="h" * 65), "hosts: "),
    ],
)
def test_a_bad_host_is_named(gen: Layout, toml: str, expected: str) -> None:
    assert fault(gen, toml).startswith(expected)


def test_good_hosts_of_each_transport(gen: Layout) -> None:
    write(
        gen,
        host(LOCAL + 'sandbox = "none"\nnetwork = true\nread_only = ["~/tools", "/opt"]', "l")
        + host(SSH, "s")
        + host(COMMAND + 'command = ["ssh", "-T", "x"]\ncommand_mode = "shell"', "c")
        + host(LOCAL, '"a.' + "b" * 62 + '"'),
    )
    hosts = load_config(gen.config).hosts
    assert hosts["l"].read_only == ["~/tools", "/opt"] and hosts["l"].network
    assert hosts["s"].sandbox == "auto" and hosts["s"].command is None
    assert hosts["c"].command == ["ssh", "-T", "x"] and hosts["c"].command_mode == "shell"
    assert sorted(hosts) == sorted(["l", "s", "c", "a." + "b" * 62])


# --- who could have written it -----------------------------------------------------------


@pytest.mark.parametrize(("mode", "who"), [(0o664, "its group"), (0o620, "its group"), (0o646, "others")])
def test_a_config_others_could_write_is_refused_with_the_fix(gen: Layout, mode: int, who: str) -> None:
    os.chmod(gen.config, mode)
    with pytest.raises(Untrusted) as caught:
        load_config(gen.config)
    assert str(caught.value) == (
        f"{gen.config}: a config.toml that another user could have written is not trusted: "
        f"{gen.config} is writable by {who} (mode {mode:04o}); fix with: chmod go-w {gen.config}"
    )


def test_a_config_in_a_group_writable_gen_folder_is_refused(gen: Layout) -> None:
    os.chmod(gen.gen, 0o775)
    with pytest.raises(Untrusted, match=rf"{gen.gen} is writable by its group .*chmod go-w {gen.gen}$"):
        load_config(gen.config)


def test_a_symlinked_config_is_refused(gen: Layout, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text("[policy]\nrequire_signature = false\n")
    gen.config.unlink()
    gen.config.symlink_to(elsewhere)
    with pytest.raises(Untrusted, match="is a symlink; replace it with the file or folder itself"):
        load_config(gen.config)


@pytest.mark.skipif(os.getuid() != 0, reason="giving a file to another user needs root")
def test_a_config_owned_by_another_user_is_refused(gen: Layout) -> None:
    os.chown(gen.config, 54321, -1)
    with pytest.raises(Untrusted, match=r"config\.toml is owned by uid 54321, not .*; fix with: chown "):
        load_config(gen.config)


def test_a_read_only_config_of_the_owner_is_trusted(gen: Layout) -> None:
    os.chmod(gen.config, 0o400)
    assert load_config(gen.config).hosts


# --- the operator's own config -----------------------------------------------------------


def test_no_operator_config_means_its_defaults() -> None:
    assert not (user_config_dir() / "config.toml").exists()
    policy = load_operator_config().policy
    assert policy.require_signature is False and policy.trust_repository_keys is True


def test_a_bad_operator_setting_is_named_with_its_file() -> None:
    folder = user_config_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text("[policy]\nrequire_checks = []\n")
    with pytest.raises(BadInput) as caught:
        load_operator_config()
    assert str(caught.value) == f"{folder / 'config.toml'}: policy.require_checks: unknown setting"


def test_a_repository_setting_the_operator_does_not_force_is_kept(gen: Layout) -> None:
    folder = user_config_dir()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text("[policy]\nrequire_signature = false\n")
    write(gen, "[policy]\nrequire_signature = true\n")
    assert load_config(gen.config).policy.require_signature is True
