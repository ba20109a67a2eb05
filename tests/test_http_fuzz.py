"""Fuzz every HTTP route of the whole service (``/decide``, ``/health``, ``/models``,
``/metrics``, the Xiangqi game API and the contracts API) against a real uvicorn server.

Bad input must get a 4xx with the JSON error shape ``{"error": {"type", "message", "field"}}``
(never a 500, a dropped connection or a non-JSON body) and good input a 2xx with a right answer:
bodies are valid examples mutated (wrong types at every field, fields deleted or added, NaN,
Infinity and numbers JSON cannot hold, duplicate keys), raw edge-case bodies and content types,
bogus game ids, wrong methods and query strings. The game API is also run as a state machine
(create, move, model move, undo, read) checked after every step against a local
``apps.xiangqi.Board`` replay. Derandomized, few examples, so it stays fast on 2 CPU cores.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from apps.xiangqi import Board, Move
from apps.xiangqi.api import configure
from apps.xiangqi.core import COLOR_NAMES
from apps.xiangqi.store import GameStore
from decision.serve import ServeSettings, create_app
from decision.serve.testing import running_server

MAX_BODY = 100_000
GAMES = "/api/xiangqi/games"
FUZZ = settings(max_examples=120, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


class IndexPlayer:
    """A deterministic stand-in for the model: picks a legal move by the ply number."""

    def choose(self, board: Board) -> Move:
        moves = board.legal_moves
        return moves[(7 * len(board.move_stack)) % len(moves)]


@pytest.fixture(scope="module")
def server(tiny_checkpoint_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    app = create_app(ServeSettings(
        model_path=str(tiny_checkpoint_dir), max_body_bytes=MAX_BODY, max_wait_ms=0,
        request_timeout_s=120,
    ))
    configure(app, GameStore(tmp_path_factory.mktemp("fuzz") / "games.sqlite3"), IndexPlayer())
    with running_server(app) as url:
        yield url


@pytest.fixture(scope="module")
def http(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=120) as client:
        yield client


def _new_game(http: httpx.Client, **body: Any) -> dict[str, Any]:
    r = http.post(GAMES, json=body)
    assert r.status_code == 201, r.text
    return r.json()


def _assert_answered(r: httpx.Response, success: tuple[int, ...] = (200,)) -> None:
    """The service's contract for any request: a success, or a 4xx in the JSON error shape."""
    if r.status_code in success:
        if r.url.path == "/metrics":  # Prometheus text
            assert r.headers["content-type"].startswith("text/plain; version=0.0.4"), r.headers
        else:
            assert r.headers["content-type"].startswith("application/json"), r.headers
            r.json()
        return
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    error = r.json()["error"]
    assert isinstance(error["type"], str) and error["type"], error
    assert isinstance(error["message"], str) and error["message"], error
    assert "field" in error and (error["field"] is None or isinstance(error["field"], str)), error


# ---------------------------------------------------------------------------------------------
# Valid examples of every body, mutated.

CHOICE = {"type": "choice", "options": ["yes", "no", "not stated"]}
DECIDE = {
    "document": "The tenant gave 20 days of notice; the lease requires 30 days.",
    "questions": [
        {"id": "timely", "text": "Was notice timely?", "answer": {"type": "boolean"}},
        {"id": "days", "text": "Days of notice?",
         "answer": {"type": "integer", "minimum": 0, "maximum": 90}},
        {"id": "deposit", "text": "May the deposit be retained?", "answer": CHOICE},
        {"id": "rent", "text": "Rent?", "answer": {"type": "number", "max_tokens": 4}},
        {"id": "date", "text": "Date?",
         "answer": {"type": "pattern", "regex": "[0-9]{2}-[0-9]{2}", "max_tokens": 6}},
        {"id": "obj", "text": "As JSON?", "answer": {
            "type": "json", "max_tokens": 16,
            "schema": {"type": "object", "properties": {"a": {"type": "integer"}},
                       "required": ["a"]}}},
    ],
    "mode": "joint",
    "options": {"threshold": 0.9, "max_steps": 1, "return_probabilities": True,
                "commit": None, "score_options": False},
}
CHECK = {"preset": "lease", "answers": {"timely": "no", "deposit": "no", "required": 20,
                                        "given": 12}}
