"""Xiangqi game API: play against the decision model over HTTP, games kept in SQLite.

``router`` (a FastAPI ``APIRouter``) holds the game routes under ``/api/xiangqi/games``; the
service includes it and serves ``static_dir`` (the web board) at ``static_url`` = ``/xiangqi``.
:class:`GameService` does the work without HTTP: every change runs under the game's lock and is
saved with a version compare-and-swap (see :mod:`apps.xiangqi.store`), so concurrent requests on
one game never corrupt it. A change of a game whose lock another request holds is refused (409
``game_busy``) rather than waiting, so no route thread waits for a game's lock (model moves
share the one model and wait for each other: it answers one position at a time).

Errors are JSON ``{"error": {"type", "message", "field", "request_id", "legal_moves"?}}``: 404
unknown game, 409 a move out of turn / on a finished game / on a stale version / on a busy game,
422 bad input (illegal move, malformed FEN, bad field). A body that is not read as JSON is
answered as ``/decide`` answers it (:func:`decision.serve.errors.body_error_response`): 400
invalid or empty, 415 not sent as ``application/json``.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
import typing
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from apps.xiangqi.board import NO_CAPTURE_LIMIT, Board
from apps.xiangqi.core import COLOR_NAMES, Move
from apps.xiangqi.errors import IllegalMove
from apps.xiangqi.model_player import (
    Player,
    check_player_setting,
    choose_move,
    player_from_setting,
)
from apps.xiangqi.outcome import Termination
from apps.xiangqi.store import (
    GameBusy,
    GameNotFound,
    GameRecord,
    GameStore,
    GameStoreUnusable,
    PlayedMove,
    StaleGameError,
    check_store_path,
)
from decision.errors import DecisionError, DecisionInputError
from decision.serve.api import INVALID_REQUEST_RESPONSES
from decision.serve.cross_site import CrossSiteWriteMiddleware
from decision.serve.errors import (
    BodyLimitMiddleware,
    StaticPages,
    body_error_response,
    error_body,
    error_response,
    install_error_handlers,
)
from decision.serve.request_id import current_request_id, install_request_ids
from decision.serve.settings import ServeSettings

log = logging.getLogger("decision.xiangqi")

# The service mounts ``static_dir`` at ``static_url`` (decision.serve.app): the web board.
static_dir = Path(__file__).resolve().parent / "static"
static_url = "/xiangqi"
_MAX_FEN_CHARS = 200


class GameApiError(Exception):
    """An error the API answers with a status and the JSON error body."""

    def __init__(
        self, status: int, kind: str, message: str, field: str | None = None,
        legal_moves: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message
        self.field = field
        self.legal_moves = legal_moves

    def body(self) -> dict[str, Any]:
        extra = {} if self.legal_moves is None else {"legal_moves": self.legal_moves}
        return error_body(self.kind, self.message, self.field, **extra)


class _GivenUp(Exception):
    """The request was given up (its server stopping) before its change was saved."""


class _Answer:
    """Whether a request is still to be answered. Its change is saved only while it is: a
    request the server gives up on (cancels, when it stops) before the save changes nothing; one
    given up during or after the save is told what became of the save, as far as it is known."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._given_up = False
        self._save = "unchanged"  # -> "saving" -> "saved" or back to "unchanged" (it failed)

    def begin_save(self) -> None:
        with self._lock:
            if self._given_up:
                raise _GivenUp
            self._save = "saving"

    def end_save(self, ok: bool) -> None:
        with self._lock:
            self._save = "saved" if ok else "unchanged"

    def give_up(self) -> str:
        """The request will not be answered with its result; returns its change's fate:
        "unchanged" (never saved, or the save failed), "saving" (not known yet) or "saved"."""
        with self._lock:
            self._given_up = True
            return self._save


# The HTTP request being answered (set by the routes, seen in their threads); None in code.
_answer: ContextVar[_Answer | None] = ContextVar("xiangqi_answer", default=None)


