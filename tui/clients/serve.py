"""`genjob serve`: the board in a browser, on this machine only, behind a token.

A board in a browser is a board anyone who reaches its port could drive: an approve from
a page is an apply. So the server binds 127.0.0.1 unless told otherwise, makes a random
token for each start and prints the one URL that carries it (as Jupyter does), and refuses
every request without it: the token in the URL, or the cookie the first request with it
sets (HttpOnly, SameSite=Strict, so another site's page cannot send it). A request whose
Host is not this server's address is refused too (DNS rebinding), and a websocket opened
from another origin. The board is read-only unless `--allow-actions` is given, and the
page says which repository and mode it shows. Each browser session is a board process
of its own (textual-serve runs the command per session).
"""

from __future__ import annotations

import secrets
import shlex
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web
from textual_serve.server import Server

from core.store.layout import Layout

COOKIE = "genjob-board-token"
TEMPLATES = Path(__file__).resolve().parent / "templates"
STATIC = Path(sys.modules[Server.__module__].__file__ or "").resolve().parent / "static"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def free_port(host: str) -> int:
    """A port nothing listens on at `host` now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def board_command(layout: Layout, allow_actions: bool) -> str:
    """The command each browser session runs: this interpreter's genjob, on `layout`."""
    argv = [sys.executable, "-c", "from tui.cli import run; run()", "--root", str(layout.root), "tui"]
    return shlex.join(argv if allow_actions else [*argv, "--readonly"])


class BoardServer(Server):
    """textual-serve's server, with every request held to the token and the address."""

    def __init__(self, layout: Layout, *, host: str, port: int, allow_actions: bool) -> None:
        mode = "actions allowed" if allow_actions else "read-only"
        super().__init__(
            board_command(layout, allow_actions),
            host=host,
            port=port,
            title=f"genjob board: {layout.root} ({mode})",
            statics_path=STATIC,
            templates_path=TEMPLATES,
        )
        self.token = secrets.token_urlsafe(24)
        self.hosts = {f"{host}:{port}", f"localhost:{port}"} if host == "127.0.0.1" else {f"{host}:{port}"}

    @property
    def url(self) -> str:
        return f"{self.public_url}/?token={self.token}"

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(self._guard)
        return app

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.host not in self.hosts:
            raise web.HTTPForbidden(text=f"genjob serve answers only for {', '.join(sorted(self.hosts))}\n")
        origin = request.headers.get("Origin")
        if origin is not None and urlsplit(origin).netloc not in self.hosts:
            raise web.HTTPForbidden(text="genjob serve: a request from another site's page\n")
        given = request.query.get("token")
        if not secrets.compare_digest(given or request.cookies.get(COOKIE, ""), self.token):
            raise web.HTTPForbidden(text="genjob serve: this request does not carry the server's token\n")
        response = await handler(request)
        if given is not None and not response.prepared:
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="Strict", path="/")
        return response

    def initialize_logging(self) -> None:
        """Quiet: the URL with its token is the one thing the operator needs to read."""

    async def on_startup(self, app: web.Application) -> None:
        """Nothing to print: `serve_board` said where the board is (with its token)."""


def serve_board(
    layout: Layout, *, host: str, port: int, allow_actions: bool, say: Callable[[str], None]
) -> None:
    """Serve the board until Ctrl-C, after saying where."""
    server = BoardServer(layout, host=host, port=port or free_port(host), allow_actions=allow_actions)
    say(f"the board of {layout.root}, {'with its actions' if allow_actions else 'read-only'}:")
    say(f"  {server.url}")
    say("the token is in the URL: give it to no one you would not hand this terminal; Ctrl-C stops")
    server.serve()
