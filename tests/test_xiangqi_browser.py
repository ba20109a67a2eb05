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
    click_square(page, "b2")  # a click on the flipped board finds the square drawn there
    assert page.evaluate("selected") == "b2"
    assert page.locator(".piece.selected").get_attribute("data-square") == "b2"
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
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if r.url.endswith("/moves") else None)
    click_square(page, "e2")  # no longer a move: nothing is selected
    # a move would be drawn only after its request and animation, long after a fixed wait; a
    # click that plays one makes the page busy at once, so wait for that to end and look
    page.wait_for_function("!busy")
    assert page.evaluate("state.moves.length") == 0 and sent == []

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


def _api(server: str, path: str, body: dict) -> dict:
    """POST ``body`` to the game API at ``path`` (under /api/xiangqi/games); the JSON answer."""
    import json
    import urllib.request

    request = urllib.request.Request(f"{server}/api/xiangqi/games{path}",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.load(reply)


def _two_player_game(server: str, moves: str, fen: str | None = None) -> dict:
    """A two-player game made through the API, ``moves`` (ICCS, space-separated) played."""
    game = _api(server, "", {"model_side": "none", **({"fen": fen} if fen else {})})
    for move in moves.split():
        game = _api(server, f"/{game['id']}/moves", {"move": move})
    return game


def test_a_finished_game_says_how_it_ended_in_words(server, browser) -> None:  # type: ignore[no-untyped-def]
    """The API's reasons were shown as they are: "Draw by draw repetition", "Draw by no capture
    120", and "Black wins by repetition" for Red's perpetual check (as if Black had repeated)."""
    drawn = _two_player_game(server, "h0g2 h9g7 g2h0 g7h9 h0g2 h9g7 g2h0 g7h9")
    assert drawn["reason"] == "draw_repetition"
    # Red checks with its chariot on every move and the position comes back a third time.
    perpetual = _two_player_game(server, "i0i9 d9d8 i9i8 d8d9 i8i9 d9d8 i9i8 d8d9 i8i9",
                                 fen="3k5/9/9/9/9/9/9/9/9/4K3R w - - 0 1")
    assert (perpetual["reason"], perpetual["winner"]) == ("repetition", "black")
    page, errors = new_page(browser)
    for game, expected in ((drawn, "Draw by repetition (1/2-1/2)"),
                           (perpetual, "Black wins by perpetual check by Red (0-1)")):
        page.goto(f"{server}/xiangqi/#{game['id']}")
        page.wait_for_function("(id) => state && state.id === id && !busy", arg=game["id"])
        assert page.inner_text("#status") == expected
        assert page.is_disabled("#model-move") and page.is_enabled("#undo")
        click_square(page, game["moves"][-1]["iccs"][2:])  # a finished game takes no selection
        assert page.evaluate("selected") is None
    # the other texts, from the page's own function
    texts = page.evaluate("""() => [
        resultText({reason: 'no_capture_120', winner: null, result: '1/2-1/2'}),
        resultText({reason: 'stalemate', winner: 'red', result: '1-0'}),
        resultText({reason: 'checkmate', winner: 'black', result: '0-1'})]""")
    assert texts == ["Draw by the 120-ply no-capture rule (1/2-1/2)",
                     "Red wins by stalemate (no legal move) (1-0)",
                     "Black wins by checkmate (0-1)"]
    assert not errors, errors
    page.close()


def test_a_move_into_a_game_changed_in_another_tab_says_what_happened(server, browser) -> None:  # type: ignore[no-untyped-def]
    """A move from a tab that had not seen another tab's move is refused (409 conflict): the page
    reads the game again and shows it, so the API's "reload it" was wrong advice there."""
    game = _two_player_game(server, "")
    first, errors = new_page(browser)
    first.goto(f"{server}/xiangqi/#{game['id']}")
    first.wait_for_function("state !== null && !busy")
    stale, stale_errors = new_page(browser)
    stale.goto(f"{server}/xiangqi/#{game['id']}")
    stale.wait_for_function("state !== null && !busy")
    click_square(first, "h2")
    click_square(first, "e2")
    wait_moves(first, 1)
    click_square(stale, "b2")  # still Red to move in this tab's view
    click_square(stale, "e2")
    stale.wait_for_function("!busy && !document.getElementById('error').hidden")
    message = stale.inner_text("#error")
    assert "changed in another tab" in message and "reload" not in message, message
    assert [m["iccs"] for m in stale.evaluate("state.moves")] == ["h2e2"]
    assert stale.inner_text("#status").startswith("Black to move")
    assert not errors and not stale_errors, errors + stale_errors
    first.close()
    stale.close()


def test_a_url_edited_back_to_the_game_shown_opens_nothing_later(server, browser) -> None:  # type: ignore[no-untyped-def]
    """While a request runs, #<id> edited to another game and then back to the game shown: the
    page still opened the other game once the request ended, against the URL's last word."""
    page, errors = open_board(browser, server)
    other = page.evaluate("state.id")
    page.click("#new-game")
    page.wait_for_function("(id) => state && state.id !== id && !busy", arg=other)
    shown = page.evaluate("state.id")
    held = _held(page, "**/model-move")
    click_square(page, "h2")
    click_square(page, "e2")
    route = _next_held(page, held)  # the model is thinking: the page is busy
    page.evaluate("(id) => { location.hash = id; }", other)
    page.wait_for_function("(id) => wanted === id", arg=other)
    page.evaluate("(id) => { location.hash = id; }", shown)
    route.continue_()
    page.unroute("**/model-move")
    wait_moves(page, 2)
    # a deferred open would start on the next task: let it, then look
    page.evaluate("() => new Promise((resolve) => setTimeout(resolve, 50))")
    page.wait_for_function("!busy")
    assert page.evaluate("state.id") == shown
    assert page.evaluate("location.hash") == f"#{shown}"
    assert not errors, errors
    page.close()


def test_the_board_is_played_with_the_keyboard(server, browser) -> None:  # type: ignore[no-untyped-def]
    """The board takes the focus (Tab), the arrows move a cursor, Enter or Space picks a piece
    and plays it; the arrows follow the board as drawn when it is flipped; no console warning
    (the CJK font probe's canvas read-back logged one)."""
    page, errors = new_page(browser)
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}")
            if m.type in ("error", "warning") else None)
    page.goto(f"{server}/xiangqi/")
    page.wait_for_function("state !== null && !busy", timeout=15_000)
    assert not console, console
    game = _two_player_game(server, "")
    page.evaluate("(id) => { location.hash = id; }", game["id"])
    page.wait_for_function("(id) => state && state.id === id && !busy", arg=game["id"])
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "board"
    page.keyboard.press("ArrowUp")  # the cursor appears on the bottom side's general
    assert page.get_attribute("[data-cursor]", "data-cursor") == "e0"
    for key in ("ArrowUp", "ArrowUp", "ArrowRight", "ArrowRight", "ArrowRight", "Enter"):
        page.keyboard.press(key)
    assert page.evaluate("selected") == "h2"
    assert "red cannon" in page.get_attribute("#board", "aria-label")
    for key in ("ArrowLeft", "ArrowLeft", "ArrowLeft"):
        page.keyboard.press(key)
    assert "a legal move" in page.get_attribute("#board", "aria-label")
    page.keyboard.press(" ")
    wait_moves(page, 1)
    assert page.evaluate("state.moves[0].iccs") == "h2e2"
    assert page.evaluate("scrollY") == 0  # Space and the arrows did not scroll the page
    # Black plays from the top with the board flipped: up on the screen is towards rank 0.
    page.click("#flip")
    page.focus("#board")
    for key in ("ArrowDown", "ArrowDown", "ArrowDown", "ArrowDown", "Enter"):
        page.keyboard.press(key)  # e2 -> e6, a black soldier
    assert page.evaluate("selected") == "e6"
    page.keyboard.press("ArrowUp")
    page.keyboard.press("Enter")
    wait_moves(page, 2)
    assert page.evaluate("state.moves[1].iccs") == "e6e5"
    for key in ("ArrowUp", "ArrowUp", "Enter"):  # e5 -> e3, a red soldier
        page.keyboard.press(key)
    assert page.evaluate("selected") == "e3"
    page.keyboard.press("Escape")
    assert page.evaluate("selected") is None
    page.keyboard.press("Alt+ArrowLeft")  # the browser's, not the cursor's
    assert page.evaluate("cursor") == "e3"
    click_square(page, "a3")  # the mouse takes over: the keyboard's cursor is not drawn
    assert page.locator("[data-cursor]").count() == 0
    assert not errors, errors
    page.close()