def _begin_save() -> None:
    answer = _answer.get()
    if answer is not None:
        answer.begin_save()


def _end_save(ok: bool) -> None:
    answer = _answer.get()
    if answer is not None:
        answer.end_save(ok)


def _write(write: Callable[[], GameRecord]) -> GameRecord:
    """Run one store write for the request being answered: refused once the request is given
    up, its outcome recorded for a give-up that comes while it runs."""
    _begin_save()
    ok = False
    try:
        record = write()
        ok = True
        return record
    finally:
        _end_save(ok)


# ---------------------------------------------------------------------------------------------
# The game logic, independent of HTTP.


def replay(record: GameRecord) -> Board:
    """The board of a stored game: its start FEN with every stored move pushed."""
    board = Board(record.start_fen)
    for played in record.moves:
        board.push(Move.from_iccs(played.iccs))
    return board


def _legal_iccs(board: Board) -> list[str]:
    return sorted(m.iccs() for m in board.legal_moves)


def game_state(record: GameRecord) -> dict[str, Any]:
    """The JSON state of a game: position, moves (ICCS and WXF), turn, check, result."""
    board = Board(record.start_fen)
    moves = []
    for ply, played in enumerate(record.moves, start=1):
        move = Move.from_iccs(played.iccs)
        side = COLOR_NAMES[board.turn]
        wxf = board.wxf(move)  # WXF notation depends on the position before the move
        board.push(move)
        moves.append({"ply": ply, "iccs": played.iccs, "wxf": wxf, "side": side, "by": played.by})
    outcome = board.outcome()
    turn = COLOR_NAMES[board.turn]
    over = outcome is not None
    return {
        "id": record.id,
        "start_fen": record.start_fen,
        "fen": board.fen(),
        "model_side": record.model_side,
        "turn": turn,
        "model_to_move": (not over) and record.model_side == turn,
        "moves": moves,
        "last_move": moves[-1]["iccs"] if moves else None,
        "check": board.is_check(),
        "over": over,
        "result": outcome.result() if outcome else "*",
        "reason": outcome.termination.name.lower() if outcome else None,
        "winner": COLOR_NAMES[outcome.winner] if outcome and outcome.winner is not None else None,
        "legal_moves": [] if over else _legal_iccs(board),
        "version": record.version,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    }