# (method, path, example body or None for no body, success statuses)
ROUTES: list[tuple[str, str, Any, tuple[int, ...]]] = [
    ("POST", "/decide", DECIDE, (200,)),
    ("GET", "/health", None, (200,)),
    ("GET", "/models", None, (200,)),
    ("GET", "/metrics", None, (200,)),
    ("POST", GAMES, {"fen": "4k4/9/9/9/9/9/9/1R7/R8/3K5 w - - 0 1", "model_side": "none"},
     (201,)),
    ("GET", GAMES + "/{game_id}", None, (200,)),
    ("GET", GAMES + "/{game_id}/legal-moves", None, (200,)),
    ("POST", GAMES + "/{game_id}/moves", {"move": "h2e2", "version": 1}, (200,)),
    ("POST", GAMES + "/{game_id}/model-move", {"version": None}, (200,)),
    ("POST", GAMES + "/{game_id}/undo", {"version": None}, (200,)),
    ("GET", "/api/contracts/presets", None, (200,)),
    ("GET", "/api/contracts/examples", None, (200,)),
    ("POST", "/api/contracts/check", CHECK, (200,)),
]
BODY_ROUTES = [r for r in ROUTES if r[2] is not None]

_SCALAR = (st.none() | st.booleans() | st.integers(-10**6, 10**6)
           | st.sampled_from([-1, 0, 2**63, -(10**30), 10**19])
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
           | st.sampled_from(["", " ", "\x00", "\u202e\u05d0", "e\u0301", "\ufeff", "𝕏"])
           | st.just("a" * 3000))
_JSON = st.recursive(
    _SCALAR,
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=6,
)
# what Python's json writes and reads though JSON has no such thing, and numbers it cannot hold
_RAW = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "5e-324", "-0.0", "1" + "0" * 30]
_RAW_MARK = "\x00raw\x00"


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*prefix, index))


@st.composite
def _mutated(draw: st.DrawFn, example: Any) -> str:
    """``example`` as JSON text with up to two mutations: a value replaced (any JSON, or NaN,
    Infinity, 1e400), a field deleted or added, a key repeated."""
    body = copy.deepcopy(example)
    for _ in range(draw(st.sampled_from([1, 1, 2, 0]))):
        paths = [p for p in _paths(body) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = body
        for key in path[:-1]:
            parent = parent[key]
        how = draw(st.sampled_from(["replace", "replace", "raw", "delete", "add"]))
        if how == "delete":
            del parent[path[-1]]
        elif how == "add" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=6))] = draw(_JSON)
        else:
            parent[path[-1]] = draw(_JSON) if how == "replace" else _RAW_MARK
    text = json.dumps(body)
    while json.dumps(_RAW_MARK) in text:
        text = text.replace(json.dumps(_RAW_MARK), draw(st.sampled_from(_RAW)), 1)
    if isinstance(body, dict) and body and draw(st.integers(0, 5)) == 0:
        key = draw(st.sampled_from(sorted(body)))  # a repeated key: the last one counts
        text = text[:-1] + f", {json.dumps(key)}: {json.dumps(draw(_JSON))}}}"
    return text


def _check_decision(body: dict[str, Any], answer: dict[str, Any]) -> None:
    """A 200 from /decide answers every question, in order, with a value of its schema."""
    answers = answer["answers"]
    assert [a["id"] for a in answers] == [q["id"] for q in body["questions"]], answer
    for a, q in zip(answers, body["questions"], strict=True):
        schema, value = q["answer"], a["value"]
        assert 0.0 <= a["confidence"] <= 1.0, a
        if schema["type"] == "choice":
            assert value in schema["options"], (a, schema)
        elif schema["type"] == "boolean":
            assert isinstance(value, bool) and a["text"] == ("yes" if value else "no"), a
        elif schema["type"] == "integer":
            low, high = schema.get("minimum", -999_999_999), schema.get("maximum", 999_999_999)
            assert isinstance(value, int) and low <= value <= high and str(value) == a["text"], a
        elif schema["type"] == "number":
            assert isinstance(value, int | float) and float(a["text"]) == value, a
        elif schema["type"] == "json":
            assert json.loads(a["text"]) == value, a
        probabilities = a["option_probabilities"]
        if probabilities is not None:
            options = schema["options"] if schema["type"] == "choice" else ["yes", "no"]
            assert sorted(probabilities) == sorted(options), a
            assert abs(sum(probabilities.values()) - 1.0) < 1e-3, a


