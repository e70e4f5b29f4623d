"""Protected paths: what judges or runs a job is flagged, and written only when approved explicitly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from corekit import FILES, cli, make_repo, mint, receive, set_config, tree_state
from hypothesis import given
from hypothesis import strategies as st

from core.model.protected import DEFAULT_PROTECTED, ProtectedPaths, matching, protected_among
from core.review.apply_job import apply_job
from core.review.candidates import apply_choice
from core.store.config import DEFAULT_CONFIG, load_config
from core.store.layout import Layout
from core.store.signing import keygen, load_private_key, trust_repository

JUDGES = {
    ".github/workflows/ci.yml": ".github/**",
    "tests/test_app.py": "**/tests/**",
    "pkg/tests/helpers.py": "**/tests/**",
    "src/test_util.py": "test_*.py",
    "conftest.py": "conftest.py",
    "sub/conftest.py": "conftest.py",
    "pyproject.toml": "pyproject.toml",
    ".pre-commit-config.yaml": ".pre-commit-config.yaml",
    ".githooks/pre-commit": ".githooks/**",
    ".vscode/tasks.json": ".vscode/**",
    ".envrc": ".envrc",
    ".claude/settings.json": ".claude/**",
    "AGENTS.md": "AGENTS.md",
    "docs/AGENTS.md": "AGENTS.md",
    "uv.lock": "*.lock",
    "web/yarn.lock": "*.lock",
    "package-lock.json": "package-lock.json",
}


@pytest.mark.parametrize(("path", "pattern"), sorted(JUDGES.items()))
def test_the_defaults_cover_what_judges_or_runs_a_job(path: str, pattern: str) -> None:
    assert matching(path, DEFAULT_PROTECTED) == pattern


@pytest.mark.parametrize(
    "path", ["src/app.py", "README.md", "docs/guide.md", "src/testing.py", "latest/x.py"]
)
def test_ordinary_sources_are_not_protected(path: str) -> None:
    assert matching(path, DEFAULT_PROTECTED) is None


name = st.text(st.sampled_from("abcxyz_-"), min_size=1, max_size=6)


@given(st.lists(name, min_size=2, max_size=4, unique=True))
def test_a_star_stays_within_a_name_and_a_slashless_pattern_matches_at_any_depth(names: list[str]) -> None:
    *folders, leaf = names
    path = "/".join(names)
    assert matching(path, [leaf]) == leaf  # no slash: a name at any depth
    assert matching(path, [f"**/{leaf}"]) is not None
    assert matching(path, [f"{folders[0]}/**"]) is not None  # anchored, and everything below
    assert matching(f"top/{path}", [path]) is None  # a slash anchors it at the root
    # `*` is one name: `*/LEAF` is LEAF one folder down, never two.
    assert (matching(path, [f"*/{leaf}"]) is not None) == (len(folders) == 1)


@pytest.mark.parametrize(
    ("path", "pattern", "hit"),
    [
        ("ab/c", "a*c", False),
        ("abc", "a*c", True),
        ("a/b/c", "a/*", True),  # a matched folder covers what is below it, as in .gitignore
        ("x/a/b", "a/*", False),
        ("a.lock", "*.lock", True),
        ("a.lockx", "*.lock", False),
    ],
)
def test_patterns_read_as_gitignore_reads_them(path: str, pattern: str, hit: bool) -> None:
    assert (matching(path, [pattern]) is not None) == hit


def test_init_writes_the_defaults_and_an_older_config_gets_them_too(repo: Layout) -> None:
    assert load_config(repo.config).policy.protected_paths == list(DEFAULT_PROTECTED)
    set_config(repo, "[policy]\nlease_ttl = 60\n")
    assert load_config(repo.config).policy.protected_paths == list(DEFAULT_PROTECTED)
    assert '"**/tests/**",' in DEFAULT_CONFIG


def test_a_config_that_leaves_defaults_out_lowers_the_floor_and_waits(repo: Layout) -> None:
    repo.config.write_text('[policy]\nprotected_paths = ["CI.yml"]\n')
    config = load_config(repo.config)
    assert config.held is not None and "policy.protected_paths" in config.held.lowers
    assert set(DEFAULT_PROTECTED) <= set(config.policy.protected_paths)
    set_config(repo, '[policy]\nprotected_paths = ["CI.yml"]\n')
    assert load_config(repo.config).policy.protected_paths == ["CI.yml"]


@pytest.fixture
def judged(tmp_path: Path) -> Layout:
    """A repository with a test, and this machine's worker key pinned in it."""
    layout = make_repo(
        tmp_path / "repo", {**FILES, "tests/test_app.py": b"def test_it():\n    assert True\n"}
    )
    trust_repository(layout, keygen())
    return layout


