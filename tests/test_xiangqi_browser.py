"""The web board in Debian's headless Chromium: play by clicking, see the model reply.

Starts the real server (uvicorn on a free port), opens /xiangqi, clicks pieces and targets,
waits for the model's reply to be drawn, checks undo, flip and a phone-width layout, and saves
screenshots under test-output/ (git-ignored) for a person to look at.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from apps.xiangqi.api import create_app
from apps.xiangqi.model_player import ModelPlayer
from decision.serve.testing import running_server

CHROMIUM = "/usr/bin/chromium"
OUT = Path(__file__).resolve().parent.parent / "test-output"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing "
                       "(Debian package 'chromium'); the board is tested only in a browser"),
]
pytest.importorskip("playwright.sync_api", reason="playwright is not installed")


@pytest.fixture(scope="module")
def model_player(tiny_checkpoint_dir: Path) -> ModelPlayer:
    """The decision model as the opponent: a random-weight tiny checkpoint (legal, not strong)."""
    from decision import load_model

    return ModelPlayer(load_model(str(tiny_checkpoint_dir)), "tiny-random-model")


@pytest.fixture
def server(tmp_path: Path, model_player: ModelPlayer) -> Iterator[str]:
    with running_server(create_app(tmp_path / "games.sqlite3", model_player)) as url:
        yield url


def click_square(page, square: str) -> None:  # type: ignore[no-untyped-def]
    """Click a board point by its ICCS name, through the SVG's own coordinate transform."""
    x, y = page.evaluate(
        """(sq) => {
            const svg = document.getElementById('board');
            const [px, py] = squarePoint(sq);
            const pt = svg.createSVGPoint();
            pt.x = px; pt.y = py;
            const p = pt.matrixTransform(svg.getScreenCTM());
            return [p.x, p.y];
        }""",
        square,
    )
    page.mouse.click(x, y)


def new_page(browser):  # type: ignore[no-untyped-def]
    """A desktop-sized page and the list its uncaught JavaScript errors go to."""
    page = browser.new_page(viewport={"width": 1100, "height": 800})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    return page, errors


def open_board(browser, server: str):  # type: ignore[no-untyped-def]
    """``new_page`` with the board opened on a new game, ready for clicks."""
    page, errors = new_page(browser)
    page.goto(f"{server}/xiangqi/")
    page.wait_for_function("state !== null && !busy", timeout=15_000)
    return page, errors


def wait_moves(page, count: int) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_function(
        "(n) => state && state.moves.length === n && !busy", arg=count, timeout=30_000
    )


