"""The Xiangqi board when things go wrong, in Debian's headless Chromium.

A real uvicorn server with the engine's random player (the model's strength is not the point);
the failures are made with Playwright's ``page.route``: an answer the server played but the page
never got (a proxy's 504), a move refused because another tab moved (409 conflict) that leaves the
model to move, and a failure's message on a phone's screen.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_xiangqi_browser import _api, click_square

from apps.xiangqi.api import create_app
from apps.xiangqi.players import RandomPlayer
from decision.serve.testing import running_server

CHROMIUM = "/usr/bin/chromium"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing "
                       "(Debian package 'chromium'); the board is tested only in a browser"),
]
pytest.importorskip("playwright.sync_api", reason="playwright is not installed")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with running_server(create_app(tmp_path / "games.sqlite3", RandomPlayer())) as url:
        yield url


def _open(browser: Any, server: str, width: int = 1100, height: int = 800,
          game: str = "") -> tuple[Any, list[str]]:
    """The board at ``server`` (on ``game`` if given), loaded; uncaught errors and unhandled
    rejections go to the list returned."""
    page = browser.new_page(viewport={"width": width, "height": height})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server}/xiangqi/" + (f"#{game}" if game else ""))
    page.wait_for_function("state !== null && !busy", timeout=15_000)
    return page, errors


def test_a_failure_message_is_on_screen_at_phone_size(server: str, browser: Any) -> None:
    """At 375 x 667 the message under the controls was below the fold: a tap on a move that
    failed only let the piece go, and the visible status still read "your move"."""
    page, errors = _open(browser, server, 375, 667)
    page.route("**/moves", lambda route: route.abort("failed"))
    click_square(page, "h2")
    click_square(page, "e2")
    page.wait_for_function("!busy && !document.getElementById('error').hidden")
    assert "cannot reach the server" in page.inner_text("#error")
    top, bottom, height = page.evaluate("""() => {
        const r = document.getElementById('error').getBoundingClientRect();
        return [r.top, r.bottom, innerHeight];
    }""")
    assert top >= 0 and bottom <= height, f"the message is off screen ({top}-{bottom} of {height})"
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    assert not errors, errors
    page.close()


def test_a_reply_lost_after_the_server_played_the_move_shows_the_game_as_it_is(
        server: str, browser: Any) -> None:
    """The server played the model's move but its answer was lost (a proxy's 504, HTML): the
    board stayed on "model's turn" without it, and Model move then said the game "was changed in
    another tab". The page reads the game again after such a failure and shows it."""
    page, errors = _open(browser, server)

    def played_then_lost(route: Any) -> None:
        route.fetch()  # the server plays the move ...
        route.fulfill(status=504, content_type="text/html",  # ... and the answer is lost
                      body="<html><body>504 Gateway Time-out</body></html>")

    page.route("**/model-move", played_then_lost)
    click_square(page, "h2")
    click_square(page, "e2")
    page.wait_for_function("!busy && !document.getElementById('error').hidden")
    assert "504" in page.inner_text("#error")
    page.wait_for_function("state.moves.length === 2", timeout=5_000)
    assert page.inner_text("#status") == "Red to move · your move"
    assert page.locator(".mark-last").count() == 1
    assert page.is_disabled("#model-move")
    assert not errors, errors
    page.close()


def test_a_conflict_that_leaves_the_model_to_move_lets_it_play(server: str, browser: Any
                                                               ) -> None:
    """A move refused because another tab had moved (409 conflict) showed the game re-read on
    "model's turn" and then never asked the model nor looked again: the board stayed there while
    the server's game went on. The page lets the model play, as a reload does."""
    page, errors = _open(browser, server)
    game = page.evaluate("state.id")
    _api(server, f"/{game}/moves", {"move": "h2e2"})  # another tab's move: the model is to move
    click_square(page, "b2")  # still Red to move in this tab's view
    click_square(page, "e2")
    page.wait_for_function("state.moves.length === 2 && !busy", timeout=10_000)
    assert page.evaluate("state.moves[0].iccs") == "h2e2"
    assert page.evaluate("state.moves[1].by") == "model"
    assert page.inner_text("#status") == "Red to move · your move"
    assert "changed in another tab" in page.inner_text("#error")
    assert not errors, errors
    page.close()


@pytest.mark.parametrize("lands", ["before the page reads the game again", "while followed"])
def test_a_busy_games_change_that_leaves_the_model_to_move_lets_it_play(
        server: str, browser: Any, lands: str) -> None:
    """A move answered 409 game_busy (another tab's request holds the game): when the change
    that request made was a move leaving the model to move, the board showed "model's turn" and
    stopped there (and, had the change landed before the page read the game again, waited two
    minutes for a further one that never came)."""
    page, errors = _open(browser, server)
    game = page.evaluate("state.id")

    def busy(route: Any) -> None:
        if lands != "while followed":
            _api(server, f"/{game}/moves", {"move": "h2e2"})  # the other tab's move lands
        route.fulfill(status=409, content_type="application/json", body=json.dumps(
            {"error": {"type": "game_busy", "message": "another request is changing this game",
                       "field": None, "request_id": "x"}}))

    page.route("**/moves", busy)
    click_square(page, "b2")
    click_square(page, "e2")
    if lands == "while followed":
        page.wait_for_function("watching && !busy", timeout=10_000)
        _api(server, f"/{game}/moves", {"move": "h2e2"})
    page.wait_for_function("state.moves.length === 2 && !busy && !watching", timeout=15_000)
    assert page.evaluate("state.moves[0].iccs") == "h2e2"
    assert page.evaluate("state.moves[1].by") == "model"
    assert page.inner_text("#status") == "Red to move · your move"
    assert page.is_hidden("#error")
    assert not errors, errors
    page.close()
