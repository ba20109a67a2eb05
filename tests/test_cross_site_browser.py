"""A page of another site cannot make a visitor's browser write to the service.

Debian's headless Chromium opens a page served from ``localhost`` (another site than
``127.0.0.1``, where the service listens) whose script POSTs to the service with ``no-cors``: the
request needs no preflight, so it reaches the server, which must refuse it by the browser's own
``Sec-Fetch-Site: cross-site`` label (decision/serve/cross_site.py). The board's same-origin
requests are covered by the board's browser tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from apps.xiangqi.api import create_app
from apps.xiangqi.players import RandomPlayer
from decision.serve.testing import running_server

pytestmark = pytest.mark.browser

ATTACK = """<!doctype html><title>waiting</title><script>
fetch("{target}/api/xiangqi/games", {{method: "POST", mode: "no-cors"}})
  .then(() => {{ document.title = "sent"; }}, () => {{ document.title = "failed"; }});
</script>"""


class Recorder:
    """Keeps, for each HTTP request, its method, path, ``Sec-Fetch-Site`` and answer status."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.seen: list[dict[str, Any]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        entry: dict[str, Any] = {"method": scope["method"], "path": scope["path"],
                                 "site": headers.get(b"sec-fetch-site", b"").decode()}
        self.seen.append(entry)

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                entry["status"] = message["status"]
            await send(message)

        await self.app(scope, receive, watch)


def test_a_page_of_another_site_cannot_create_a_game(browser: Any, tmp_path: Path) -> None:
    service = Recorder(create_app(tmp_path / "games.sqlite3", RandomPlayer(1)))
    with running_server(service) as target:
        page_html = ATTACK.format(target=target)
        attacker = Starlette(routes=[Route("/", lambda request: HTMLResponse(page_html))])
        with running_server(attacker) as attacker_url:
            page = browser.new_page()
            page.goto(attacker_url.replace("127.0.0.1", "localhost") + "/")
            page.wait_for_function("document.title !== 'waiting'", timeout=15_000)
            page.close()
    posts = [e for e in service.seen if e["method"] == "POST"]
    assert posts, "the browser's request never reached the service"
    assert all(e["site"] == "cross-site" and e["status"] == 403 for e in posts), posts