def test_play_by_clicking_against_the_model(server, browser) -> None:  # type: ignore[no-untyped-def]
    OUT.mkdir(exist_ok=True)
    page, errors = open_board(browser, server)
    assert page.locator(".piece").count() == 32
    assert page.inner_text("#status").startswith("Red to move")
    # Chinese characters, or FEN letters where the machine has no CJK font at all.
    letters = page.evaluate("LETTERS")
    assert letters == page.evaluate("cjkFontMissing()")
    general = page.locator('.piece[data-piece="K"] text').text_content()
    assert general == ("K" if letters else "帥")
    cannon = page.locator('.piece[data-piece="c"] text').first.text_content()
    assert cannon == ("C" if letters else "砲")

    # Select the right cannon: its legal targets are highlighted.
    click_square(page, "h2")
    assert page.locator(".piece.selected").get_attribute("data-square") == "h2"
    targets = {t.get_attribute("data-target") for t in page.locator("[data-target]").all()}
    assert {"e2", "h9", "h3"} <= targets and "h2" not in targets
    # Another own piece takes the selection; an empty point it cannot reach clears it.
    click_square(page, "g3")
    assert page.locator(".piece.selected").get_attribute("data-square") == "g3"
    click_square(page, "f5")
    assert page.locator(".piece.selected").count() == 0
    click_square(page, "h2")
    click_square(page, "e2")  # C2=5
    wait_moves(page, 2)  # our move, then the model's reply, drawn
    state = page.evaluate("state")
    assert state["moves"][0]["iccs"] == "h2e2" and state["moves"][1]["by"] == "model"
    reply = state["moves"][1]["iccs"]
    # The reply is marked: dashed square on its origin, ring on its target.
    assert page.locator(".mark-from").count() == 1 and page.locator(".mark-last").count() == 1
    assert page.locator(f'.piece[data-square="{reply[2:]}"]').count() == 1
    assert page.locator(f'.piece[data-square="{reply[:2]}"]').count() == 0
    assert page.locator("#moves li").count() == 1  # one full move: Red's and Black's
    assert page.locator("#moves .move.model").count() == 1
    assert "C2=5" in page.inner_text("#moves")

    # Two more moves by clicking (the model's replies are its own, so pick what is legal).
    for n in (4, 6):
        legal = page.evaluate("state.legal_moves")
        move = next((m for m in ("h0g2", "b0c2", "i0i1", "a0a1") if m in legal), legal[0])
        click_square(page, move[:2])
        click_square(page, move[2:])
        wait_moves(page, n)
    moves = page.evaluate("state.moves")
    assert [m["by"] for m in moves] == ["human", "model"] * 3
    page.screenshot(path=str(OUT / "xiangqi-desktop.png"))

    # Undo takes back the model's reply and our move.
    page.click("#undo")
    wait_moves(page, 4)
    # Flip puts Black at the bottom: Red's general is drawn near the top.
    general_y = page.locator('.piece[data-piece="K"]').bounding_box()["y"]
    page.click("#flip")
    assert page.locator('.piece[data-piece="K"]').bounding_box()["y"] < general_y
    assert not errors, errors

    # The game survives a reload of the page (it is in the URL and in SQLite).
    page.reload()
    page.wait_for_function("state !== null && !busy", timeout=15_000)
    assert len(page.evaluate("state.moves")) == 4
    # ?letters shows FEN letters instead of characters, same game.
    page.goto(f"{server}/xiangqi/?letters#{page.evaluate('state.id')}")
    page.wait_for_function("state !== null && !busy", timeout=15_000)
    assert len(page.evaluate("state.moves")) == 4
    assert page.locator('.piece[data-piece="K"] text').text_content() == "K"
    assert "Chu He" in page.text_content("#board")
    page.close()


def test_check_and_result_are_shown_at_phone_width(server, browser) -> None:  # type: ignore[no-untyped-def]
    base = server
    OUT.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 375, "height": 740}, device_scale_factor=2)
    page.goto(f"{base}/xiangqi/")
    page.wait_for_function("state !== null && !busy", timeout=30_000)
    # A new two-player game from a mate-in-two position, through the page's own form.
    page.select_option("#model-side", "none")
    page.click(".fen-box summary")
    page.fill("#fen", "4k4/9/9/9/9/9/9/1R7/R8/3K5 w - - 0 1")
    page.click("#new-game")
    page.wait_for_function("state && state.moves.length === 0 && state.fen.startsWith('4k4')")
    for frm, to, n in (("a1", "a8", 1), ("e9", "f9", 2)):
        click_square(page, frm)
        click_square(page, to)
        wait_moves(page, n)
    click_square(page, "b2")
    click_square(page, "b9")
    wait_moves(page, 3)
    status = page.inner_text("#status")
    assert "Red wins" in status and "checkmate" in status and "1-0" in status
    assert page.locator(".piece.in-check").count() == 1
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 375, f"the page scrolls sideways at phone width ({width} px)"
    box = page.locator("#board").bounding_box()
    assert box["width"] >= 340  # the board uses the phone's width
    page.screenshot(path=str(OUT / "xiangqi-phone.png"), full_page=True)
    page.close()


def _held(page, pattern: str) -> list:  # type: ignore[no-untyped-def]
    """Requests to ``pattern`` held by the test (answered later with fulfill/abort/continue_)."""
    held: list = []
    page.route(pattern, lambda route: held.append(route))
    return held


def _next_held(page, held: list):  # type: ignore[no-untyped-def]
    for _ in range(600):
        if held:
            return held.pop(0)
        page.wait_for_timeout(50)
    raise AssertionError("the page sent no request")