class GameService:
    """Create games, play moves, ask the model for a move, undo; all persisted in a store.

    ``player`` is the model player, or a callable building it on first use (loading a model
    takes time, so a server that never plays the model never loads one).
    """

    def __init__(self, store: GameStore, player: Player | Callable[[], Player]) -> None:
        self.store = store
        is_player = hasattr(player, "choose") and not isinstance(player, type)
        self._player = player if is_player else None
        self._player_factory = None if self._player is not None else player
        self._player_lock = threading.Lock()

    @property
    def player(self) -> Player:
        """The model player, built on first use; a model that cannot be loaded -> 503."""
        with self._player_lock:
            if self._player is None:
                assert self._player_factory is not None
                try:
                    self._player = self._player_factory()
                except DecisionError as e:  # not cached: a later request tries again
                    raise GameApiError(
                        503, "unavailable", f"the model could not be loaded: {e}", "model"
                    ) from None
            return self._player

    @contextmanager
    def _changing(self, game_id: str) -> Iterator[None]:
        """The game's lock for one change; held by another request -> 409 ``game_busy``."""
        try:
            with self.store.locked(game_id):
                yield
        except GameBusy as e:  # only entering the lock raises it
            raise GameApiError(409, "game_busy", str(e), "game_id") from None

    def _get(self, game_id: str) -> GameRecord:
        try:
            return self.store.get(game_id)
        except GameNotFound as e:
            raise GameApiError(404, "not_found", str(e), "game_id") from None

    def _save(self, record: GameRecord) -> GameRecord:
        try:
            return _write(lambda: self.store.save(record))
        except StaleGameError as e:
            raise GameApiError(409, "conflict", str(e), "version") from None
        except GameNotFound as e:
            raise GameApiError(404, "not_found", str(e), "game_id") from None

    @staticmethod
    def _check_version(record: GameRecord, version: int | None) -> None:
        if version is not None and version != record.version:
            raise GameApiError(
                409, "conflict",
                f"the game is at version {record.version}, not {version}: it changed since "
                "you last read it; reload it", "version",
            )

    @staticmethod
    def _check_playable(board: Board) -> None:
        outcome = board.outcome()
        if outcome is not None:
            raise GameApiError(
                409, "game_over",
                f"the game is over ({outcome.result()}, "
                f"{outcome.termination.name.lower()}); start a new game or undo",
            )

    def create(self, fen: str | None, model_side: str) -> dict[str, Any]:
        """Start a game from the start position or a FEN; malformed FEN -> 422 on ``fen``."""
        if fen is not None and len(fen) > _MAX_FEN_CHARS:
            raise GameApiError(422, "invalid_fen", "the FEN is too long to be a position", "fen")
        try:
            board = Board(fen) if fen is not None else Board()
        except DecisionInputError as e:
            raise GameApiError(422, "invalid_fen", e.message, "fen") from None
        # A game over before its first move could take no move, model move or undo: refused.
        outcome = board.outcome()
        if outcome is not None:
            over = (f"the game is already over in this position ({outcome.result()}, "
                    f"{outcome.termination.name.lower()})")
            if outcome.termination is Termination.NO_CAPTURE_120:
                why = (f"the halfmove clock {board.halfmove_clock} is at or past the "
                       f"{NO_CAPTURE_LIMIT}-ply no-capture limit; give the plies since the last "
                       f"capture, fewer than {NO_CAPTURE_LIMIT} (e.g. 0)")
            else:
                why = (f"{COLOR_NAMES[board.turn]} to move has no legal move; a new game needs "
                       "a position with a move to play")
            raise GameApiError(422, "invalid_fen", f"{over}: {why}", "fen")
        return game_state(_write(lambda: self.store.create(board.fen(), model_side)))

    def state(self, game_id: str) -> dict[str, Any]:
        return game_state(self._get(game_id))

    def legal_moves(self, game_id: str) -> dict[str, Any]:
        """The legal moves of the side to move, ICCS with WXF (empty when the game is over)."""
        record = self._get(game_id)
        board = replay(record)
        moves = [] if board.outcome() is not None else sorted(
            board.legal_moves, key=lambda m: m.iccs()
        )
        return {
            "id": record.id,
            "turn": COLOR_NAMES[board.turn],
            "legal_moves": [{"iccs": m.iccs(), "wxf": board.wxf(m)} for m in moves],
            "version": record.version,
        }

    def move(self, game_id: str, text: str, version: int | None = None) -> dict[str, Any]:
        """Play a human move (ICCS). Out of turn or finished -> 409; illegal -> 422."""
        with self._changing(game_id):
            record = self._get(game_id)
            self._check_version(record, version)
            board = replay(record)
            self._check_playable(board)
            turn = COLOR_NAMES[board.turn]
            if record.model_side == turn:
                raise GameApiError(
                    409, "not_your_turn",
                    f"it is {turn}'s turn and the model plays {turn}: ask for its move with "
                    f"POST /api/xiangqi/games/{game_id}/model-move", "move",
                )
            if len(text) > MAX_MOVE_CHARS:  # not quoted back whole in the message
                raise GameApiError(
                    422, "invalid_move",
                    f"a move of {len(text)} characters is not an ICCS move: expected from and "
                    "to squares like 'h2e2' (files a-i, ranks 0-9)", "move", _legal_iccs(board),
                )
            try:
                move = board.parse_iccs(text)  # says why a move is illegal
            except IllegalMove as e:
                raise GameApiError(
                    422, "illegal_move", e.message, "move", _legal_iccs(board)
                ) from None
            except DecisionInputError as e:
                raise GameApiError(
                    422, "invalid_move", e.message, "move", _legal_iccs(board)
                ) from None
            played = PlayedMove(move.iccs(), "human")
            saved = self._save(record.with_moves(record.moves + (played,)))
        return game_state(saved)

    def model_move(self, game_id: str, version: int | None = None) -> dict[str, Any]:
        """Let the model play the side to move (its side, or either side when it plays none)."""
        with self._changing(game_id):
            record = self._get(game_id)
            self._check_version(record, version)
            board = replay(record)
            self._check_playable(board)
            turn = COLOR_NAMES[board.turn]
            if record.model_side not in (turn, "none"):
                raise GameApiError(
                    409, "not_model_turn",
                    f"it is {turn}'s turn and the model plays {record.model_side}: "
                    "play your move first",
                )
            started = time.perf_counter()
            choice = choose_move(self.player, board.copy())
            elapsed_ms = (time.perf_counter() - started) * 1000.0
            if not board.is_legal(choice.move):  # a player bug, never the caller's fault
                raise RuntimeError(f"the model player chose an illegal move {choice.move.iccs()}")
            saved = self._save(
                record.with_moves(record.moves + (PlayedMove(choice.move.iccs(), "model"),))
            )
        state = game_state(saved)
        state["model_move"] = {
            "iccs": choice.move.iccs(),
            "confidence": choice.confidence,
            "source": choice.source,
            "ms": round(elapsed_ms, 1),
        }
        return state

    def undo(self, game_id: str, version: int | None = None) -> dict[str, Any]:
        """Take back the last move; against the model, take back its reply too so that it is
        the human's turn again. Nothing to undo -> 409."""
        with self._changing(game_id):
            record = self._get(game_id)
            self._check_version(record, version)
            if not record.moves:
                raise GameApiError(409, "nothing_to_undo", "no move has been played yet")
            moves = record.moves[:-1]
            if record.model_side != "none" and record.moves[-1].by == "model" and moves:
                # The model's reply and the human move before it go together.
                moves = moves[:-1]
            saved = self._save(record.with_moves(moves))
        return game_state(saved)


