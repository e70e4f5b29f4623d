"""A conservative check for credentials in instructions and input files.

Replay stores the instruction and ships the inputs to a rented host, so a job must not
carry a secret. The patterns aim at things that are almost never anything else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PATTERNS: tuple[tuple[str, re.Pattern[bytes]], ...] = tuple(
    (name, re.compile(rx))
    for name, rx in (
        ("private key block", rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
        ("AWS access key id", rb"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
        ("AWS secret access key", rb"(?i)aws_secret_access_key\s*[=:]\s*[\"']?[A-Za-z0-9/+]{40}"),
        ("GitHub token", rb"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})"),
        ("GitLab token", rb"\bglpat-[A-Za-z0-9_\-]{20,}"),
        ("Slack token", rb"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
        ("OpenAI or Anthropic API key", rb"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{32,}"),
        ("Google API key", rb"\bAIza[0-9A-Za-z_\-]{35}\b"),
        ("Stripe live key", rb"\b[rs]k_live_[0-9A-Za-z]{24,}"),
        ("JSON web token", rb"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"),
        (
            "credential assignment",
            rb"(?i)\b(?:password|passwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token)"
            rb"\s*[=:]\s*[\"'][^\"'\s]{12,}[\"']",
        ),
    )
)


@dataclass(frozen=True)
class SecretHit:
    kind: str
    line: int


def find_secrets(data: bytes) -> list[SecretHit]:
    """Every pattern that matches, with the 1-based line of its first match."""
    hits = []
    for name, rx in _PATTERNS:
        m = rx.search(data)
        if m:
            hits.append(SecretHit(name, data.count(b"\n", 0, m.start()) + 1))
    return hits
