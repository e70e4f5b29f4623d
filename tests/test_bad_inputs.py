"""Every bad input: one message naming the file and the fault, exit code 2, nothing changed.

Each case prepares a repository, snapshots every file under it (tree, queue, receipts,
outputs, logs), runs one `genjob` command and checks the snapshot is unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from corekit import cli, mint, receive, set_config, sha, tree_state, v2_job, write_receipt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.model.canonical import MAX_JSON_BYTES
from core.model.models import V1, job_bytes
from core.store.layout import Layout
from core.store.signing import fingerprint, sign

AWS_KEY = "AKIA" + "QWERTYUIOPASDFGH"
Case = Callable[[Layout, Ed25519PrivateKey], tuple[list[str], list[str]]]


def queued_doc(layout: Layout, text: Callable[[str], str]) -> tuple[list[str], list[str]]:
    """A job file whose bytes are a valid document's, rewritten by `text`."""
    job = v2_job("A job.", {"src/app.py": None})
    path = layout.queue / f"{job.key}.json"
    path.write_bytes(text(job_bytes(job).decode()).encode("utf-8", "surrogateescape"))
    return ["claim", job.key, "--worker", "w1"], [str(path)]


def doc_case(text: Callable[[str], str], fault: str) -> Case:
    def make(layout: Layout, signer: Ed25519PrivateKey) -> tuple[list[str], list[str]]:
        args, names = queued_doc(layout, text)
        return args, [*names, fault]

    return make


def mint_case(args: list[str], *fault: str, prepare: Callable[[Layout], None] | None = None) -> Case:
    def make(layout: Layout, signer: Ed25519PrivateKey) -> tuple[list[str], list[str]]:
        if prepare is not None:
            prepare(layout)
        return ["mint", *args], list(fault)

    return make


def link_file(layout: Layout) -> None:
    (layout.root / "src/link.py").symlink_to("app.py")


def link_parent(layout: Layout) -> None:
    outside = layout.root.parent / "outside"
    outside.mkdir()
    (outside / "mod.py").write_text("x = 1\n")
    (layout.root / "lib").symlink_to(outside)


def secret_file(layout: Layout) -> None:
    (layout.root / "src/conf.py").write_text(f'KEY = "{AWS_KEY}"\n')


def v1_job(layout: Layout) -> None:
    mint(layout, "Same work.", ["src/app.py", "src/util.py"], schema=V1)


def received_case(tamper: Callable[[Layout, str, Ed25519PrivateKey], None], *fault: str) -> Case:
    """A job with a good signed receipt, then `tamper`ed; `genjob apply` must refuse it."""

    def make(layout: Layout, signer: Ed25519PrivateKey) -> tuple[list[str], list[str]]:
        job = mint(layout, "Return two.", ["src/app.py"])
        receive(layout, job.key, {"src/app.py": b"def main():\n    return 2\n"}, signer)
        tamper(layout, job.key, signer)
        return ["apply", job.key], [f"{layout.receipt(job.key)}: does not verify", *fault]

    return make


def rewrite_receipt(**changes: object) -> Callable[[Layout, str, Ed25519PrivateKey], None]:
    def tamper(layout: Layout, key: str, signer: Ed25519PrivateKey) -> None:
        doc = json.loads(layout.receipt(key).read_bytes())
        doc.update(changes)
        write_receipt(layout, key, doc, signer)

    return tamper


def drift(layout: Layout, key: str, signer: Ed25519PrivateKey) -> None:
    [out] = layout.out.glob("*/src/app.py")
    out.write_bytes(b"tampered\n")


def unsigned(layout: Layout, key: str, signer: Ed25519PrivateKey) -> None:
    layout.signature(key).unlink()


def untrusted(layout: Layout, key: str, signer: Ed25519PrivateKey) -> None:
    rogue = Ed25519PrivateKey.generate()
    layout.signature(key).write_bytes(sign(rogue, layout.receipt(key).read_bytes()))


def forged(layout: Layout, key: str, signer: Ed25519PrivateKey) -> None:
    rogue = Ed25519PrivateKey.generate()
    doc = json.loads(sign(rogue, layout.receipt(key).read_bytes()))
    doc["key"] = fingerprint(signer.public_key())
    layout.signature(key).write_text(json.dumps(doc))


def another_jobs_receipt(layout: Layout, key: str, signer: Ed25519PrivateKey) -> None:
    other = mint(layout, "Another job.", ["src/util.py"])
    receive(layout, other.key, {"src/util.py": b"x = 2\n"}, signer)
    layout.receipt(key).write_bytes(layout.receipt(other.key).read_bytes())
    layout.signature(key).write_bytes(layout.signature(other.key).read_bytes())