# ---------------------------------------------------------------------------------------------
# HTTP.


class _JsonErrorRoute(APIRoute):
    """Answers this router's errors as ``{"error": {...}}`` whatever the app's own handlers."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()
        fields = _body_fields(self)

        async def route(request: Request) -> Response:
            answer = _Answer()
            token = _answer.set(answer)
            try:
                return await handler(request)
            except asyncio.CancelledError:
                # Only a server that stops cancels a request: a forced quit (a second Ctrl-C),
                # or decision serve's graceful-shutdown time run out. Its route thread runs on
                # (a model move thinks on) but saves nothing now, unless it already began to.
                return _stopped_response(answer.give_up())
            except GameApiError as e:
                return JSONResponse(e.body(), status_code=e.status)
            except RequestValidationError as e:
                return _validation_response(e, request, fields)
            except DecisionInputError as e:
                return error_response(422, "validation_error", e.message, e.field)
            except sqlite3.OperationalError as e:
                # a full disk, an I/O error, a database locked past its timeout: the write was
                # rolled back, so a 503 that may pass, not a 500 that says nothing of the move
                log.warning("request %s: the game store failed: %s", current_request_id(), e)
                return error_response(
                    503, "unavailable", f"the game store cannot be used now ({e}); the request "
                    "was not carried out: try again later", headers={"Retry-After": "5"},
                )
            finally:
                _answer.reset(token)

        return route


def _stopped_response(change: str) -> JSONResponse:
    """A JSON 503 for a request cancelled by its server stopping (uvicorn's own answer is a
    plain-text 500 and a traceback), saying whether the change was made (``_Answer.give_up``)."""
    what = {
        "saved": "but its change was saved: reload the game",
        "saving": "while its change was being saved: reload the game to see whether it was",
        "unchanged": "and nothing was changed: the game is as it was",
    }[change]
    message = f"the server stopped before the request was answered, {what}"
    return error_response(503, "unavailable", message, headers={"Retry-After": "1"})


def _body_fields(route: APIRoute) -> tuple[str, ...]:
    """The fields of the route's body model (``NewGame | None`` -> NewGame's); () for none."""
    annotation = route.body_field.field_info.annotation if route.body_field else None
    for kind in (annotation, *typing.get_args(annotation)):
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return tuple(kind.model_fields)
    return ()


def _validation_response(
    e: RequestValidationError, request: Request, fields: tuple[str, ...] = ()
) -> JSONResponse:
    """The first problem, in the service's shape: a body not read as JSON (invalid, empty, or not
    sent as JSON) as ``/decide`` answers it (400, 415), else 422 with the field; ``fields`` are
    those the body takes, named when the body has another or is not a JSON object."""
    errors = e.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": ""}
    names = ", ".join(fields)
    takes = f" with the fields {names}" if fields else ""
    expected = f"a JSON object (with the fields {names})" if fields else "a JSON object"
    answered = body_error_response(first, request, expected)
    if answered is not None:
        return answered
    if tuple(first.get("loc", ())) == ("body",):  # JSON, but not an object
        return error_response(422, "validation_error",
                              f"the request body must be a JSON object{takes}, "
                              f"got {_json_kind(first.get('input'))}")
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "path", "query")]
    field = ".".join(loc) or None
    message = f"{field}: {first.get('msg')}" if field else str(first.get("msg"))
    if first.get("type") == "extra_forbidden":
        message = f"{field}: unknown field; the body is a JSON object{takes}"
    return error_response(422, "validation_error", message, field)


def _json_kind(value: object) -> str:
    """What a request body that is JSON but not a JSON object is, for the message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


