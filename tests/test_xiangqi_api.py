"""The Xiangqi game API through HTTP: whole games, bad moves, turns, restarts, concurrency.

Most tests use FastAPI's TestClient; the concurrency test runs against a real uvicorn server on a
free port. The model player here is a deterministic test player (the first legal move, in the
engine's order); the decision model itself is exercised in test_xiangqi_api_model.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from apps.xiangqi import Board, Move
from apps.xiangqi.api import GAME_ERROR_STATUS, create_app, service_for
from apps.xiangqi.games import GameError, GameService
from apps.xiangqi.store import GameStore
from decision.serve.testing import running_server

GAMES = "/api/xiangqi/games"
# Red to move mates in two: a1a8 (Black's only reply is e9f9), then b2b9 mate.
MATE_IN_TWO = "4k4/9/9/9/9/9/9/1R7/R8/3K5 w - - 0 1"


class FirstMovePlayer:
    """Plays the first legal move; counts its calls (to see the model was asked)."""

    def __init__(self) -> None:
        self.calls = 0

    def choose(self, board: Board) -> Move:
        self.calls += 1
        return board.legal_moves[0]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "games.sqlite3"


@pytest.fixture
def client(db: Path) -> TestClient:
    return TestClient(create_app(db, FirstMovePlayer()))


def new_game(client: TestClient, **body: Any) -> dict[str, Any]:
    r = client.post(GAMES, json=body)
    assert r.status_code == 201, r.text
    return r.json()


def move(client: TestClient, game_id: str, iccs: str, **extra: Any) -> httpx.Response:
    return client.post(f"{GAMES}/{game_id}/moves", json={"move": iccs, **extra})


def test_new_game_from_start_position(client: TestClient) -> None:
    g = new_game(client)
    assert g["fen"].startswith("rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RNBAKABNR w")
    assert g["turn"] == "red" and g["model_side"] == "black"
    assert g["moves"] == [] and g["result"] == "*" and not g["over"] and not g["check"]
    assert len(g["legal_moves"]) == 44  # perft(1) of the start position
    assert client.get(f"{GAMES}/{g['id']}").json() == g
    legal = client.get(f"{GAMES}/{g['id']}/legal-moves").json()
    assert {m["iccs"] for m in legal["legal_moves"]} == set(g["legal_moves"])
    assert {"iccs": "h2e2", "wxf": "C2=5"} in legal["legal_moves"]


def test_whole_game_against_the_model_to_checkmate(client: TestClient) -> None:
    g = new_game(client, fen=MATE_IN_TWO, model_side="black")
    gid = g["id"]
    r = move(client, gid, "a1a8")
    assert r.status_code == 200, r.text
    assert r.json()["model_to_move"] and r.json()["turn"] == "black"
    r = client.post(f"{GAMES}/{gid}/model-move")
    assert r.status_code == 200, r.text
    assert r.json()["model_move"]["iccs"] == "e9f9"  # Black's only legal move
    r = move(client, gid, "b2b9")
    assert r.status_code == 200, r.text
    end = r.json()
    assert end["over"] and end["result"] == "1-0"
    assert end["reason"] == "checkmate" and end["winner"] == "red" and end["check"]
    assert end["legal_moves"] == []
    assert [(m["iccs"], m["by"], m["side"]) for m in end["moves"]] == [
        ("a1a8", "human", "red"), ("e9f9", "model", "black"), ("b2b9", "human", "red"),
    ]
    # WXF files count from each player's right: Red's a-file is 9, Black's f-file is 6.
    assert [m["wxf"] for m in end["moves"]] == ["R9+7", "K5=6", "R8+7"]
    assert end["fen"] == "1R3k3/R8/9/9/9/9/9/9/9/3K5 b - - 3 2"
    # A finished game takes no more moves, from either side.
    r = move(client, gid, "a8a9")
    assert r.status_code == 409 and r.json()["error"]["type"] == "game_over"
    assert "1-0" in r.json()["error"]["message"]
    r = client.post(f"{GAMES}/{gid}/model-move")
    assert r.status_code == 409 and r.json()["error"]["type"] == "game_over"


def test_illegal_move_lists_the_legal_moves(client: TestClient) -> None:
    g = new_game(client, model_side="none")
    for bad in ("a0a5", "h7e7", "e0e2"):  # blocked chariot, black's cannon, general off palace
        r = move(client, g["id"], bad)
        assert r.status_code == 422, bad
        err = r.json()["error"]
        assert err["type"] == "illegal_move" and err["field"] == "move"
        assert bad in err["message"]
        assert sorted(err["legal_moves"]) == sorted(g["legal_moves"])
    r = move(client, g["id"], "zz99")
    assert r.status_code == 422 and r.json()["error"]["type"] == "invalid_move"
    assert "legal_moves" in r.json()["error"]
    # text too long to be a move is no move either (it was a validation_error of the body's
    # length), and is not quoted back whole
    r = move(client, g["id"], "h2e2 " + "x" * 100_000)
    err = r.json()["error"]
    assert r.status_code == 422 and err["type"] == "invalid_move" and err["field"] == "move"
    assert "100005 characters" in err["message"] and len(err["message"]) < 200
    assert sorted(err["legal_moves"]) == sorted(g["legal_moves"])
    r = client.post(f"{GAMES}/{g['id']}/moves", json={"mv": "h2e2"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "move"
    # Nothing was stored by the failed attempts.
    assert client.get(f"{GAMES}/{g['id']}").json()["version"] == g["version"]
    assert move(client, g["id"], "  H2-E2  ").status_code == 200  # the padded form still reads


def test_moves_out_of_turn(client: TestClient) -> None:
    g = new_game(client, model_side="red")  # the model moves first
    assert g["model_to_move"]
    r = move(client, g["id"], "h2e2")
    assert r.status_code == 409
    err = r.json()["error"]
    assert err["type"] == "not_your_turn" and "model-move" in err["message"]
    r = client.post(f"{GAMES}/{g['id']}/model-move")
    assert r.status_code == 200 and r.json()["moves"][0]["by"] == "model"
    r = client.post(f"{GAMES}/{g['id']}/model-move")  # now it is the human's (Black's) turn
    assert r.status_code == 409 and r.json()["error"]["type"] == "not_model_turn"
    # A Red move while Black is to move is illegal, not a second Red move.
    r = move(client, g["id"], "h2e2")
    assert r.status_code == 422 and r.json()["error"]["type"] == "illegal_move"


def test_undo_against_the_model_takes_back_both_moves(client: TestClient) -> None:
    g = new_game(client, model_side="black")
    move(client, g["id"], "h2e2")
    client.post(f"{GAMES}/{g['id']}/model-move")
    r = client.post(f"{GAMES}/{g['id']}/undo")
    assert r.status_code == 200
    back = r.json()
    assert back["moves"] == [] and back["fen"] == g["fen"] and back["turn"] == "red"
    r = client.post(f"{GAMES}/{g['id']}/undo")
    assert r.status_code == 409 and r.json()["error"]["type"] == "nothing_to_undo"
    # Two humans: one move at a time.
    g2 = new_game(client, model_side="none")
    move(client, g2["id"], "h2e2")
    move(client, g2["id"], "h9g7")
    r = client.post(f"{GAMES}/{g2['id']}/undo")
    assert [m["iccs"] for m in r.json()["moves"]] == ["h2e2"]


def test_undo_after_a_mate_reopens_the_game(client: TestClient) -> None:
    g = new_game(client, fen=MATE_IN_TWO, model_side="none")
    for m in ("a1a8", "e9f9", "b2b9"):
        assert move(client, g["id"], m).status_code == 200
    r = client.post(f"{GAMES}/{g['id']}/undo")
    assert r.status_code == 200 and not r.json()["over"] and r.json()["result"] == "*"


@pytest.mark.parametrize(
    ("fen", "words"),
    [
        ("xx", "fields"),
        ("rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RNBAKABN w", ""),
        ("4k4/9/9/9/9/9/9/9/9/4K4 w - - 0 1", "flying general"),
        ("rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RNBAKABNR x", ""),
        ("x" * 500, "too long"),
        # A non-ASCII digit passes str.isdigit() but not int(): once a 500.
        ("rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RNBAKABN\u00b2 w", "empty points"),
    ],
)
def test_malformed_fen_is_422_naming_the_field(client: TestClient, fen: str, words: str) -> None:
    r = client.post(GAMES, json={"fen": fen})
    assert r.status_code == 422
    err = r.json()["error"]
    assert err["field"] == "fen" and err["type"] == "invalid_fen"
    assert words in err["message"]


@pytest.mark.parametrize(
    ("fen", "words"),
    [
        ("1R3k3/R8/9/9/9/9/9/9/9/3K5 b - - 3 2", "(1-0, checkmate): black to move has no legal"),
        ("3k5/R8/9/9/4R4/9/9/9/9/5K3 b - - 0 1", "(1-0, stalemate): black to move has no legal"),
        (MATE_IN_TWO.replace(" 0 1", " 120 61"), "halfmove clock 120 is at or past the 120"),
        (MATE_IN_TWO.replace(" 0 1", " 999999999 1"), "fewer than 120 (e.g. 0)"),
    ],
)
def test_a_position_where_the_game_is_already_over_is_not_a_new_game(
    client: TestClient, fen: str, words: str
) -> None:
    """A new game from a mated or stalemated position, or with the 120-ply no-capture clock
    already run out, used to be created over: no move, model move or undo could ever be played
    in it. It is refused, saying why, and nothing is stored."""
    r = client.post(GAMES, json={"fen": fen, "model_side": "none"})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_fen" and err["field"] == "fen"
    assert "already over" in err["message"] and words in err["message"], err["message"]
    assert service_for(client.app).store.count() == 0
    # One ply short of the limit is still a game: the next ply without a capture draws it.
    g = new_game(client, fen=MATE_IN_TWO.replace(" 0 1", " 119 60"), model_side="none")
    assert not g["over"] and g["result"] == "*"
    end = move(client, g["id"], "a1a2").json()
    assert end["over"] and end["reason"] == "no_capture_120" and end["result"] == "1/2-1/2"


def test_bad_requests(client: TestClient) -> None:
    r = client.post(GAMES, json={"model_side": "blue"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "model_side"
    r = client.post(GAMES, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "malformed_json"
    r = client.get(f"{GAMES}/nope")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
    r = move(client, "nope", "h2e2")
    assert r.status_code == 404


@pytest.mark.parametrize(
    ("action", "body", "field"),
    [
        ("", {"side": "red"}, "side"),  # was ignored: a game with the model as Black
        ("moves", {"move": "h2e2", "Version": 1}, "Version"),  # skipped the stale check
        ("model-move", {"Version": 1}, "Version"),
        ("undo", {"versoin": 1}, "versoin"),
        ("moves", {"move": "h2e2", "version": "2"}, "version"),  # was read as 2
        ("moves", {"move": "h2e2", "version": True}, "version"),  # was read as 1
        ("undo", {"version": 2.0}, "version"),
    ],
)
def test_unknown_fields_and_non_integer_versions_are_422_naming_the_field(
    client: TestClient, action: str, body: dict[str, Any], field: str
) -> None:
    g = new_game(client, model_side="none")
    move(client, g["id"], "h2e2")
    before = client.get(f"{GAMES}/{g['id']}").json()
    path = GAMES if not action else f"{GAMES}/{g['id']}/{action}"
    r = client.post(path, json=body)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["type"] == "validation_error" and err["field"] == field
    assert err["message"].startswith(f"{field}: ")
    if field != "version":
        assert "unknown field; the body is a JSON object with the fields " in err["message"]
        assert "version" in err["message"] or "model_side" in err["message"]
    assert client.get(f"{GAMES}/{g['id']}").json() == before  # nothing was changed


@pytest.mark.parametrize(
    ("action", "content", "words"),
    [
        ("moves", b"null", "got null"),
        ("moves", b'["h2e2"]', "got an array"),
        ("moves", b'"h2e2"', "got a string"),
        ("undo", b"3", "got a number"),
        ("", b"true", "got a boolean"),
    ],
)
def test_a_json_body_that_is_not_an_object_is_422_saying_so(
    client: TestClient, action: str, content: bytes, words: str
) -> None:
    """The message was pydantic's 'Input should be a valid dictionary or object to extract
    fields from', with no field: it did not say the body was meant."""
    g = new_game(client, model_side="none")
    path = GAMES if not action else f"{GAMES}/{g['id']}/{action}"
    r = client.post(path, content=content, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["type"] == "validation_error" and err["field"] is None
    assert "JSON object" in err["message"] and words in err["message"], err["message"]
    fields = {"moves": "move, version", "undo": "version", "": "fen, model_side"}[action]
    assert fields in err["message"]


def _service_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``decision serve``'s app, with the Xiangqi routes next to ``/decide``; its lifespan (the
    model) is never run: these requests are answered before any route needs it."""
    from decision.serve.app import create_app as create_service
    from decision.serve.settings import ServeSettings

    monkeypatch.setenv("DECISION_XIANGQI_DB", str(tmp_path / "served.sqlite3"))
    return create_service(ServeSettings(model_path=str(tmp_path / "no-model")))


# A body that is not read as JSON at all: (content, content-type, status, type, words).
UNREAD_BODIES: dict[str, tuple[bytes | None, str | None, int, str, str]] = {
    "no body": (None, None, 400, "malformed_json", "the request body is empty"),
    "empty JSON body": (b"", "application/json", 400, "malformed_json", "is empty"),
    "curl -d without -H": (b'{"move": "h2e2"}', "application/x-www-form-urlencoded", 415,
                           "unsupported_media_type", "'application/x-www-form-urlencoded'"),
    "text/plain": (b'{"move": "h2e2"}', "text/plain", 415, "unsupported_media_type",
                   "'text/plain'"),
    "no content-type": (b'{"move": "h2e2"}', None, 415, "unsupported_media_type",
                        "no content-type"),
    "invalid JSON": (b'{"move": h2e2}', "application/json", 400, "malformed_json",
                     "not valid JSON: Expecting value"),
    "not UTF-8": (b'{"move": "\xff\xfe"}', "application/json", 400, "malformed_json",
                  "0xff at position 10"),
    "nested too deeply": (b"[" * 50_000 + b"]" * 50_000, "application/json", 400,
                          "malformed_json", "nested too deeply"),
    "integer of 5000 digits": (b'{"move": "h2e2", "version": ' + b"9" * 5000 + b"}",
                               "application/json", 400, "malformed_json",
                               "integer of more than 4300 digits"),
}


@pytest.mark.parametrize("app_kind", ["xiangqi serve", "decision serve"])
@pytest.mark.parametrize("case", list(UNREAD_BODIES))
def test_a_body_not_read_as_json_is_answered_as_decide_answers_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, app_kind: str, case: str
) -> None:
    """A move's body not sent as JSON, empty, or unreadable: the Xiangqi routes answered their
    own 422 ('the request body is missing', 'a body not sent as Content-Type:
    application/json') or a bare 'request body is not valid JSON', while /decide on the same
    server answered 400 or 415 saying why."""
    content, content_type, status, kind, words = UNREAD_BODIES[case]
    if app_kind == "xiangqi serve":
        client = TestClient(create_app(tmp_path / "games.sqlite3", FirstMovePlayer()))
    else:
        client = TestClient(_service_app(tmp_path, monkeypatch))
    g = new_game(client, model_side="none")
    headers = {"content-type": content_type} if content_type else {}
    r = client.post(f"{GAMES}/{g['id']}/moves", content=content, headers=headers)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["type"] == kind and err["field"] is None
    assert words in err["message"], err["message"]
    if status == 415 or "empty" in words:
        # and still says what the body is: its fields
        assert "JSON object (with the fields move, version)" in err["message"], err["message"]
        assert "content-type: application/json" in err["message"]
    assert client.get(f"{GAMES}/{g['id']}").json()["moves"] == []
    if app_kind == "decision serve":  # /decide next to it answers alike
        decided = client.post("/decide", content=content, headers=headers)
        assert decided.status_code == status, decided.text
        assert decided.json()["error"]["type"] == kind
        if status == 400 and "empty" not in words:  # the same reading: the same words
            assert decided.json()["error"]["message"] == err["message"]


def test_a_body_not_sent_as_json_is_415_on_every_route_that_takes_one(
    client: TestClient,
) -> None:
    """Also where the body may be left out (new game, model move, undo): a body that is there
    must be JSON; left out, it is still the usual request."""
    g = new_game(client, model_side="none")
    for path in (GAMES, f"{GAMES}/{g['id']}/model-move", f"{GAMES}/{g['id']}/undo"):
        r = client.post(path, content=b"{}", headers={"content-type": "text/plain"})
        assert r.status_code == 415, r.text
        assert r.json()["error"]["type"] == "unsupported_media_type"
    assert client.get(f"{GAMES}/{g['id']}").json()["moves"] == []
    assert client.post(GAMES, headers={"content-type": "text/plain"}).status_code == 201


def test_new_game_body_may_be_left_out(client: TestClient) -> None:
    """Every field of a new game has a default, so a bare POST starts the usual game."""
    r = client.post(GAMES)
    assert r.status_code == 201, r.text
    g = r.json()
    assert g["model_side"] == "black" and g["moves"] == [] and len(g["legal_moves"]) == 44
    r = client.post(GAMES, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400  # a body that is there must still be JSON


def test_a_slow_model_move_never_delays_another_game(db: Path) -> None:
    """Each game has its own lock: while the model thinks on one game, another game plays on,
    even one whose id would have shared a lock stripe (``hash(id) % 64``) with it."""
    asked = threading.Event()
    release = threading.Event()

    class WaitingPlayer:
        def choose(self, board: Board) -> Move:
            asked.set()  # the model move now holds its game's lock
            release.wait(10)
            return board.legal_moves[0]

    service = GameService(GameStore(db), WaitingPlayer())
    first = service.create(None, "red")["id"]
    other = service.create(None, "none")["id"]
    while hash(other) % 64 != hash(first) % 64:  # the worst case for striped locks
        other = service.create(None, "none")["id"]
    thinking = threading.Thread(target=service.model_move, args=(first,))
    thinking.start()
    played = threading.Event()

    def play_other() -> None:
        service.move(other, "h2e2")
        played.set()

    worker = threading.Thread(target=play_other)
    try:
        assert asked.wait(10)
        worker.start()
        assert played.wait(3), "a move on another game waited for this game's model move"
    finally:
        release.set()
        thinking.join()
        worker.join()
    assert len(service.state(first)["moves"]) == 1
    assert [m["iccs"] for m in service.state(other)["moves"]] == ["h2e2"]


def test_stale_version_is_refused(client: TestClient) -> None:
    g = new_game(client, model_side="none")
    assert move(client, g["id"], "h2e2", version=g["version"]).status_code == 200
    r = move(client, g["id"], "h9g7", version=g["version"])  # based on the old position
    assert r.status_code == 409 and r.json()["error"]["field"] == "version"
    for action in ("model-move", "undo"):
        r = client.post(f"{GAMES}/{g['id']}/{action}", json={"version": g["version"]})
        assert r.status_code == 409 and r.json()["error"]["type"] == "conflict", action
    r = client.post(f"{GAMES}/{g['id']}/model-move", json={"version": g["version"] + 1})
    assert r.status_code == 200 and r.json()["version"] == g["version"] + 2



def test_version_zero_is_a_version_not_a_missing_one(client: TestClient) -> None:
    # versions start at 1: a client sending 0 holds no version the game ever had
    g = new_game(client, model_side="none")
    assert g["version"] >= 1
    r = move(client, g["id"], "h2e2", version=0)
    assert r.status_code == 409 and r.json()["error"]["type"] == "conflict"
    for action in ("model-move", "undo"):
        r = client.post(f"{GAMES}/{g['id']}/{action}", json={"version": 0})
        assert r.status_code == 409 and r.json()["error"]["type"] == "conflict", action
    assert client.get(f"{GAMES}/{g['id']}").json()["version"] == g["version"]


def test_undo_between_two_humans_takes_back_one_model_move(client: TestClient) -> None:
    # with model_side "none" the model may play either side on request; its moves are still
    # taken back one at a time (no human move goes with them)
    g = new_game(client, model_side="none")
    for _ in range(2):
        assert client.post(f"{GAMES}/{g['id']}/model-move").status_code == 200
    r = client.post(f"{GAMES}/{g['id']}/undo")
    assert r.status_code == 200
    assert [m["by"] for m in r.json()["moves"]] == ["model"] and r.json()["turn"] == "black"


def test_a_game_drawn_by_the_no_capture_rule_offers_no_move(client: TestClient) -> None:
    # over with legal moves still on the board: neither the state nor the legal-moves route may
    # offer them, and the model (playing the side to move) is not to move
    g = new_game(client, fen=MATE_IN_TWO.replace(" 0 1", " 119 60"), model_side="black")
    end = move(client, g["id"], "a1a2").json()
    assert end["over"] and end["reason"] == "no_capture_120" and end["turn"] == "black"
    assert end["legal_moves"] == [] and not end["model_to_move"]
    legal = client.get(f"{GAMES}/{g['id']}/legal-moves").json()
    assert legal["legal_moves"] == [] and legal["turn"] == "black"
    r = client.post(f"{GAMES}/{g['id']}/model-move")
    assert r.status_code == 409 and r.json()["error"]["type"] == "game_over"

def test_restart_mid_game_loses_nothing(db: Path) -> None:
    first = TestClient(create_app(db, FirstMovePlayer()))
    g = new_game(first, model_side="black")
    move(first, g["id"], "h2e2")
    first.post(f"{GAMES}/{g['id']}/model-move")
    before = first.get(f"{GAMES}/{g['id']}").json()
    del first  # the server goes away; a new app instance opens the same file
    second = TestClient(create_app(db, FirstMovePlayer()))
    after = second.get(f"{GAMES}/{g['id']}").json()
    assert after == before
    r = move(second, g["id"], "h0g2")
    assert r.status_code == 200 and len(r.json()["moves"]) == 3


def test_two_app_instances_on_one_file_never_lose_a_move(db: Path) -> None:
    """Different processes share only the SQLite file: the version compare-and-swap decides."""
    a = GameService(GameStore(db), FirstMovePlayer())
    b = GameService(GameStore(db), FirstMovePlayer())
    gid = a.create(None, "none")["id"]
    ok = 0
    refused = 0

    def play(service: GameService) -> None:
        nonlocal ok, refused
        for _ in range(15):
            state = service.state(gid)
            if state["over"]:
                return
            try:
                service.move(gid, state["legal_moves"][0], version=state["version"])
                ok += 1
            except Exception as e:  # the other instance wrote first
                assert isinstance(e, GameError) and GAME_ERROR_STATUS[e.kind] in (409, 422), e
                refused += 1

    threads = [threading.Thread(target=play, args=(s,)) for s in (a, b, a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = a.state(gid)
    assert len(final["moves"]) == ok and final["version"] == 1 + ok
    replayed = Board()
    for m in final["moves"]:
        replayed.push_iccs(m["iccs"])  # raises if two moves of one side were stored
    assert ok + refused == 60 or final["over"]


# ---------------------------------------------------------------------------------------------
# A real server.


@pytest.fixture
def live_server(db: Path) -> Iterator[str]:
    with running_server(create_app(db, FirstMovePlayer())) as url:
        yield url


def test_concurrent_moves_on_one_game_never_corrupt_it(live_server: str) -> None:
    with httpx.Client(base_url=live_server, timeout=30) as http:
        gid = http.post(GAMES, json={"model_side": "none"}).json()["id"]
        red_moves = http.get(f"{GAMES}/{gid}").json()["legal_moves"]

        # 1) Every Red opening at once: exactly one can be played; the rest find Black to move.
        def play(m: str) -> int:
            return http.post(f"{GAMES}/{gid}/moves", json={"move": m}).status_code

        with ThreadPoolExecutor(16) as pool:
            codes = list(pool.map(play, red_moves[:16]))
        # (409: game_busy, another opening was being played at that moment)
        assert codes.count(200) == 1 and set(codes) <= {200, 409, 422}, codes
        state = http.get(f"{GAMES}/{gid}").json()
        assert len(state["moves"]) == 1 and state["turn"] == "black" and state["version"] == 2

        # 2) Clients that read, then move without a version: every 200 is one stored move.
        def read_then_move(_: int) -> int:
            s = http.get(f"{GAMES}/{gid}").json()
            if s["over"]:
                return 0
            r = http.post(f"{GAMES}/{gid}/moves", json={"move": s["legal_moves"][-1]})
            return r.status_code

        with ThreadPoolExecutor(8) as pool:
            codes = list(pool.map(read_then_move, range(40)))
        final = http.get(f"{GAMES}/{gid}").json()
    assert set(codes) <= {0, 200, 409, 422}, codes
    assert len(final["moves"]) == 1 + codes.count(200)
    assert final["version"] == 2 + codes.count(200)
    board = Board()
    for m in final["moves"]:
        board.push_iccs(m["iccs"])  # the stored game is a legal sequence
    assert board.fen() == final["fen"]


def test_a_burst_on_one_busy_game_never_stalls_another_game(db: Path) -> None:
    """A request on a game another request is changing is answered 409 ``game_busy`` at once:
    it used to wait for the game's lock inside one of the server's route threads, so a burst on
    one game took every thread and requests on other games stalled behind it. The route threads
    are shrunk to 2 here, so 4 requests waiting on one game would show it."""
    import anyio.to_thread

    app = create_app(db, FirstMovePlayer())

    @app.post("/test/route-threads/{n}")
    async def route_threads(n: int) -> None:
        anyio.to_thread.current_default_thread_limiter().total_tokens = n

    with running_server(app) as base, httpx.Client(base_url=base, timeout=5) as http:
        busy, other = (http.post(GAMES, json={"model_side": "none"}).json() for _ in range(2))
        http.post("/test/route-threads/2").raise_for_status()

        def play(game_id: str) -> httpx.Response:
            with httpx.Client(base_url=base, timeout=5) as client:
                return client.post(f"{GAMES}/{game_id}/moves", json={"move": "h2e2"})

        with service_for(app).store.locked(busy["id"]):  # a slow change of that game runs
            with ThreadPoolExecutor(4) as pool:
                burst = list(pool.map(play, [busy["id"]] * 4))
            elsewhere = play(other["id"])
        for r in burst:
            assert r.status_code == 409, r.text
            err = r.json()["error"]
            assert err["type"] == "game_busy" and err["field"] == "game_id"
            assert "busy" in err["message"]
        assert elsewhere.status_code == 200, elsewhere.text
        # Refused, not queued: nothing was played on the busy game; once free it plays.
        assert http.get(f"{GAMES}/{busy['id']}").json()["version"] == busy["version"]
        assert play(busy["id"]).status_code == 200


def test_web_board_is_served(live_server: str) -> None:
    with httpx.Client(base_url=live_server, timeout=10) as http:
        page = http.get("/xiangqi", follow_redirects=True)
        assert page.status_code == 200 and "board.js" in page.text
        for name, kind in (("board.js", "javascript"), ("board.css", "css"),
                           ("icon.svg", "svg")):
            r = http.get(f"/xiangqi/{name}")
            assert r.status_code == 200 and kind in r.headers["content-type"], name
        assert http.get("/xiangqi/../api.py").status_code == 404


def test_model_that_cannot_load_is_503_and_changes_nothing(db: Path) -> None:
    from decision.errors import CheckpointError

    attempts = 0

    def broken() -> FirstMovePlayer:
        nonlocal attempts
        attempts += 1
        raise CheckpointError("models/default: no default model yet")

    client = TestClient(create_app(db, broken))
    g = new_game(client, model_side="red")
    for _ in range(2):  # a failed load is not cached: each request tries again
        r = client.post(f"{GAMES}/{g['id']}/model-move")
        assert r.status_code == 503 and r.json()["error"]["type"] == "unavailable"
        assert "no default model" in r.json()["error"]["message"]
    assert attempts == 2
    assert client.get(f"{GAMES}/{g['id']}").json()["version"] == g["version"]


def test_the_xiangqi_only_app_answers_every_error_as_json(tmp_path: Path) -> None:
    """``decision xiangqi serve`` had no app-wide handlers: an unknown path was FastAPI's
    ``{"detail": ...}`` and a failing player a plain-text 500."""

    class Failing:
        def choose(self, board: Board) -> Move:
            raise RuntimeError("the player broke")

    client = TestClient(create_app(tmp_path / "games.sqlite3", Failing()),
                        raise_server_exceptions=False)
    game = client.post(GAMES, json={"model_side": "red"}).json()
    r = client.post(f"{GAMES}/{game['id']}/model-move")
    assert r.status_code == 500 and r.json()["error"]["type"] == "internal_error"
    r = client.get("/api/xiangqi/nowhere")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
    r = client.put(GAMES)
    assert r.status_code == 405 and r.json()["error"]["type"] == "method_not_allowed"
    assert client.get(f"{GAMES}/{game['id']}").json()["moves"] == []  # nothing half-played
    # a Range the board's files cannot serve: Starlette's plain-text 400 and empty 416 before
    for header in ("bytes=999999999-", "bytes=5-1"):
        r = client.get("/xiangqi/board.js", headers={"Range": header})
        assert r.status_code == 416 and r.json()["error"]["type"] == "range_not_satisfiable"
    r = client.get("/xiangqi/board.js", headers={"Range": "bytes=0-9"})
    assert r.status_code == 206 and len(r.content) == 10


def test_the_xiangqi_only_app_refuses_an_oversized_body_with_413(tmp_path: Path) -> None:
    """``decision serve`` had the body limit, the Xiangqi-only app read any body whole."""
    client = TestClient(create_app(tmp_path / "games.sqlite3", FirstMovePlayer()))
    game = new_game(client, model_side="none")
    big = b'{"move": "h2e2", "pad": "' + b"x" * 1_000_000 + b'"}'  # the service's default limit
    json_type = {"content-type": "application/json"}
    for content in (big, iter([big[:500_000], big[500_000:]])):  # declared length, then chunked
        r = client.post(f"{GAMES}/{game['id']}/moves", content=content, headers=json_type)
        assert r.status_code == 413, r.text
        err = r.json()["error"]
        assert err["type"] == "payload_too_large" and "1000000 bytes" in err["message"]
    small = TestClient(create_app(tmp_path / "games.sqlite3", FirstMovePlayer(),
                                  max_body_bytes=1024))
    r = small.post(GAMES, json={"fen": "x" * 2000})
    assert r.status_code == 413 and r.json()["error"]["type"] == "payload_too_large"
    assert client.get(f"{GAMES}/{game['id']}").json()["moves"] == []


def test_a_model_move_cut_off_by_a_forced_quit_is_a_json_503_and_plays_nothing(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second Ctrl-C while the model thinks: uvicorn cancels the request. It was a plain-text
    'Internal Server Error' 500 with a traceback, and the move thread ran on and saved the move
    the caller was told had failed. (One SIGTERM or Ctrl-C waits for the move: a 200.)"""
    import uvicorn

    from apps.xiangqi import games
    from decision.serve.testing import free_port

    asked, release = threading.Event(), threading.Event()

    class WaitingPlayer:
        def choose(self, board: Board) -> Move:
            asked.set()
            release.wait(10)
            return board.legal_moves[0]

    saves: list[str] = []
    tried_to_save = threading.Event()

    def begin_save() -> None:
        try:
            real_begin_save()
            saves.append("saved")
        except games.GivenUp:
            saves.append("given up")
            raise
        finally:
            tried_to_save.set()

    real_begin_save = games._begin_save
    monkeypatch.setattr(games, "_begin_save", begin_save)
    app = create_app(db, WaitingPlayer())
    game = TestClient(app).post(GAMES, json={"model_side": "red"}).json()
    saves.clear()
    tried_to_save.clear()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    answers: list[httpx.Response] = []

    def model_move() -> None:
        for _ in range(100):
            try:
                answers.append(httpx.post(
                    f"http://127.0.0.1:{port}{GAMES}/{game['id']}/model-move", timeout=20))
                return
            except httpx.ConnectError:  # not listening yet
                threading.Event().wait(0.1)

    asking = threading.Thread(target=model_move)
    asking.start()
    try:
        assert asked.wait(20)
        server.should_exit = server.force_exit = True  # what a second Ctrl-C does
        asking.join(20)
        serving.join(20)
    finally:
        release.set()
    assert answers, "no answer"
    r = answers[0]
    assert r.status_code == 503, r.text
    assert r.headers["content-type"] == "application/json" and r.headers["retry-after"] == "1"
    err = r.json()["error"]
    assert err["type"] == "unavailable" and "nothing was changed" in err["message"]
    assert tried_to_save.wait(10)
    assert saves == ["given up"]
    assert GameStore(db).get(game["id"]).moves == ()  # as the answer said


def test_a_request_given_up_is_told_what_became_of_its_save() -> None:
    from apps.xiangqi.games import Answer, GivenUp

    answer = Answer()
    answer.begin_save()
    assert answer.give_up() == "saving"  # the save goes on; its end is not known yet
    done = Answer()
    done.begin_save()
    done.end_save(True)
    assert done.give_up() == "saved"
    failed = Answer()
    failed.begin_save()
    failed.end_save(False)  # a stale version, say: nothing was written
    assert failed.give_up() == "unchanged"
    late = Answer()
    assert late.give_up() == "unchanged"
    with pytest.raises(GivenUp):
        late.begin_save()


def test_a_failed_save_is_recorded_as_unchanged() -> None:
    """A store write that raises leaves its request's change "unchanged"."""
    from apps.xiangqi import games

    with games.answering() as answer, pytest.raises(RuntimeError):
        games._write(lambda: (_ for _ in ()).throw(RuntimeError("disk full")))
    assert answer.give_up() == "unchanged"


def test_every_refusal_of_the_game_layer_has_its_status() -> None:
    """api.py answers each ``GameError.kind`` with its status; a kind without one would be a
    500 (a KeyError) instead of the JSON error. (No type checker runs here: the kinds raised are
    read from the source.)"""
    import re
    import typing

    from apps.xiangqi import api, games

    kinds = set(typing.get_args(games.GameErrorKind))
    assert set(GAME_ERROR_STATUS) == kinds
    for module in (api, games):
        raised = re.findall(r'GameError\(\s*"(\w+)"', Path(module.__file__).read_text())
        assert raised and set(raised) <= kinds, module.__name__


def test_the_game_layer_knows_nothing_of_http() -> None:
    """apps.xiangqi.games (GameService) imports no web framework: the HTTP layer is api.py's."""
    import subprocess
    import sys

    code = ("import sys, apps.xiangqi.games; "
            "print(sorted(m for m in ('fastapi', 'starlette', 'pydantic', 'decision.serve') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_null_body_is_no_body_where_the_body_may_be_left_out(client: TestClient) -> None:
    """As docs/xiangqi-service.md says: create, model move and undo take ``null`` as no body."""
    json_null = {"content": b"null", "headers": {"content-type": "application/json"}}
    r = client.post(GAMES, **json_null)
    assert r.status_code == 201, r.text
    g = r.json()
    move(client, g["id"], "h2e2")
    r = client.post(f"{GAMES}/{g['id']}/undo", **json_null)
    assert r.status_code == 200 and r.json()["moves"] == [], r.text


@pytest.mark.parametrize("app_kind", ["xiangqi serve", "decision serve"])
def test_a_write_sent_by_a_page_of_another_site_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, app_kind: str
) -> None:
    """A page on any site could make a visitor's browser create games, ask for model moves or
    undo (an empty POST needs no CORS preflight): the browser labels such a request
    ``Sec-Fetch-Site: cross-site``, and it is refused before any route runs. The board's own
    requests (same-origin), reads and clients without the header (curl) are untouched."""
    if app_kind == "xiangqi serve":
        client = TestClient(create_app(tmp_path / "games.sqlite3", FirstMovePlayer()))
    else:
        client = TestClient(_service_app(tmp_path, monkeypatch))
    g = new_game(client, model_side="none")
    cross = {"sec-fetch-site": "cross-site"}
    for path in (GAMES, f"{GAMES}/{g['id']}/model-move", f"{GAMES}/{g['id']}/undo",
                 *(["/decide"] if app_kind == "decision serve" else [])):
        r = client.post(path, headers=cross)
        assert r.status_code == 403, (path, r.text)
        err = r.json()["error"]
        assert err["type"] == "cross_site_request" and "Sec-Fetch-Site" in err["message"]
        assert err["request_id"] == r.headers["x-request-id"]
    assert client.get(f"{GAMES}/{g['id']}", headers=cross).json()["moves"] == []  # reads answer
    for site in ("same-origin", "same-site", "none"):
        r = client.post(f"{GAMES}/{g['id']}/moves", json={"move": "h2e2"},
                        headers={"sec-fetch-site": site})
        assert r.status_code == 200, (site, r.text)
        client.post(f"{GAMES}/{g['id']}/undo")
    assert client.post(GAMES, json={}).status_code == 201  # no header: curl, scripts


@pytest.mark.parametrize("route", ["create", "move"])
def test_a_store_that_cannot_write_is_a_503_saying_nothing_changed(
    db: Path, monkeypatch: pytest.MonkeyPatch, route: str,
) -> None:
    """A full disk (or a database locked past its timeout) was a 500 "internal error:
    OperationalError": the client could not tell a server fault that may pass from a bug, nor
    whether its move was kept. SQLite rolled the write back, so nothing changed."""
    import sqlite3

    from apps.xiangqi.store import GameStore

    client = TestClient(create_app(db, FirstMovePlayer()), raise_server_exceptions=False)
    game = new_game(client, model_side="none")

    def full(*args: Any, **kwargs: Any) -> Any:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(GameStore, "create" if route == "create" else "save", full)
    response = (client.post("/api/xiangqi/games", json={}) if route == "create"
                else move(client, game["id"], "h2e2"))
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["type"] == "unavailable"
    assert "database or disk is full" in error["message"] and "not" in error["message"]
    assert response.headers["retry-after"]
    monkeypatch.undo()
    assert client.get(f"/api/xiangqi/games/{game['id']}").json()["version"] == game["version"]