def malformed_receipt(layout: Layout, key: str, signer: Ed25519PrivateKey) -> None:
    layout.receipt(key).write_bytes(layout.receipt(key).read_bytes()[:-5])


def linked_output(layout: Layout, key: str, signer: Ed25519PrivateKey) -> None:
    [out] = layout.out.glob("*/src/app.py")
    out.unlink()
    out.symlink_to(layout.root / "src/app.py")


def small_limits(layout: Layout, key: str, signer: Ed25519PrivateKey) -> None:
    text = layout.config.read_text()
    set_config(layout, text.replace("max_file_bytes = 67108864", "max_file_bytes = 8"))


def config_case(text: str, *fault: str) -> Case:
    def make(layout: Layout, signer: Ed25519PrivateKey) -> tuple[list[str], list[str]]:
        v2 = v2_job("Waiting.", {"src/app.py": sha((layout.root / "src/app.py").read_bytes())})
        (layout.queue / f"{v2.key}.json").write_bytes(job_bytes(v2))
        set_config(layout, text)
        return ["claim", "--worker", "w1"], [str(layout.config), *fault]

    return make


def fifo_case(where: Callable[[Layout, str], Path], args: list[str], *fault: str) -> Case:
    """A FIFO where genjob expects a regular file (reading it would wait forever), next
    to a queued job whose key replaces KEY in `args`."""

    def make(layout: Layout, signer: Ed25519PrivateKey) -> tuple[list[str], list[str]]:
        v2 = v2_job("Waiting.", {"src/app.py": sha((layout.root / "src/app.py").read_bytes())})
        (layout.queue / f"{v2.key}.json").write_bytes(job_bytes(v2))
        path = where(layout, v2.key)
        path.unlink(missing_ok=True)
        os.mkfifo(path)
        return [a.replace("KEY", v2.key) for a in args], [path.name, *fault]

    return make


def big_instruction(text: str) -> str:
    return text.replace('"A job."', json.dumps("x" * MAX_JSON_BYTES))


def trust_case(key_file: Callable[[], bytes], *fault: str) -> Case:
    """`genjob trust FILE` on a file (beside the repository) that is not a worker's public key."""

    def make(layout: Layout, signer: Ed25519PrivateKey) -> tuple[list[str], list[str]]:
        path = layout.root.parent / "given.key"
        path.write_bytes(key_file())
        return ["trust", str(path)], [f"genjob: {path}: ", *fault]

    return make


def private_openssh() -> bytes:
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )


def private_pkcs8() -> bytes:
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def public_openssh(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)


# Every command that takes a job key, with what else it needs.
KEY_COMMANDS: dict[str, list[str]] = {
    "show": [],
    "verify": [],
    "apply": [],
    "reject": ["--reason", "no"],
    "replay": [],
    "requeue": [],
    "cancel": [],
    "discard": [],
    "claim": ["--worker", "w1"],
}


def unknown_key_case(command: str, key: str) -> Case:
    def make(layout: Layout, signer: Ed25519PrivateKey) -> tuple[list[str], list[str]]:
        return [command, key, *KEY_COMMANDS[command]], [f"genjob: {key}: ", "`genjob ls`"]

    return make


