"""A conservative check for credentials in instructions and input files.

Replay stores the instruction and ships the inputs to a rented host, so a job must not
carry a secret. The patterns aim at things that are almost never anything else.

Every pattern's match starts at a fixed distance before one of a few literal anchors
(compared after ASCII case folding for the case-insensitive ones), so the scan looks
for the anchors with `bytes.find` and runs a pattern only there: the same first match
as searching with the pattern, at a fraction of the cost. Each `find` is a pass over
the whole input, so rules share anchors where they can (`gh` for five GitHub token
prefixes, `k_live_` for both Stripe keys, `secret` for the AWS secret and a credential):
sixteen passes instead of twenty-two, the scan's main cost on a large file
(`hash_openssl` in tests/bench).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# An anchor, and how many bytes before it a match starts.
Anchor = tuple[bytes, int]
# (kind, pattern, anchors, whether anchors are matched case-folded)
_RULES: tuple[tuple[str, re.Pattern[bytes], tuple[Anchor, ...], bool], ...] = tuple(
    (name, re.compile(rx), anchors, folded)
    for name, rx, anchors, folded in (
        (
            "private key block",
            rb"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----",
            ((b"-----BEGIN ", 0),),
            False,
        ),
        ("AWS access key id", rb"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", ((b"AKIA", 0), (b"ASIA", 0)), False),
        (
            "AWS secret access key",
            rb"(?i)aws_secret_access_key\s*[=:]\s*[\"']?[A-Za-z0-9/+]{40}",
            ((b"secret", 4),),
            True,
        ),
        (
            "GitHub token",
            rb"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})",
            ((b"gh", 0), (b"github_pat_", 0)),
            False,
        ),
        ("GitLab token", rb"\bglpat-[A-Za-z0-9_\-]{20,}", ((b"glpat-", 0),), False),
        ("Slack token", rb"\bxox[abposr]-[A-Za-z0-9-]{10,}", ((b"xox", 0),), False),
        ("OpenAI or Anthropic API key", rb"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{32,}", ((b"sk-", 0),), False),
        ("Google API key", rb"\bAIza[0-9A-Za-z_\-]{35}\b", ((b"AIza", 0),), False),
        ("Stripe live key", rb"\b[rs]k_live_[0-9A-Za-z]{24,}", ((b"k_live_", 1),), False),
        (
            "JSON web token",
            rb"\beyJ[A-Za-z0-9_\-]{10,}\.eyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",
            ((b"eyJ", 0),),
            False,
        ),
        (
            "credential assignment",
            rb"(?i)\b(?:password|passwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token)"
            rb"\s*[=:]\s*[\"'][^\"'\s]{12,}[\"']",
            ((b"passw", 0), (b"secret", 0), (b"api", 0), (b"access", 0), (b"auth", 0)),
            True,
        ),
    )
)


@dataclass(frozen=True)
class SecretHit:
    kind: str
    line: int


def _first_match(rx: re.Pattern[bytes], data: bytes, hay: bytes, anchors: tuple[Anchor, ...]) -> int | None:
    """Where the first match of `rx` in `data` starts (every match starts `offset` bytes
    before an anchor in `hay`)."""
    first = None
    for anchor, offset in anchors:
        pos = hay.find(anchor, offset)
        while pos != -1 and (first is None or pos - offset < first):
            if rx.match(data, pos - offset):
                first = pos - offset
                break
            pos = hay.find(anchor, pos + 1)
    return first


def find_secrets(data: bytes) -> list[SecretHit]:
    """Every pattern that matches, with the 1-based line of its first match."""
    hits = []
    folded: bytes | None = None
    for name, rx, anchors, fold in _RULES:
        if fold and folded is None:
            folded = data.lower()
        start = _first_match(rx, data, folded if fold and folded is not None else data, anchors)
        if start is not None:
            hits.append(SecretHit(name, data.count(b"\n", 0, start) + 1))
    return hits
