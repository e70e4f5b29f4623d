"""`genjob serve`: the board in a real headless Chromium, behind its token, read-only by default."""

from __future__ import annotations

import http.client
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from corekit import mint, receive
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.store.layout import Layout

GENJOB = Path(sys.executable).parent / "genjob"
CHROMIUM = shutil.which("chromium")
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Z0-9]|\x1b[=>]")


@contextmanager
def served(repo: Layout, *extra: str) -> Iterator[str]:
    """`genjob serve` on this repository; yields the URL it printed, with its token."""
    proc = subprocess.Popen(
        [str(GENJOB), "--root", str(repo.root), "serve", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ},
    )
    try:
        assert proc.stdout is not None
        url = ""
        while not url:
            line = proc.stdout.readline()
            assert line, "genjob serve ended before printing its URL"
            if "?token=" in line:
                url = line.strip()
        host, port = urlsplit(url).hostname, urlsplit(url).port
        assert host == "127.0.0.1" and port is not None
        for _ in range(200):
            try:
                http.client.HTTPConnection(host, port, timeout=1).connect()
                break
            except OSError:
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def get(url: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    conn.request("GET", path, headers=headers or {})
    res = conn.getresponse()
    return res.status, dict(res.getheaders()), res.read().decode("utf-8", "replace")


@pytest.fixture
def received_repo(repo: Layout, signer: Ed25519PrivateKey) -> tuple[Layout, str]:
    job = mint(repo, "Make it better.", ["src/app.py"])
    receive(repo, job.key, {"src/app.py": b"def main():\n    return 2\n"}, signer)
    return repo, job.key


def test_a_request_without_the_token_is_refused(received_repo: tuple[Layout, str]) -> None:
    repo, _ = received_repo
    with served(repo) as url:
        token = url.split("?token=", 1)[1]
        assert get(url, "/")[0] == 403
        assert get(url, "/?token=wrong")[0] == 403
        assert get(url, "/static/js/textual.js")[0] == 403
        status, headers, page = get(url, f"/?token={token}")
        assert status == 200 and "genjob-board-token" in headers.get("Set-Cookie", "")
        assert f"genjob board: {repo.root} (read-only)" in page
        cookie = headers["Set-Cookie"].split(";", 1)[0]
        assert "HttpOnly" in headers["Set-Cookie"] and "SameSite=Strict" in headers["Set-Cookie"]
        assert get(url, "/static/js/textual.js", {"Cookie": cookie})[0] == 200
        port = urlsplit(url).port
        rebound = {"Cookie": cookie, "Host": f"attacker.example:{port}"}
        assert get(url, "/static/js/textual.js", rebound)[0] == 403
        elsewhere = {"Cookie": cookie, "Origin": "http://attacker.example"}
        assert get(url, "/static/js/textual.js", elsewhere)[0] == 403


@contextmanager
def browser() -> Iterator[object]:
    playwright = pytest.importorskip("playwright.sync_api")
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    with playwright.sync_playwright() as p:
        try:
            chromium = p.chromium.launch(
                executable_path=CHROMIUM,
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
            )
        except Exception as exc:  # the browser could not start here: say why
            pytest.skip(f"Chromium cannot start here: {exc}")
        try:
            yield chromium
        finally:
            chromium.close()


class Screen:
    """What the served board wrote to the browser's terminal, as plain text."""

    def __init__(self) -> None:
        self.raw: list[bytes] = []

    def heard(self, payload: object) -> None:
        if isinstance(payload, bytes):
            self.raw.append(payload)

    @property
    def text(self) -> str:
        return ANSI.sub("", b"".join(self.raw).decode("utf-8", "replace"))

    def wait_for(self, page: object, needle: str, seconds: float = 30.0) -> None:
        deadline = time.monotonic() + seconds
        while needle not in self.text:
            assert time.monotonic() < deadline, f"{needle!r} never reached the browser"
            page.wait_for_timeout(100)  # type: ignore[attr-defined]


def open_board(chromium: object, url: str) -> tuple[object, Screen]:
    page = chromium.new_page(viewport={"width": 1400, "height": 900})  # type: ignore[attr-defined]
    screen = Screen()
    page.on("websocket", lambda ws: ws.on("framereceived", screen.heard))
    page.goto(url)
    return page, screen


def test_the_served_board_shows_the_jobs_and_takes_keys_read_only(received_repo: tuple[Layout, str]) -> None:
    repo, key = received_repo
    before = (repo.root / "src/app.py").read_bytes()
    with served(repo) as url, browser() as chromium:
        refused = chromium.new_page()  # type: ignore[attr-defined]
        assert refused.goto(url.split("?", 1)[0]).status == 403
        page, screen = open_board(chromium, url)
        assert "read-only" in page.inner_text("#genjob-board") and str(repo.root) in page.inner_text(
            "#genjob-board"
        )
        screen.wait_for(page, key[:8])
        screen.wait_for(page, "READ-ONLY")
        page.click("#terminal")
        page.keyboard.press("?")
        screen.wait_for(page, "genjob help: the board's keys")
        page.keyboard.press("Escape")
        seen = len(screen.text)
        page.keyboard.press("a")
        page.wait_for_timeout(1500)
        assert "Approve: preflight" not in screen.text[seen:]
    assert (repo.root / "src/app.py").read_bytes() == before
    assert not repo.job_file("applied", key).exists()


def test_with_actions_allowed_an_approve_opens_the_preflight(received_repo: tuple[Layout, str]) -> None:
    repo, key = received_repo
    with served(repo, "--allow-actions") as url, browser() as chromium:
        page, screen = open_board(chromium, url)
        assert "actions allowed" in page.inner_text("#genjob-board")
        screen.wait_for(page, key[:8])
        page.click("#terminal")
        page.keyboard.press("a")
        screen.wait_for(page, "Approve: preflight")
