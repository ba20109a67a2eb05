"""Xiangqi game API: play against the decision model over HTTP, games kept in SQLite.

``router`` (a FastAPI ``APIRouter``) holds the game routes under ``/api/xiangqi/games``; the
service includes it and serves ``static_dir`` (the web board) at ``static_url`` = ``/xiangqi``.
The routes read the request, call :class:`apps.xiangqi.games.GameService` (the game logic over
the store, without HTTP) and answer in JSON. A change of a game whose lock another request holds
is refused (409 ``game_busy``) rather than waiting, so no route thread waits for a game's lock
(model moves share the one model and wait for each other: it answers one position at a time).

Errors are JSON ``{"error": {"type", "message", "field", "request_id", "legal_moves"?}}``: 404
unknown game, 409 a move out of turn / on a finished game / on a stale version / on a busy game,
422 bad input (illegal move, malformed FEN, bad field). The game layer's refusals
(:class:`apps.xiangqi.games.GameError`) are answered with the status of their ``kind`` in
``GAME_ERROR_STATUS``. A body that is not read as JSON is answered as ``/decide`` answers it
(:func:`decision.serve.errors.body_error_response`): 400 invalid or empty, 415 not sent as
``application/json``.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import typing
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from apps.xiangqi.games import GameError, GameErrorKind, GameService, answering
from apps.xiangqi.games import replay as replay  # re-exported: tests/test_xiangqi_store_durability
from apps.xiangqi.player_settings import check_player_setting, player_from_setting
from apps.xiangqi.players import Player
from apps.xiangqi.store import GameStore, GameStoreUnusable, check_store_path
from decision.errors import DecisionInputError
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

# The status each refusal of the game layer is answered with (every GameErrorKind has one).
GAME_ERROR_STATUS: dict[GameErrorKind, int] = {
    "not_found": 404,
    "game_busy": 409,
    "conflict": 409,
    "game_over": 409,
    "not_your_turn": 409,
    "not_model_turn": 409,
    "nothing_to_undo": 409,
    "invalid_fen": 422,
    "invalid_move": 422,
    "illegal_move": 422,
    "unavailable": 503,
}


def _game_error_response(e: GameError) -> JSONResponse:
    """A refusal of the game layer as the JSON error body, with its status."""
    extra = {} if e.legal_moves is None else {"legal_moves": e.legal_moves}
    body = error_body(e.kind, e.message, e.field, **extra)
    return JSONResponse(body, status_code=GAME_ERROR_STATUS[e.kind])


class _JsonErrorRoute(APIRoute):
    """Answers this router's errors as ``{"error": {...}}`` whatever the app's own handlers."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()
        fields = _body_fields(self)

        async def route(request: Request) -> Response:
            with answering() as answer:  # the game layer saves only while it is not given up
                try:
                    return await handler(request)
                except asyncio.CancelledError:
                    # Only a server that stops cancels a request: a forced quit (a second
                    # Ctrl-C), or decision serve's graceful-shutdown time run out. Its route
                    # thread runs on (a model move thinks on) but saves nothing now, unless it
                    # already began to.
                    return _stopped_response(answer.give_up())
                except GameError as e:
                    return _game_error_response(e)
                except RequestValidationError as e:
                    return _validation_response(e, request, fields)
                except DecisionInputError as e:
                    return error_response(422, "validation_error", e.message, e.field)
                except sqlite3.OperationalError as e:
                    # a full disk, an I/O error, a database locked past its timeout: the write
                    # was rolled back, so a 503 that may pass, not a 500 that says nothing of
                    # the move
                    log.warning("request %s: the game store failed: %s", current_request_id(), e)
                    return error_response(
                        503, "unavailable", f"the game store cannot be used now ({e}); the "
                        "request was not carried out: try again later",
                        headers={"Retry-After": "5"},
                    )

        return route


def _stopped_response(change: str) -> JSONResponse:
    """A JSON 503 for a request cancelled by its server stopping (uvicorn's own answer is a
    plain-text 500 and a traceback), saying whether the change was made (``Answer.give_up``)."""
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
                    raise GameError("unavailable", e.message, e.field) from None
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