def test_the_status_line_is_rewritten_only_when_it_changes(server, browser) -> None:  # type: ignore[no-untyped-def]
    """The status line is a live region: replacing its text, even by the same words, has a
    screen reader read it out again, and every click that selects a piece redrew it."""
    page, errors = open_board(browser, server)
    page.evaluate("""() => {
        window.statusWrites = 0;
        new MutationObserver((records) => { window.statusWrites += records.length; })
            .observe(document.getElementById('status'),
                     {childList: true, characterData: true, subtree: true, attributes: true});
    }""")
    for square in ("h2", "g3", "f5", "h2"):
        click_square(page, square)
    assert page.evaluate("selected") == "h2"
    page.click("#flip")
    # let the observer's records arrive: they are delivered after the current task
    page.evaluate("() => new Promise((resolve) => setTimeout(resolve, 0))")
    assert page.evaluate("statusWrites") == 0
    assert page.inner_text("#status") == "Red to move · your move"
    click_square(page, "e2")
    wait_moves(page, 2)
    assert page.evaluate("statusWrites") > 0  # "the model is thinking", then "your move"
    assert page.inner_text("#status") == "Red to move · your move"
    assert not errors, errors
    page.close()


def test_enter_in_the_fen_box_starts_the_game(server, browser) -> None:  # type: ignore[no-untyped-def]
    """Enter in the FEN box did nothing: the position was started only by the New game button."""
    page, errors = new_page(browser)
    page.goto(f"{server}/xiangqi/")
    page.wait_for_function("state !== null && !busy")
    page.select_option("#model-side", "none")
    page.click(".fen-box summary")
    page.fill("#fen", "4k4/9/9/9/9/9/9/1R7/R8/3K5 w - - 0 1")
    page.press("#fen", "Enter")
    page.wait_for_function("state && state.fen.startsWith('4k4') && !busy")
    assert page.evaluate("state.moves.length") == 0
    assert not errors, errors
    page.close()