def test_the_fuzzed_routes_are_every_route_of_the_openapi_schema(http: httpx.Client) -> None:
    """A route added later must be added to ROUTES, so it is fuzzed too."""
    spec = http.get("/openapi.json").json()
    served = {(method.upper(), path) for path, ops in spec["paths"].items() for method in ops}
    assert served == {(method, path) for method, path, _, _ in ROUTES}


def test_the_examples_themselves_succeed(http: httpx.Client) -> None:
    """The examples the fuzz mutates are valid: what a mutation breaks is the mutation's."""
    for method, path, example, success in BODY_ROUTES:
        game = _new_game(http, model_side="none")
        if path.endswith("/undo"):
            http.post(f"{GAMES}/{game['id']}/moves", json={"move": "h2e2"})
        r = http.request(method, path.replace("{game_id}", game["id"]), json=example)
        assert r.status_code in success, (path, r.text)
    _check_decision(DECIDE, http.post("/decide", json=DECIDE).json())


@FUZZ
@given(data=st.data())
def test_mutated_bodies_are_answered_as_json_never_a_500(http: httpx.Client, data: Any) -> None:
    # /decide twice as often: its body has the most fields
    method, path, example, success = data.draw(st.sampled_from([BODY_ROUTES[0], *BODY_ROUTES]))
    content = data.draw(_mutated(example))
    if "{game_id}" in path:
        game = _new_game(http, model_side="none")
        path = path.replace("{game_id}", game["id"])
        if path.endswith("/undo"):
            http.post(f"{GAMES}/{game['id']}/moves", json={"move": "h2e2"})
    r = http.request(method, path, content=content.encode("utf-8", "surrogatepass"),
                     headers={"content-type": "application/json"})
    _assert_answered(r, success)
    if r.status_code == 200 and path == "/decide":
        _check_decision(json.loads(content), r.json())


# (name, raw body, content-type): read as JSON, they are 4xx; none is a 500
RAW_BODIES: list[tuple[str, bytes, str | None]] = [
    ("empty", b"", "application/json"),
    ("whitespace", b"  \n", "application/json"),
    ("not JSON", b"{'move': 1}", "application/json"),
    ("NaN", b"NaN", "application/json"),
    ("Infinity in an object", b'{"version": Infinity, "move": NaN, "document": NaN}',
     "application/json"),
    ("null", b"null", "application/json"),
    ("array", b"[1, 2]", "application/json"),
    ("a string", b'"h2e2"', "application/json"),
    ("a lone surrogate", b'{"move": "\\ud800", "fen": "\\udfff", "preset": "\\ud800",'
                         b' "document": "\\ud800"}', "application/json"),
    ("NUL", b'{"move": "\\u0000", "fen": "\\u0000", "preset": "\\u0000"}', "application/json"),
    ("not UTF-8", b'{"move": "\xff\xfe"}', "application/json"),
    ("nested too deeply", b"[" * 20_000 + b"]" * 20_000, "application/json"),
    ("deep object", b'{"a":' * 3000 + b"1" + b"}" * 3000, "application/json"),
    ("integer of 5000 digits", b'{"version": ' + b"9" * 5000 + b"}", "application/json"),
    ("byte-order mark", b"\xef\xbb\xbf{}", "application/json"),
    ("over the size limit", b'{"document": "' + b"a" * MAX_BODY + b'"}', "application/json"),
    ("form", b"move=h2e2", "application/x-www-form-urlencoded"),
    ("text", b'{"move": "h2e2"}', "text/plain"),
    ("no content-type", b'{"move": "h2e2"}', None),
    ("multipart", b"--x\r\n\r\n--x--\r\n", "multipart/form-data; boundary=x"),
]


