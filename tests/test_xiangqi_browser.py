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


def wait_moves(page, count: int) -> None:  # type: ignore[no-untyped-def]
    page.wait_for_function(
        "(n) => state && state.moves.length === n && !busy", arg=count, timeout=30_000
    )


def test_play_by_clicking_against_the_model(server, browser) -> None:  # type: ignore[no-untyped-def]
    OUT.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1100, "height": 800})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{server}/xiangqi/")
    page.wait_for_function("state !== null && !busy", timeout=15_000)
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
