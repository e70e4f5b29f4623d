"""No terminal injection from the CLI: whatever a job, receipt, lease, attempts file, audit
log, path, worker id or host holds, every command shows it literally.

Each hostile string carries an ESC/CSI sequence, an OSC 8 link, a C1 control and a bidi
override; the output of every command must hold no control or format character but the
newline, and must still show where the hostile text was (its ␛, ``\\x9b``, ``<U+202E>``).
"""

from __future__ import annotations

import json
import os
import unicodedata

import pytest
from corekit import cli, dead_pid, mint, receive, sha, write_receipt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.model.canonical import canonical
from core.store.layout import Layout
from core.store.queue import claim

HOSTILE = "\x1b[2J\x1b]8;;https://evil.example\x07click\x1b]8;;\x07\x9b31m\u202eevil\u2066"


def unsafe(text: str) -> list[str]:
    """Every character of `text` that could act on a terminal (all but the newline)."""
    return [
        repr(c) for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Cs", "Co")
    ]


def shown(result: object) -> str:
    out: str = result.stdout + result.stderr  # type: ignore[attr-defined]
    assert unsafe(out) == [], out
    return out


@pytest.fixture
def hostile_repo(repo: Layout, signer: Ed25519PrivateKey) -> dict[str, str]:
    """Jobs whose instruction, worker, lease, attempts, events and receipt carry HOSTILE."""
    received = mint(repo, f"Do it {HOSTILE}", ["src/app.py"])
    receive(repo, received.key, {"src/app.py": b"x = 1\n"}, signer, worker=f"w{HOSTILE}")
    orphan = mint(repo, f"Orphan {HOSTILE}", ["README.md"])
    c = claim(repo, f"w{HOSTILE}", orphan.key)
    lease = {**c.lease.model_dump(), "host": f"h{HOSTILE}", "pid": dead_pid()}
    repo.lease(orphan.key).write_bytes(canonical(lease))
    with open(repo.attempts_file(orphan.key), "a") as fh:
        fh.write(json.dumps({"at": 1.0, "event": f"x{HOSTILE}", "worker": HOSTILE}) + "\n")
    with open(repo.events, "a") as fh:
        fh.write(json.dumps({"at": 1.0, "event": f"e{HOSTILE}", "key": orphan.key, "by": HOSTILE}) + "\n")
    forged = mint(repo, "A receipt naming odd paths.", ["docs/guide.md"])
    receive(repo, forged.key, {"docs/guide.md": b"y\n"}, signer)
    doc = json.loads(repo.receipt(forged.key).read_bytes())
    doc["outputs"] = {f"docs/{HOSTILE}": sha(b"y\n")}
    write_receipt(repo, forged.key, doc, signer)
    (repo.queue / f"{'f' * 32}.json").write_text(json.dumps({"schema": HOSTILE}))
    return {"received": received.key, "orphan": orphan.key, "forged": forged.key}


def test_ls_shows_hostile_text_literally(repo: Layout, hostile_repo: dict[str, str]) -> None:
    out = shown(cli("ls", root=repo.root))
    assert "␛[2J" in out and "<U+202E>" in out


def test_ls_json_escapes_everything(repo: Layout, hostile_repo: dict[str, str]) -> None:
    res = cli("ls", "--json", root=repo.root)
    shown(res)
    assert any(HOSTILE in row["instruction"] for row in json.loads(res.stdout))


@pytest.mark.parametrize("job", ["received", "orphan", "forged"])
def test_show_shows_hostile_text_literally(repo: Layout, hostile_repo: dict[str, str], job: str) -> None:
    out = shown(cli("show", hostile_repo[job], root=repo.root))
    assert "␛" in out or "\\x1b" in out


def test_show_of_an_invalid_file(repo: Layout, hostile_repo: dict[str, str]) -> None:
    shown(cli("show", "f" * 32, root=repo.root))


@pytest.mark.parametrize("job", ["received", "forged"])
def test_verify_and_apply_show_hostile_text_literally(
    repo: Layout, hostile_repo: dict[str, str], job: str
) -> None:
    shown(cli("verify", hostile_repo[job], root=repo.root))
    shown(cli("apply", hostile_repo[job], root=repo.root))


def test_refusals_show_hostile_text_literally(repo: Layout, hostile_repo: dict[str, str]) -> None:
    live = mint(repo, "Held.", ["docs/guide.md"])
    c = claim(repo, f"w{HOSTILE}", live.key)
    lease = {**c.lease.model_dump(), "host": f"h{HOSTILE}", "pid": os.getpid()}
    repo.lease(live.key).write_bytes(canonical(lease))
    refused = cli("requeue", live.key, root=repo.root)
    assert refused.exit_code == 2
    assert "␛[2J" in shown(refused)
    shown(cli("cancel", hostile_repo["received"], root=repo.root))
    shown(cli("recover", root=repo.root))


@pytest.mark.parametrize(
    "path", ["a\u202eb.py", "a\x9bb.py", "zero\u200bwidth.py", "line\u2028sep.py", "del\x7f.py", "esc\x1b.py"]
)
def test_paths_with_controls_or_bidi_overrides_are_refused_at_mint(in_repo: Layout, path: str) -> None:
    (in_repo.root / path).write_text("x\n")
    res = cli("mint", "-m", "Edit it.", path)
    assert res.exit_code == 2
    out = shown(res)
    assert "character" in out and "in path" in out
    assert os.listdir(in_repo.queue) == []


def test_a_receipt_naming_a_bidi_path_does_not_verify(repo: Layout, hostile_repo: dict[str, str]) -> None:
    res = cli("verify", hostile_repo["forged"], root=repo.root)
    assert res.exit_code == 1
    out = shown(res)
    assert "[FAIL] paths" in out and "character" in out