@pytest.mark.parametrize("case", RAW_BODIES, ids=[c[0] for c in RAW_BODIES])
def test_raw_bodies_on_every_route_that_takes_one(
    http: httpx.Client, case: tuple[str, bytes, str | None]
) -> None:
    name, content, content_type = case
    game = _new_game(http, model_side="none")
    for method, path, _, success in BODY_ROUTES:
        path = path.replace("{game_id}", game["id"])
        headers = {"content-type": content_type} if content_type else {}
        r = http.request(method, path, content=content, headers=headers)
        _assert_answered(r, success)
        if name == "over the size limit":
            assert r.status_code == 413, (path, r.text)
    assert http.get(f"{GAMES}/{game['id']}").json()["moves"] == []  # no bad body played one
    assert http.get("/health").json()["status"] == "ok"


def test_bogus_game_ids_methods_and_query_strings(http: httpx.Client) -> None:
    game = _new_game(http, model_side="none")
    for bogus in ["nope", game["id"].upper(), game["id"] + " ", "%00", "%ff", "%ED%A0%80",
                  "\u202e\u0301", "x" * 5000, "%2e%2e", "'; DROP TABLE games;--", "%25"]:
        for method, action, body in [("GET", "", None), ("GET", "/legal-moves", None),
                                     ("POST", "/moves", {"move": "h2e2"}),
                                     ("POST", "/model-move", None), ("POST", "/undo", {})]:
            r = http.request(method, f"{GAMES}/{bogus}{action}", json=body)
            assert r.status_code == 404, (bogus, action, r.text)
            assert r.json()["error"]["type"] == "not_found"
    for method, path, _, success in ROUTES:
        path = path.replace("{game_id}", game["id"])
        for wrong in ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "BREW"):
            if wrong == method:
                continue
            r = http.request(wrong, path)
            assert r.status_code == 405, (wrong, path, r.text)
            assert method in r.headers["allow"] and r.json()["error"]["type"] == (
                "method_not_allowed")
        if method == "GET":
            r = http.get(path + "?x=1&version=abc&%ff=%00&" + "a" * 3000)
            _assert_answered(r, success)
            assert r.status_code in success
    assert http.get("/nowhere/%ff").json()["error"]["type"] == "not_found"
    assert http.get(f"{GAMES}/{game['id']}").json()["moves"] == []


# ---------------------------------------------------------------------------------------------
# The game API as a state machine, checked against a local Board after every step.

START_FENS = [
    None,
    "4k4/9/9/9/9/9/9/1R7/R8/3K5 w - - 0 1",  # Red mates in two
    "3k5/9/9/9/9/9/9/9/4A4/4K4 w - - 117 80",  # drawn by the no-capture limit in 3 plies
    "4k4/4P4/9/9/9/9/9/9/9/4K4 b - - 0 1",  # Black in check
]
SQUARES = [f + r for f in "abcdefghi" for r in "0123456789"]
STALE = st.sampled_from([None, None, None, False, True])  # send no version, the current, an old