CASES: dict[str, Case] = {
    "malformed-json": doc_case(lambda t: t[:-3], "malformed JSON"),
    "not-utf8": doc_case(lambda t: t.replace("A job.", "A job.\udcff"), "not UTF-8"),
    "oversized-json": doc_case(big_instruction, f"over the {MAX_JSON_BYTES}-byte limit"),
    "duplicate-keys": doc_case(
        lambda t: t.replace("{", '{"created_at": 1,', 1), "duplicate key 'created_at'"
    ),
    "nan": doc_case(lambda t: t.replace('"created_at": 1767225600', '"created_at": NaN'), "NaN is not JSON"),
    "infinity": doc_case(
        lambda t: t.replace('"created_at": 1767225600', '"created_at": Infinity'), "Infinity is not JSON"
    ),
    "deep-nesting": doc_case(lambda t: t.replace("null", "[" * 200 + "]" * 200), "nested deeper"),
    "4300-digit-integer": doc_case(lambda t: t.replace("1767225600", "9" * 4300), "integer with 4300 digits"),
    "unknown-field": doc_case(lambda t: t.replace("{", '{"priority": 1,', 1), "priority: unknown field"),
    "wrong-schema": doc_case(lambda t: t.replace("genjob.v2", "genjob.v0"), "unknown schema 'genjob.v0'"),
    "not-an-object": doc_case(lambda t: "[" + t + "]", "a job document must be a JSON object"),
    "edited-document": doc_case(lambda t: t.replace("A job.", "Another job."), "does not match the document"),
    "key-reused-with-other-content": mint_case(
        ["--schema", "v1", "-m", "Same work.", "src/util.py", "src/app.py"],
        ".gen/queue/",
        "is already used by digest",
        prepare=v1_job,
    ),
    "path-dotdot": mint_case(["-m", "x", "../x"], "../x: outside the repository"),
    "path-absolute": mint_case(["-m", "x", "/etc/passwd"], "/etc/passwd: outside the repository"),
    "path-escaping": mint_case(["-m", "x", "a/../../b"], "a/../../b: outside the repository"),
    "path-in-gen": mint_case(["-m", "x", ".gen/config.toml"], ".gen/config.toml", "under .gen/"),
    "path-in-git": mint_case(["-m", "x", ".git/config"], ".git/config", "under .git/"),
    "new-path-escaping": mint_case(["-m", "x", "--new", "../new.py"], "../new.py: outside the repository"),
    "symlinked-file": mint_case(
        ["-m", "x", "src/link.py"], "src/link.py: a symlink, not a regular file", prepare=link_file
    ),
    "symlinked-parent": mint_case(
        ["-m", "x", "lib/mod.py"], "lib/mod.py: lib is a symlink, not a folder", prepare=link_parent
    ),
    "missing-file": mint_case(["-m", "x", "src/nope.py"], "src/nope.py: no such file"),
    "new-path-exists": mint_case(["-m", "x", "--new", "src/app.py"], "src/app.py: exists already"),
    "secret-in-instruction": mint_case(
        ["-m", f"Deploy with {AWS_KEY}", "src/app.py"], "instruction: looks like it holds a secret"
    ),
    "secret-in-file": mint_case(
        ["-m", "Tidy.", "src/conf.py"], "src/conf.py: looks like it holds a secret", prepare=secret_file
    ),
    "outputs-outside-the-job": received_case(
        rewrite_receipt(outputs={"README.md": sha(b"x")}), "paths: outside the job: README.md"
    ),
    "output-path-escapes": received_case(rewrite_receipt(outputs={"../x": sha(b"x")}), "'..' is not allowed"),
    "drifted-output-hash": received_case(drift, "hashes: artifact drift at src/app.py"),
    "linked-output": received_case(linked_output, "regular: not regular files: src/app.py"),
    "over-size-output": received_case(small_limits, "size: over the limits: src/app.py"),
    "unsigned-receipt": received_case(unsigned, "unsigned receipt; policy requires a trusted signature"),
    "untrusted-signature": received_case(untrusted, "which is not a trusted key; if you run that worker"),
    "forged-signature": received_case(forged, "signature does not match the receipt"),
    "receipt-for-another-job": received_case(another_jobs_receipt, "key: receipt is for"),
    "malformed-receipt": received_case(malformed_receipt, "malformed JSON"),
    "receipt-unknown-field": received_case(rewrite_receipt(model="gpt"), "model: unknown field"),
    "receipt-status-unknown": received_case(rewrite_receipt(status="done"), "status:"),
    "config-is-a-fifo": fifo_case(
        lambda lay, key: lay.config, ["claim", "--worker", "w1"], "not a regular file"
    ),
    "audit-log-is-a-fifo": fifo_case(
        lambda lay, key: lay.events, ["mint", "-m", "x", "src/app.py"], "not a regular"
    ),
    "attempts-file-is-a-fifo": fifo_case(
        lambda lay, key: lay.attempts_file(key), ["claim", "KEY", "--worker", "w1"], "not a regular file"
    ),
    "config-not-toml": config_case("[policy\n", "not valid TOML"),
    "config-unknown-setting": config_case(
        "[policy]\nrequire_signatures = false\n", "policy.require_signatures"
    ),
    "config-wrong-type": config_case('[policy]\nrequire_signature = "no"\n', "policy.require_signature"),
    "config-bad-host": config_case(
        '[hosts.x]\ntransport = "ssh"\ngenerator = "g"\n', "an ssh host needs address"
    ),
    "config-command-host-without-command": config_case(
        '[hosts.x]\ntransport = "command"\ngenerator = "g"\n', 'a command host needs command = ["program"'
    ),
    "config-command-on-a-local-host": config_case(
        '[hosts.x]\ntransport = "local"\ncommand = ["ssh", "h"]\ngenerator = "g"\n',
        'command and command_mode are for transport = "command" hosts',
    ),
    "config-command-not-a-list": config_case(
        '[hosts.x]\ntransport = "command"\ncommand = "ssh -T h"\ngenerator = "g"\n', "hosts.x.command"
    ),
    "config-empty-command": config_case(
        '[hosts.x]\ntransport = "command"\ncommand = []\ngenerator = "g"\n', "hosts.x.command"
    ),
    "config-host-name-with-a-slash": config_case(
        '[hosts."a/b"]\ntransport = "local"\ngenerator = "g"\n', "'a/b': a host name is up to 64"
    ),
    "trust-a-private-key": trust_case(
        private_openssh, "a private key; pin the public half instead (its .pub file)"
    ),
    "trust-a-pkcs8-private-key": trust_case(private_pkcs8, "a private key; pin the public half instead"),
    "trust-a-file-that-is-no-key": trust_case(lambda: b"hello world\n", "not an OpenSSH public key"),
    "trust-an-empty-file": trust_case(lambda: b"", "not an OpenSSH public key"),
    "trust-an-rsa-key": trust_case(
        lambda: public_openssh(rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        "not an Ed25519 public key (genjob workers sign with Ed25519)",
    ),
    "trust-an-ecdsa-key": trust_case(
        lambda: public_openssh(ec.generate_private_key(ec.SECP256R1())), "not an Ed25519 public key"
    ),
    **{f"unknown-prefix-{c}": unknown_key_case(c, "abcdef12") for c in KEY_COMMANDS},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_bad_input_gets_one_message_exit_2_and_changes_nothing(
    in_repo: Layout, signer: Ed25519PrivateKey, name: str
) -> None:
    args, fragments = CASES[name](in_repo, signer)
    before = tree_state(in_repo.root)
    res = cli(*args)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert res.stdout == ""
    assert res.stderr.startswith("genjob: ") and res.stderr.count("\n") == 1, res.stderr
    for fragment in fragments:
        assert fragment in res.stderr, (fragment, res.stderr)
    assert tree_state(in_repo.root) == before


def test_a_whole_key_that_names_no_job_points_to_ls_like_a_prefix(in_repo: Layout) -> None:
    """A full key is the longest prefix: naming no job, it gets the same next step."""
    key = "abcdef12" * 4
    before = tree_state(in_repo.root)
    without_next_step = {}
    for command, extra in KEY_COMMANDS.items():
        res = cli(command, key, *extra)
        assert res.exit_code == 2 and res.stdout == ""
        assert res.stderr.startswith(f"genjob: {key}: ") and res.stderr.count("\n") == 1, res.stderr
        if "`genjob ls`" not in res.stderr:
            without_next_step[command] = res.stderr.strip()
    assert without_next_step == {}
    assert tree_state(in_repo.root) == before


@pytest.mark.parametrize("command", ["claim", "verify", "apply", "requeue", "reject", "cancel"])
def test_every_command_names_a_job_file_that_does_not_parse(in_repo: Layout, command: str) -> None:
    _, [path] = queued_doc(in_repo, lambda t: t[:-2])
    key = Path(path).stem
    extra = {"claim": ["--worker", "w1"], "reject": ["--reason", "no"]}.get(command, [])
    before = tree_state(in_repo.root)
    res = cli(command, key, *extra)
    if command == "cancel":
        assert res.exit_code == 2 and "is INVALID, not RUNNING" in res.stderr
    else:
        assert res.exit_code == 2 and res.stderr.startswith(f"genjob: {path}: malformed JSON")
    assert tree_state(in_repo.root) == before


def test_secrets_pass_only_with_allow_secrets(in_repo: Layout) -> None:
    secret_file(in_repo)
    res = cli("mint", "--allow-secrets", "-m", f"Deploy with {AWS_KEY}", "src/conf.py")
    assert res.exit_code == 0 and len(res.stdout.strip()) == 32


def test_a_bad_input_in_a_real_process(in_repo: Layout, tmp_path: Path) -> None:
    genjob = Path(sys.executable).parent / "genjob"
    before = tree_state(in_repo.root)
    proc = subprocess.run(
        [str(genjob), "mint", "-m", "x", "a/../../b"],
        cwd=in_repo.root,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("genjob: a/../../b: outside the repository")
    assert tree_state(in_repo.root) == before


def test_a_stray_file_listed_as_a_job_names_itself_and_what_to_do(in_repo: Layout) -> None:
    """`ls` shows a file genjob did not write (not named by a key) as INVALID; a command
    given its name says which file it is and how to be rid of it, and touches nothing."""
    stray = in_repo.applied / "garbage.json"
    stray.write_bytes(b"{}")
    before = tree_state(in_repo.root)
    for command, extra in KEY_COMMANDS.items():
        res = cli(command, "garbage", *extra)
        assert res.exit_code == 2 and res.stdout == ""
        assert (
            res.stderr == f"genjob: {stray}: not named by a job key, so genjob did not write it; "
            "move it out of .gen/ to keep it, or delete it\n"
        ), (command, res.stderr)
    assert "not a job key; `genjob ls` lists the jobs" in cli("show", "nothing-here").stderr
    assert tree_state(in_repo.root) == before
