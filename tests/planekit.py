"""The apply plane's scenario, shared by its test and its benchmark: jobs over a few shared
files, minted on one base, shipped in parallel to local hosts, then applied."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from shipkit import host_block, write_config

from core.plan.mint import build_job
from core.review.ready import receipt_order
from core.store.layout import Layout
from core.store.queue import enqueue
from core.store.repo import init_repo
from core.store.signing import trust_repository

GENJOB = str(Path(sys.executable).parent / "genjob")
LINES = 40
# Edits `line N` of every file it is given, where the instruction says "Edit line N." or
# "Edit line N as TAG." (a stand-in for a model that changes one region of a file).
EDIT_LINE = """\
import re, sys
m = re.search(r"line (\\d+)(?: as (\\w+))?", open(sys.argv[1]).read())
n, tag = int(m.group(1)), m.group(2) or ""
for path in sys.argv[2:]:
    lines = open(path).read().splitlines(keepends=True)
    lines[n - 1] = f"edited {n} {tag}\\n"
    open(path, "w").write("".join(lines))
"""


@dataclass(frozen=True)
class Scenario:
    layout: Layout
    files: list[str]
    keys: list[str]
    base: dict[str, bytes]


def original(name: str) -> bytes:
    return "".join(f"{name} line {i}\n" for i in range(1, LINES + 1)).encode()


def make_scenario(
    root: Path,
    lines: Sequence[tuple[int, int]],
    files: int = 5,
    hosts: int = 4,
    env: Mapping[str, str] | None = None,
) -> Scenario:
    """A repository of `files` files, a job for each (file, line) of `lines` minted on the
    same base, each shipped by `genjob worker --once` across `hosts` local hosts in parallel.
    The worker key is made with `genjob keygen` in the environment's config folder."""
    root.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(root)], check=True)
    names = [f"src/f{i}.py" for i in range(files)]
    for rel in names:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(original(rel))
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=bench", "-c", "user.email=b@x", "commit", "-qm", "base"],
        check=True,
    )
    layout, _ = init_repo(root)
    script = root.parent / "edit_line.py"
    script.write_text(EDIT_LINE)
    generator = f"{sys.executable} {script} {{instruction_file}} {{paths}}"
    write_config(layout, *(host_block(f"h{i}", None, generator, concurrency=1) for i in range(1, hosts + 1)))
    run_env = dict(env or os.environ)
    key_file = Path(run_env["XDG_CONFIG_HOME"]) / "genjob" / "worker_ed25519.pub"
    if not key_file.exists():
        subprocess.run([GENJOB, "keygen"], env=run_env, check=True, capture_output=True)
    trust_repository(layout, key_file)
    keys = []
    for file_index, line, *tag in lines:
        said = f"Edit line {line}" + "".join(f" as {t}" for t in tag) + "."
        job = build_job(layout, said, [names[file_index]])
        enqueue(layout, job)
        keys.append(job.key)
    base = {rel: (root / rel).read_bytes() for rel in names}
    ship = subprocess.run(
        [GENJOB, "--root", str(root), "worker", "--once"], env=run_env, capture_output=True, text=True
    )
    assert ship.returncode == 0, ship.stdout + ship.stderr
    return Scenario(layout, names, keys, base)


def merge_file(ours: bytes, base: bytes, theirs: bytes) -> tuple[bytes, bool]:
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            (Path(tmp) / name).write_bytes(data)
            paths.append(str(Path(tmp) / name))
        proc = subprocess.run(["git", "merge-file", "-p", *paths], capture_output=True, check=False)
    return proc.stdout, proc.returncode == 0


def expected_tree(s: Scenario) -> tuple[dict[str, bytes], list[str]]:
    """Each receipt's outputs merged over the tree in queue order (oldest receipt first),
    as `git merge-file` merges them; and the keys whose merge conflicts (left out)."""
    tree, conflicted = dict(s.base), []
    for key in receipt_order(s.layout):
        outputs = receipt_outputs(s.layout, key)
        merged = {rel: merge_file(tree[rel], s.base[rel], data) for rel, data in outputs.items()}
        if all(clean for _, clean in merged.values()):
            tree.update({rel: data for rel, (data, _) in merged.items()})
        else:
            conflicted.append(key)
    return tree, conflicted


def receipt_outputs(layout: Layout, key: str) -> dict[str, bytes]:
    receipt = json.loads(layout.receipt(key).read_bytes())
    digest = receipt["job_digest"]
    return {rel: (layout.out_dir(digest) / rel).read_bytes() for rel in receipt["outputs"]}


def files_now(s: Scenario) -> dict[str, bytes]:
    return {rel: (s.layout.root / rel).read_bytes() for rel in s.files}