class GameMachine(RuleBasedStateMachine):
    http: httpx.Client

    def __init__(self) -> None:
        super().__init__()
        self.board = Board()
        self.by: list[str] = []
        self.gid = ""
        self.model_side = "none"
        self.version = 0
        self.model_moves = 0

    def _check(self, state: dict[str, Any]) -> None:
        b = self.board
        over = b.outcome() is not None
        assert state["fen"] == b.fen()
        assert [(m["iccs"], m["by"]) for m in state["moves"]] == list(
            zip([m.iccs() for m in b.move_stack], self.by, strict=True))
        assert state["turn"] == COLOR_NAMES[b.turn] and state["check"] == b.is_check()
        assert state["over"] == over
        assert state["result"] == (b.outcome().result() if over else "*")
        assert state["legal_moves"] == ([] if over else sorted(m.iccs() for m in b.legal_moves))
        assert state["model_to_move"] == (not over and self.model_side == COLOR_NAMES[b.turn])
        assert state["version"] >= self.version
        self.version = state["version"]

    def _refused(self, r: httpx.Response, status: int, kind: str) -> dict[str, Any]:
        assert r.status_code == status, (status, kind, r.text)
        error = r.json()["error"]
        assert error["type"] == kind and error["message"], error
        return error

    @initialize(fen=st.sampled_from(START_FENS), side=st.sampled_from(["red", "black", "none"]))
    def create(self, fen: str | None, side: str) -> None:
        r = self.http.post(GAMES, json={"model_side": side, **({"fen": fen} if fen else {})})
        assert r.status_code == 201, r.text
        self.gid, self.model_side = r.json()["id"], side
        self.board = Board(fen) if fen else Board()
        self._check(r.json())

    def _version(self, stale: bool | None) -> dict[str, Any]:
        return {} if stale is None else {"version": self.version - 1 if stale else self.version}

    @rule(data=st.data(), kind=st.sampled_from(["legal", "legal", "legal", "squares", "text"]),
          stale=STALE)
    def move(self, data: Any, kind: str, stale: bool | None) -> None:
        b = self.board
        legal = sorted(m.iccs() for m in b.legal_moves)
        if kind == "legal" and legal:
            text = data.draw(st.sampled_from(legal))
        elif kind == "text":
            text = data.draw(st.text(max_size=16))
        else:
            text = data.draw(st.sampled_from(SQUARES)) + data.draw(st.sampled_from(SQUARES))
        r = self.http.post(f"{GAMES}/{self.gid}/moves", json={"move": text,
                                                              **self._version(stale)})
        if stale:
            self._refused(r, 409, "conflict")
        elif b.outcome() is not None:
            self._refused(r, 409, "game_over")
        elif self.model_side == COLOR_NAMES[b.turn]:
            self._refused(r, 409, "not_your_turn")
        else:
            try:
                move = Move.from_iccs(text)
            except ValueError:
                move = None
            if move is None or move.iccs() not in legal:
                kind = "illegal_move" if move and move.from_square != move.to_square else (
                    "invalid_move")
                error = self._refused(r, 422, kind)
                assert error["legal_moves"] == legal and error["field"] == "move"
                return
            assert r.status_code == 200, r.text
            b.push(move)
            self.by.append("human")
            self._check(r.json())

    @precondition(lambda self: self.model_moves < 6)
    @rule(stale=STALE)
    def model_move(self, stale: bool | None) -> None:
        b = self.board
        self.model_moves += 1
        r = self.http.post(f"{GAMES}/{self.gid}/model-move", json=self._version(stale) or None)
        if stale:
            self._refused(r, 409, "conflict")
        elif b.outcome() is not None:
            self._refused(r, 409, "game_over")
        elif self.model_side not in (COLOR_NAMES[b.turn], "none"):
            self._refused(r, 409, "not_model_turn")
        else:
            assert r.status_code == 200, r.text
            played = r.json()["model_move"]["iccs"]
            assert played in {m.iccs() for m in b.legal_moves}
            b.push(Move.from_iccs(played))
            self.by.append("model")
            self._check(r.json())

    @rule(stale=STALE)
    def undo(self, stale: bool | None) -> None:
        b = self.board
        r = self.http.post(f"{GAMES}/{self.gid}/undo", json=self._version(stale))
        if stale:
            self._refused(r, 409, "conflict")
        elif not b.move_stack:
            self._refused(r, 409, "nothing_to_undo")
        else:
            assert r.status_code == 200, r.text
            b.pop()
            if self.by.pop() == "model" and self.model_side != "none" and b.move_stack:
                b.pop()  # the human move the model answered goes with it
                self.by.pop()
            self._check(r.json())

    @rule()
    def read(self) -> None:
        self._check(self.http.get(f"{GAMES}/{self.gid}").json())
        listed = self.http.get(f"{GAMES}/{self.gid}/legal-moves").json()
        b = self.board
        expected = [] if b.outcome() is not None else sorted(m.iccs() for m in b.legal_moves)
        assert [m["iccs"] for m in listed["legal_moves"]] == expected
        assert all(m["wxf"] == b.wxf(Move.from_iccs(m["iccs"])) for m in listed["legal_moves"])
        assert listed["version"] == self.version


def test_the_game_api_matches_a_local_board_after_every_step(http: httpx.Client) -> None:
    GameMachine.http = http
    run_state_machine_as_test(GameMachine, settings=settings(
        max_examples=25, stateful_step_count=25, deadline=None, derandomize=True,
        database=None, suppress_health_check=list(HealthCheck)))
