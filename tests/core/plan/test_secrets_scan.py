"""The secret scan: anchored search finds exactly what a plain search of each pattern finds."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.plan import secrets_scan
from core.plan.secrets_scan import _RULES, SecretHit, find_secrets


def reference(data: bytes) -> list[SecretHit]:
    """The definition: search each pattern from the start, report its first match's line."""
    hits = []
    for name, rx, _, _ in _RULES:
        m = rx.search(data)
        if m:
            hits.append(SecretHit(name, data.count(b"\n", 0, m.start()) + 1))
    return hits


FRAGMENTS = [
    b"AKIA",
    b"ASIA",
    b"ABCDEFGHIJKLMNOP",
    b"QRSTUVWX",
    b"aws_secret_access_key",
    b"AWS_Secret_Access_Key",
    b" = ",
    b":",
    b'"',
    b"'",
    b"ghp_",
    b"github_pat_",
    b"glpat-",
    b"xoxb-",
    b"sk-",
    b"sk-ant-",
    b"AIza",
    b"sk_live_",
    b"rk_live_",
    b"eyJ",
    b".",
    b"-----BEGIN ",
    b"RSA ",
    b"PRIVATE KEY",
    b"-----",
    b"password",
    b"PassWord",
    b"passwd",
    b"Secret",
    b"api_key",
    b"API-KEY",
    b"apikey",
    b"access_token",
    b"AuthToken",
    b"auth-token",
    b"0123456789abcdefABCDEF0123456789abcdefXYZ/+",
    b"a",
    b"_",
    b"-",
    b" ",
    b"\n",
    b"x",
]


@settings(max_examples=300)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map(b"".join))
@example(b"token = 'AKIAABCDEFGHIJKLMNOP'")
@example(b"password='hunter2hunter2hunter2'\nAPI_KEY: \"0123456789abcdefXYZ\"")
@example(b"-----BEGIN OPENSSH PRIVATE KEY-----")
@example(b"xAKIAABCDEFGHIJKLMNOP AKIAABCDEFGHIJKLMNOP")
def test_the_anchored_scan_equals_a_plain_search(data: bytes) -> None:
    assert find_secrets(data) == reference(data)


@given(st.binary(max_size=2000))
def test_arbitrary_bytes(data: bytes) -> None:
    assert find_secrets(data) == reference(data)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (b"key = AKIA" + b"Z" * 16, "AWS access key id"),
        (b"AWS_SECRET_ACCESS_KEY=" + b"a" * 40, "AWS secret access key"),
        (b"ghs_" + b"a" * 36, "GitHub token"),
        (b"glpat-" + b"a" * 20, "GitLab token"),
        (b"xoxp-" + b"1" * 10, "Slack token"),
        (b"sk-proj-" + b"a" * 32, "OpenAI or Anthropic API key"),
        (b"AIza" + b"a" * 35, "Google API key"),
        (b"rk_live_" + b"a" * 24, "Stripe live key"),
        (b"eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.abcdefghijkl", "JSON web token"),
        (b"-----BEGIN EC PRIVATE KEY-----", "private key block"),
        (b"Secret: 'abcdefghijklmnop'", "credential assignment"),
    ],
)
def test_each_kind_with_its_line(text: bytes, kind: str) -> None:
    assert find_secrets(b"first line\nsecond\n" + text) == [SecretHit(kind, 3)]


def test_near_misses_are_not_secrets() -> None:
    text = b"task-runner desk-top AKIA123 password = short ghp_short eyJ.not.a.jwt\n" * 1000
    assert find_secrets(text) == []


@settings(max_examples=200)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=40).map(b"".join), st.integers(1, 64))
def test_a_match_across_the_search_windows_is_found_once(data: bytes, window: int) -> None:
    with mock.patch.object(secrets_scan, "_WINDOW", window):
        assert find_secrets(data) == reference(data)