class _Body(BaseModel):
    """A request body: an unknown field is a 422 naming it, never silently ignored (a
    misspelt ``Version`` would skip the stale-version check)."""

    model_config = ConfigDict(extra="forbid")


class NewGame(_Body):
    """Body of ``POST /api/xiangqi/games``."""

    fen: str | None = Field(None, description="start position (Pikafish FEN); default the usual")
    model_side: Literal["red", "black", "none"] = Field(
        "black", description="the side the model plays; 'none' for two humans"
    )


# the longest text read as a move ("  H2-E2  " and the like); longer is refused unquoted
MAX_MOVE_CHARS = 16


class MoveRequest(_Body):
    """Body of ``POST .../moves``."""

    move: str = Field(..., description="ICCS move, e.g. h2e2")
    # strict: "2", true or 2.0 is a 422, not the version 2 or 1
    version: StrictInt | None = Field(None, description="refuse (409) unless the game is at it")


class VersionRequest(_Body):
    """Optional body of ``model-move`` and ``undo``."""

    version: StrictInt | None = None


router = APIRouter(route_class=_JsonErrorRoute, tags=["xiangqi"],
                   responses=INVALID_REQUEST_RESPONSES)


def check_settings() -> None:
    """``decision serve`` calls it before it starts: a bad DECISION_XIANGQI_* setting is an exit
    2 there rather than a 503 on the first model move, or a 500 on every game request for an
    unusable DECISION_XIANGQI_DB (a ``DecisionInputError``, which is a ``ValueError``)."""
    check_player_setting()
    check_store_path()


_default_lock = threading.Lock()