def test_a_failed_model_move_is_shown_and_the_board_recovers(server, browser) -> None:  # type: ignore[no-untyped-def]
    """A model move cut off by the network or a server shutting down (503) shows why and leaves
    no "the model is thinking" behind; flipping while it thinks keeps saying so; a move that
    fails leaves no targets drawn."""
    page, errors = open_board(browser, server)
    held = _held(page, "**/model-move")
    click_square(page, "h2")
    click_square(page, "e2")
    page.wait_for_function("document.getElementById('status').textContent.includes('thinking')")
    page.click("#flip")  # the model is still thinking after a flip
    assert "the model is thinking" in page.inner_text("#status")
    _next_held(page, held).abort("failed")  # the server went away
    page.wait_for_function("!busy")
    assert "cannot reach the server" in page.inner_text("#error")
    assert "thinking" not in page.inner_text("#status")
    assert page.is_enabled("#model-move")  # the user can ask again

    page.click("#model-move")
    _next_held(page, held).fulfill(
        status=503, headers={"Retry-After": "1"}, content_type="application/json",
        body='{"error": {"type": "unavailable", "message": "the server is shutting down; '
             'the move was not played", "field": null}}')
    page.wait_for_function("!busy")
    assert "shutting down" in page.inner_text("#error")
    assert "thinking" not in page.inner_text("#status")
    assert "model's turn" in page.inner_text("#status")

    page.unroute("**/model-move")
    page.click("#model-move")
    wait_moves(page, 2)
    assert page.is_hidden("#error")

    page.route("**/moves", lambda route: route.abort("failed"))
    move = page.evaluate("state.legal_moves[0]")
    click_square(page, move[:2])
    assert page.locator("[data-target]").count() > 0
    click_square(page, move[2:])
    page.wait_for_function("!busy")
    assert "cannot reach the server" in page.inner_text("#error")
    assert page.locator("[data-target]").count() == 0  # no targets of a selection that is gone
    assert len(page.evaluate("state.moves")) == 2
    assert not errors, errors
    page.close()