def test_new_game_abandons_a_model_move_that_takes_long(server, browser) -> None:  # type: ignore[no-untyped-def]
    """New game stayed disabled for as long as the model thought (a first model load takes
    minutes), so a game could not be left. It is usable then: the new game is shown, and the
    old game's reply, when it comes, is not drawn on it."""
    import json

    page, errors = open_board(browser, server)
    held = _held(page, "**/model-move")
    click_square(page, "h2")
    click_square(page, "e2")
    route = _next_held(page, held)  # the model is thinking for the old game
    old = page.evaluate("state")
    assert "the model is thinking" in page.inner_text("#status")
    assert page.is_enabled("#new-game")
    assert page.is_disabled("#undo") and page.is_disabled("#model-move")
    page.click("#new-game")
    page.wait_for_function("(id) => state && state.id !== id && !busy", arg=old["id"])
    new = page.evaluate("state")
    assert new["moves"] == [] and page.evaluate("location.hash") == f"#{new['id']}"
    # the old game's reply arrives late (the model's move, played on the server meanwhile)
    stale = _api(server, f"/{old['id']}/model-move", {"version": old["version"]})
    assert len(stale["moves"]) == 2
    try:
        route.fulfill(status=200, content_type="application/json", body=json.dumps(stale))
    except Exception:  # the page already cancelled the request  # noqa: BLE001
        pass
    page.unroute("**/model-move")
    page.evaluate("() => new Promise((resolve) => setTimeout(resolve, 600))")
    shown = page.evaluate("state")
    assert (shown["id"], shown["moves"]) == (new["id"], [])
    assert page.is_hidden("#error")
    assert "thinking" not in page.inner_text("#status")
    assert page.inner_text("#status") == "Red to move · your move"
    assert page.is_enabled("#new-game") and page.is_disabled("#undo")
    assert page.locator(".mark-last").count() == 0
    # the new game plays as any other: the model replies to a move
    click_square(page, "h2")
    click_square(page, "e2")
    wait_moves(page, 2)
    assert page.evaluate("state.id") == new["id"]
    assert not errors, errors
    page.close()


def test_a_new_game_refused_while_the_model_thinks_follows_the_old_game(server, browser) -> None:  # type: ignore[no-untyped-def]
    """New game abandons the model's move, and is refused (a FEN that does not parse): the old
    game stayed on "model's turn" for good while the server played the abandoned move there, and
    Model move then said the game was changed in another tab. The page follows the old game until
    the move lands, and the reason New game failed stays shown."""
    page, errors = open_board(browser, server)
    held = _held(page, "**/model-move")
    click_square(page, "h2")
    click_square(page, "e2")
    route = _next_held(page, held)  # the model is thinking for this game
    old = page.evaluate("state")
    page.click(".fen-box summary")
    page.fill("#fen", "not a fen")
    page.click("#new-game")
    page.wait_for_function("!busy && !document.getElementById('error').hidden")
    assert page.evaluate("state.id") == old["id"]
    assert "another request is changing the game" in page.inner_text("#status")
    assert page.is_disabled("#model-move") and page.is_disabled("#undo")
    try:
        route.abort("failed")
    except Exception:  # the page already cancelled the request  # noqa: BLE001
        pass
    page.unroute("**/model-move")
    # the server plays the abandoned move (the request the page let go)
    assert len(_api(server, f"/{old['id']}/model-move", {"version": old["version"]})["moves"]) == 2
    page.wait_for_function("state.moves.length === 2 && !watching", timeout=10_000)
    assert page.locator(".mark-last").count() == 1
    assert page.inner_text("#status") == "Red to move · your move"
    assert "10 ranks" in page.inner_text("#error")  # why New game failed, still said
    assert page.is_enabled("#undo")
    assert not errors, errors
    page.close()