def test_mint_ls_and_show_flag_a_job_that_may_write_a_test(
    judged: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(judged.root)
    res = cli("mint", "-m", "Make the test pass", "src/app.py", "tests/test_app.py", root=judged.root)
    assert res.exit_code == 0
    key = res.stdout.strip()
    assert "may write protected paths" in res.stderr and "tests/test_app.py (**/tests/**)" in res.stderr
    plain = cli("mint", "-m", "Tidy", "src/util.py", root=judged.root)
    assert "protected" not in plain.stderr
    listing = cli("ls", root=judged.root)
    [flagged_line] = [line for line in listing.stdout.splitlines() if line.startswith(key)]
    assert "⚑ Make the test pass" in flagged_line
    assert "1 job(s) may write protected paths" in listing.stdout
    rows = {r["key"]: r for r in json.loads(cli("ls", "--json", root=judged.root).stdout)}
    assert rows[key]["protected"] == {"tests/test_app.py": "**/tests/**"}
    assert rows[plain.stdout.strip()]["protected"] == {}
    shown = cli("show", key, root=judged.root)
    assert "may write protected paths" in shown.stdout and "tests/test_app.py (**/tests/**)" in shown.stdout


def test_apply_writes_a_protected_output_only_when_approved(judged: Layout) -> None:
    key = load_private_key()
    job = mint(judged, "Weaken the test", ["tests/test_app.py"])
    receive(judged, job.key, {"tests/test_app.py": b"def test_it():\n    pass\n"}, key)
    before = tree_state(judged.root)
    with pytest.raises(ProtectedPaths, match=r"tests/test_app.py \(\*\*/tests/\*\*\).*--protected"):
        apply_job(judged, job.key)
    res = cli("apply", job.key, root=judged.root)
    assert res.exit_code == 2 and "nothing was written" in res.stderr
    assert tree_state(judged.root) == before
    ok = cli("apply", job.key, "--protected", root=judged.root)
    assert ok.exit_code == 0, ok.stderr
    assert (judged.root / "tests/test_app.py").read_bytes() == b"def test_it():\n    pass\n"


def test_a_new_protected_file_and_a_nested_agents_file_are_refused_too(judged: Layout) -> None:
    key = load_private_key()
    job = mint(judged, "Add instructions for agents", [], ["docs/AGENTS.md", ".github/workflows/x.yml"])
    receive(
        judged, job.key, {"docs/AGENTS.md": b"run curl | sh\n", ".github/workflows/x.yml": b"on: push\n"}, key
    )
    with pytest.raises(ProtectedPaths, match=r"docs/AGENTS\.md"):
        apply_choice(judged, job.key, None)
    assert not (judged.root / "docs/AGENTS.md").exists()
    assert apply_choice(judged, job.key, None, protected=True).changed


def test_protected_among_names_each_path_with_its_first_pattern() -> None:
    found = protected_among(["a/tests/x.py", "src/y.py", "z.lock"], ["*.lock", "**/tests/**"])
    assert found == {"a/tests/x.py": "**/tests/**", "z.lock": "*.lock"}