def test_a_game_busy_elsewhere_is_followed_until_it_changes(server, browser) -> None:  # type: ignore[no-untyped-def]
    """409 game_busy (another tab's request, e.g. the model thinking for it, is changing the
    game): the page says so, then follows the game and shows the other request's result instead
    of staying on a stale board with "model's turn"."""
    import json
    import urllib.request

    page, errors = open_board(browser, server)
    held = _held(page, "**/model-move")
    click_square(page, "h2")
    click_square(page, "e2")
    game = page.evaluate("state.id")
    _next_held(page, held).fulfill(
        status=409, content_type="application/json",
        body=json.dumps({"error": {"type": "game_busy", "field": "game_id", "message":
                                   f"game '{game}' is busy: another request on it is still "
                                   "running; reload the game and try again"}}))
    page.wait_for_function("!busy")
    # not the API's "reload the game and try again": the page reads it again by itself, and
    # says what is going on (it told a player who had just reloaded to reload)
    assert "Another request is changing this game" in page.inner_text("#error")
    assert "another request is changing the game" in page.inner_text("#status")
    assert page.is_disabled("#model-move") and page.is_disabled("#undo")
    # The other request answers: the model's reply is saved on the server.
    request = urllib.request.Request(f"{server}/api/xiangqi/games/{game}/model-move",
                                     data=b"{}", method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        assert len(json.load(reply)["moves"]) == 2
    page.wait_for_function("state.moves.length === 2", timeout=10_000)
    assert page.locator(".mark-last").count() == 1
    assert "your move" in page.inner_text("#status")
    assert page.is_hidden("#error")
    assert page.is_enabled("#undo")
    assert not errors, errors
    page.close()


def test_a_server_down_at_first_load_says_so_and_new_game_retries(server, browser) -> None:  # type: ignore[no-untyped-def]
    """The server cannot be reached when the page opens: the status line says no game is loaded
    (not "Loading…" for ever) and New game tries again once the server answers."""
    page, errors = new_page(browser)
    page.route("**/api/xiangqi/games**", lambda route: route.abort("failed"))
    page.goto(f"{server}/xiangqi/")
    page.wait_for_function("!busy && !document.getElementById('error').hidden", timeout=15_000)
    assert "cannot reach the server" in page.inner_text("#error")
    status = page.inner_text("#status")
    assert "Loading" not in status and "No game loaded" in status, status
    assert page.is_enabled("#new-game")

    page.unroute("**/api/xiangqi/games**")
    page.click("#new-game")
    page.wait_for_function("state !== null && !busy", timeout=15_000)
    assert page.inner_text("#status").startswith("Red to move")
    assert page.is_hidden("#error")
    assert page.locator(".piece").count() == 32
    assert not errors, errors
    page.close()


def test_a_game_id_edited_into_the_url_is_opened(server, browser) -> None:  # type: ignore[no-untyped-def]
    """Changing #<id> in the address bar opens that game without a reload; an id the server does
    not know says why and puts the URL back to the game still shown."""
    page, errors = open_board(browser, server)
    first = page.evaluate("state.id")
    click_square(page, "h2")
    click_square(page, "e2")
    wait_moves(page, 2)
    page.click("#new-game")
    page.wait_for_function("(id) => state && state.id !== id && !busy", arg=first)
    second = page.evaluate("state.id")
    assert page.evaluate("location.hash") == f"#{second}"

    page.evaluate("(id) => { location.hash = id; }", first)
    page.wait_for_function("(id) => state && state.id === id && !busy", arg=first,
                           timeout=15_000)
    assert len(page.evaluate("state.moves")) == 2
    assert page.inner_text("#game-id") == first

    page.evaluate("location.hash = 'no-such-game'")
    page.wait_for_function("!busy && !document.getElementById('error').hidden", timeout=15_000)
    assert page.evaluate("state.id") == first
    assert page.evaluate("location.hash") == f"#{first}"
    assert not errors, errors
    page.close()


def test_another_game_opened_or_linked_keeps_no_stale_state(server, browser) -> None:  # type: ignore[no-untyped-def]
    """A piece selected in one game stayed selected in the game the URL opened (one click then
    moved it there); a fresh load of an unknown linked id started a new game silently and made
    the page forget the game in progress; a FEN folded away started every later new game."""
    page, errors = open_board(browser, server)
    first = page.evaluate("state.id")
    page.click("#new-game")
    page.wait_for_function("(id) => state && state.id !== id && !busy", arg=first)
    second = page.evaluate("state.id")
    click_square(page, "h2")  # selected in the second game
    assert page.evaluate("selected") == "h2"
    page.evaluate("(id) => { location.hash = id; }", first)
    page.wait_for_function("(id) => state && state.id === id && !busy", arg=first,
                           timeout=15_000)
    assert page.evaluate("selected") is None
    click_square(page, "e2")  # no longer a move: nothing is selected
    page.wait_for_timeout(300)
    assert page.evaluate("state.moves.length") == 0

    page.goto("about:blank")  # a fresh load in the same context, which remembers the first game
    page.goto(f"{server}/xiangqi/#no-such-game")
    page.wait_for_function("state !== null && !busy", timeout=15_000)
    assert page.evaluate("state.id") == first  # the remembered game, not a new one
    message = page.inner_text("#error")
    assert "no-such-game" in message and "last game played here" in message
    assert second != first

    page.click(".fen-box summary")
    page.fill("#fen", "4k4/9/9/9/9/9/9/9/9/3K5 w - - 0 1")
    page.click("#new-game")
    page.wait_for_function("(id) => state && state.id !== id && !busy", arg=first)
    assert page.evaluate("state.start_fen").startswith("4k4/")
    page.click(".fen-box summary")  # folded away: the next new game starts from the opening
    current = page.evaluate("state.id")
    page.click("#new-game")
    page.wait_for_function("(id) => state && state.id !== id && !busy", arg=current)
    assert page.evaluate("state.start_fen").startswith("rnbakabnr/")
    assert not errors, errors
    page.close()