def service_for(app: FastAPI) -> GameService:
    """The app's game service: the configured one, else one from the environment settings
    (``DECISION_XIANGQI_DB``, ``DECISION_XIANGQI_MODEL``; see docs/xiangqi-service.md)."""
    service = getattr(app.state, "xiangqi", None)
    if service is None:
        with _default_lock:
            service = getattr(app.state, "xiangqi", None)
            if service is None:
                decision_service = getattr(app.state, "service", None)  # inside decision serve
                device = getattr(getattr(app.state, "settings", None), "device", "cpu")
                try:
                    store = GameStore()
                except GameStoreUnusable as e:  # checked at start by the commands, not here
                    raise GameApiError(503, "unavailable", e.message, e.field) from None
                service = GameService(
                    store, lambda: player_from_setting(None, device, decision_service)
                )
                app.state.xiangqi = service
    return service


def configure(app: FastAPI, store: GameStore, player: Player | Callable[[], Player]) -> None:
    """Give an app its own store and player (tests, or a service with explicit settings)."""
    app.state.xiangqi = GameService(store, player)


def _svc(request: Request) -> GameService:
    return service_for(request.app)


@router.post("/api/xiangqi/games", status_code=201)
def create_game(request: Request, body: NewGame | None = None) -> dict[str, Any]:
    """Start a game (start position or ``fen``); the model plays ``model_side``. Every field
    has a default, so the body may be left out."""
    body = body if body is not None else NewGame()
    return _svc(request).create(body.fen, body.model_side)


@router.get("/api/xiangqi/games/{game_id}")
def get_game(game_id: str, request: Request) -> dict[str, Any]:
    """The game's state: FEN, moves (ICCS, WXF), turn, check, result and reason."""
    return _svc(request).state(game_id)


@router.get("/api/xiangqi/games/{game_id}/legal-moves")
def get_legal_moves(game_id: str, request: Request) -> dict[str, Any]:
    """The legal moves of the side to move."""
    return _svc(request).legal_moves(game_id)


@router.post("/api/xiangqi/games/{game_id}/moves")
def post_move(game_id: str, body: MoveRequest, request: Request) -> dict[str, Any]:
    """Play a move (ICCS) for the side to move; it must not be the model's side."""
    return _svc(request).move(game_id, body.move, body.version)


@router.post("/api/xiangqi/games/{game_id}/model-move")
def post_model_move(
    game_id: str, request: Request, body: VersionRequest | None = None
) -> dict[str, Any]:
    """The model chooses and plays a legal move for the side to move."""
    return _svc(request).model_move(game_id, body.version if body else None)


@router.post("/api/xiangqi/games/{game_id}/undo")
def post_undo(game_id: str, request: Request, body: VersionRequest | None = None) -> dict[str, Any]:
    """Take back the last move (and the model's reply before it, when playing the model)."""
    return _svc(request).undo(game_id, body.version if body else None)


def create_app(
    db_path: str | Path | None = None,
    player: Player | Callable[[], Player] | None = None,
    *,
    max_body_bytes: int = ServeSettings.max_body_bytes,
    body_timeout_s: float = ServeSettings.request_timeout_s,
) -> FastAPI:
    """A FastAPI app with only the Xiangqi routes (tests, or ``decision xiangqi serve``); a
    request body over ``max_body_bytes`` is a 413 and one not in within ``body_timeout_s`` a 408
    (the service's defaults), as in the service."""
    app = FastAPI(title="Xiangqi against the decision model")
    # the service's JSON error shape for what the routes do not answer themselves: an unknown
    # path or method, an unexpected failure (a plain-text 500 before)
    install_error_handlers(app)
    install_request_ids(app)
    app.include_router(router)
    app.mount(static_url, StaticPages(directory=static_dir, html=True), name="xiangqi:static")
    configure(app, GameStore(db_path), player if player is not None else player_from_setting)
    app.add_middleware(CrossSiteWriteMiddleware)
    app.add_middleware(BodyLimitMiddleware, max_bytes=max_body_bytes, timeout_s=body_timeout_s)
    return app
