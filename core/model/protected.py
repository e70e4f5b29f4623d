"""Protected paths: what judges or runs a job, which a job must not quietly rewrite.

Coding agents are known to edit the tests and the CI that judge them, and a file an
editor, a shell or an agent runs on opening (`.vscode/tasks.json`, `.envrc`,
`.claude/settings.json`) turns a patch into code that runs on the operator's machine.
`[policy] protected_paths` lists such paths as patterns; a job whose allowed paths
match one is flagged when it is minted, listed and approved, and apply writes such an
output only when the operator approved that job explicitly.

A pattern is matched against a repository-relative path as a `.gitignore` pattern is:
`*` and `?` stay within one folder name, `**` spans folders, and a pattern with no `/`
matches a name at any depth (`*.lock` covers `web/yarn.lock`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence

from core.errors import GenjobError

# How the CLI and the board mark a job that may write a protected path, and say why.
PROTECTED_MARK = "⚑"
PROTECTED_HINT = "may write protected paths, which apply writes only when you approve this job explicitly"

DEFAULT_PROTECTED: tuple[str, ...] = (
    # genjob's own folder, git's, and the hooks that run on commit
    ".gen/**",
    ".gitattributes",
    ".gitmodules",
    ".pre-commit-config.yaml",
    ".husky/**",
    ".githooks/**",
    # CI
    ".github/**",
    ".gitlab-ci.yml",
    ".circleci/**",
    ".buildkite/**",
    "Jenkinsfile",
    ".travis.yml",
    "azure-pipelines.yml",
    # the tests and what configures how they run
    "**/tests/**",
    "**/test/**",
    "test_*.py",
    "*_test.py",
    "*_test.go",
    "*.test.js",
    "*.test.ts",
    "*.spec.js",
    "*.spec.ts",
    "conftest.py",
    "pytest.ini",
    "tox.ini",
    "noxfile.py",
    "pyproject.toml",
    "setup.cfg",
    # what an editor or a shell runs on opening the folder
    ".vscode/**",
    ".idea/**",
    ".envrc",
    # coding agents' settings and instructions
    ".claude/**",
    "CLAUDE.md",
    "AGENTS.md",
    "GEMINI.md",
    ".cursor/**",
    ".cursorrules",
    ".codex/**",
    ".aider.conf.yml",
    # lock files
    "*.lock",
    "package-lock.json",
    "pnpm-lock.yaml",
    "go.sum",
)


@functools.lru_cache(maxsize=512)
def _compiled(pattern: str) -> re.Pattern[str]:
    anchored = "/" in pattern.rstrip("/")
    body = pattern.strip("/")
    out = []
    i = 0
    while i < len(body):
        if body.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif body.startswith("**", i):
            out.append(".*")
            i += 2
        elif body[i] == "*":
            out.append("[^/]*")
            i += 1
        elif body[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(body[i]))
            i += 1
    prefix = "" if anchored else "(?:.*/)?"
    # A pattern naming a folder covers everything below it, as in .gitignore.
    return re.compile(prefix + "".join(out) + "(?:/.*)?")


def matching(path: str, patterns: Iterable[str]) -> str | None:
    """The first of `patterns` that covers `path`, or None."""
    return next((p for p in patterns if _compiled(p).fullmatch(path)), None)


def protected_among(paths: Iterable[str], patterns: Sequence[str]) -> dict[str, str]:
    """Each of `paths` that a pattern covers, with the first pattern that does."""
    found = {}
    for path in paths:
        hit = matching(path, patterns)
        if hit is not None:
            found[path] = hit
    return found


@functools.lru_cache(maxsize=1 << 14)
def flagged(paths: tuple[str, ...], patterns: tuple[str, ...]) -> bool:
    """Whether any of `paths` is protected: asked for every row a list draws, so remembered."""
    return any(matching(path, patterns) is not None for path in paths)


def describe(found: Mapping[str, str]) -> str:
    """`a.py (tests/**), b.lock (*.lock)`: what is protected, and by which pattern."""
    return ", ".join(f"{path} ({pattern})" for path, pattern in sorted(found.items()))


class ProtectedPaths(GenjobError):
    """A receipt writes paths that policy protects, and no one approved that job explicitly."""


def require_approval(key: str, outputs: Iterable[str], patterns: Sequence[str], approved: bool) -> None:
    """Raise ProtectedPaths when `outputs` hold a protected path and `approved` is not given."""
    found = protected_among(outputs, patterns)
    if found and not approved:
        raise ProtectedPaths(
            f"{key}: writes protected paths: {describe(found)}; nothing was written. Read its diff "
            f"(genjob show {key}), then approve it explicitly: genjob apply {key} --protected"
        )
