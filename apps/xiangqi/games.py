"""Xiangqi games over the store, without HTTP: create, read, move, model move, undo.

:class:`GameService` does the work: every change runs under the game's lock and is saved with a
version compare-and-swap (see :mod:`apps.xiangqi.store`), so concurrent changes of one game never
corrupt it. A change of a game whose lock another caller holds is refused (:class:`GameError`
``game_busy``) rather than waiting (model moves share the one model and wait for each other: it
answers one position at a time). A refusal is a :class:`GameError` with a ``kind`` from
:data:`GameErrorKind`, a message and the field at fault; the HTTP layer
(:mod:`apps.xiangqi.api`) picks its status.

A caller that may give a request up before it is done (a server stopping) runs it under
:func:`answering`: a change is then saved only while the request is still to be answered, and
the caller can learn what became of the save (:meth:`Answer.give_up`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal

from apps.xiangqi.board import NO_CAPTURE_LIMIT, Board
from apps.xiangqi.core import COLOR_NAMES, Move
from apps.xiangqi.errors import IllegalMove
from apps.xiangqi.model_player import choose_move
from apps.xiangqi.outcome import Termination
from apps.xiangqi.players import Player
from apps.xiangqi.render import sorted_legal_iccs
from apps.xiangqi.store import (
    GameBusy,
    GameNotFound,
    GameRecord,
    GameStore,
    PlayedMove,
    StaleGameError,
)
from decision.errors import DecisionError, DecisionInputError

_MAX_FEN_CHARS = 200
# the longest text read as a move ("  H2-E2  " and the like); longer is refused unquoted
MAX_MOVE_CHARS = 16

# What a refused request was refused for (``GameError.kind``).
GameErrorKind = Literal[
    "not_found",  # no game of that id
    "game_busy",  # another caller is changing the game
    "conflict",  # the game is not at the version the caller gave (or changed meanwhile)
    "game_over",  # a move or model move on a finished game
    "not_your_turn",  # a human move on the model's turn
    "not_model_turn",  # a model move on the human's turn
    "nothing_to_undo",  # an undo before any move
    "invalid_fen",  # a start position that is malformed, or already over
    "invalid_move",  # move text that is no move
    "illegal_move",  # a move the rules forbid here
    "unavailable",  # the model (or the store) cannot be used now
]


class GameError(Exception):
    """A request refused: ``kind`` says why, ``field`` names the input at fault, and
    ``legal_moves`` (ICCS) come with a bad move."""

    def __init__(
        self, kind: GameErrorKind, message: str, field: str | None = None,
        legal_moves: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.field = field
        self.legal_moves = legal_moves


class GivenUp(Exception):
    """The request was given up (its server stopping) before its change was saved."""


class Answer:
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
                raise GivenUp
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


# The request being answered (set by :func:`answering`, seen in the threads it starts); None
# for a call made outside it.
_answer: ContextVar[Answer | None] = ContextVar("xiangqi_answer", default=None)


@contextmanager
def answering() -> Iterator[Answer]:
    """Run one request: the service's saves within are made only while the yielded
    :class:`Answer` is not given up (the HTTP routes give it up when the server stops)."""
    answer = Answer()
    token = _answer.set(answer)
    try:
        yield answer
    finally:
        _answer.reset(token)


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


def replay(record: GameRecord) -> Board:
    """The board of a stored game: its start FEN with every stored move pushed."""
    board = Board(record.start_fen)
    for played in record.moves:
        board.push(Move.from_iccs(played.iccs))
    return board


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
        "legal_moves": [] if over else sorted_legal_iccs(board),
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
        """The model player, built on first use; a model that cannot be loaded ->
        ``unavailable``."""
        with self._player_lock:
            if self._player is None:
                assert self._player_factory is not None
                try:
                    self._player = self._player_factory()
                except DecisionError as e:  # not cached: a later request tries again
                    raise GameError("unavailable", f"the model could not be loaded: {e}",
                                    "model") from None
            return self._player

    @contextmanager
    def _changing(self, game_id: str) -> Iterator[None]:
        """The game's lock for one change; held by another request -> ``game_busy``."""
        try:
            with self.store.locked(game_id):
                yield
        except GameBusy as e:  # only entering the lock raises it
            raise GameError("game_busy", str(e), "game_id") from None

    def _get(self, game_id: str) -> GameRecord:
        try:
            return self.store.get(game_id)
        except GameNotFound as e:
            raise GameError("not_found", str(e), "game_id") from None

    def _save(self, record: GameRecord) -> GameRecord:
        try:
            return _write(lambda: self.store.save(record))
        except StaleGameError as e:
            raise GameError("conflict", str(e), "version") from None
        except GameNotFound as e:
            raise GameError("not_found", str(e), "game_id") from None

    def _to_play(self, game_id: str, version: int | None) -> tuple[GameRecord, Board, str]:
        """The game (at ``version`` when given, else ``conflict``), its board and the colour to
        move; a finished game -> ``game_over``. Called with the game's lock held."""
        record = self._get(game_id)
        self._check_version(record, version)
        board = replay(record)
        self._check_playable(board)
        return record, board, COLOR_NAMES[board.turn]

    @staticmethod
    def _check_version(record: GameRecord, version: int | None) -> None:
        if version is not None and version != record.version:
            raise GameError(
                "conflict",
                f"the game is at version {record.version}, not {version}: it changed since "
                "you last read it; reload it", "version",
            )

    @staticmethod
    def _check_playable(board: Board) -> None:
        outcome = board.outcome()
        if outcome is not None:
            raise GameError(
                "game_over", f"the game is over ({outcome.result()}, "
                f"{outcome.termination.name.lower()}); start a new game or undo",
            )

    def create(self, fen: str | None, model_side: str) -> dict[str, Any]:
        """Start a game from the start position or a FEN; a malformed FEN, or one of a game
        already over -> ``invalid_fen``."""
        if fen is not None and len(fen) > _MAX_FEN_CHARS:
            raise GameError("invalid_fen", "the FEN is too long to be a position", "fen")
        try:
            board = Board(fen) if fen is not None else Board()
        except DecisionInputError as e:
            raise GameError("invalid_fen", e.message, "fen") from None
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
            raise GameError("invalid_fen", f"{over}: {why}", "fen")
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
        """Play a human move (ICCS). The model's turn -> ``not_your_turn``, a finished game ->
        ``game_over``; not a move or illegal -> ``invalid_move`` or ``illegal_move`` with the
        legal moves."""
        with self._changing(game_id):
            record, board, turn = self._to_play(game_id, version)
            if record.model_side == turn:
                raise GameError(
                    "not_your_turn",
                    f"it is {turn}'s turn and the model plays {turn}: ask for its move with "
                    f"POST /api/xiangqi/games/{game_id}/model-move", "move",
                )
            if len(text) > MAX_MOVE_CHARS:  # not quoted back whole in the message
                raise GameError(
                    "invalid_move",
                    f"a move of {len(text)} characters is not an ICCS move: expected from and "
                    "to squares like 'h2e2' (files a-i, ranks 0-9)", "move",
                    sorted_legal_iccs(board),
                )
            try:
                move = board.parse_iccs(text)  # says why a move is illegal
            except IllegalMove as e:
                raise GameError("illegal_move", e.message, "move",
                                sorted_legal_iccs(board)) from None
            except DecisionInputError as e:
                raise GameError("invalid_move", e.message, "move",
                                sorted_legal_iccs(board)) from None
            played = PlayedMove(move.iccs(), "human")
            saved = self._save(record.with_moves(record.moves + (played,)))
        return game_state(saved)

    def model_move(self, game_id: str, version: int | None = None) -> dict[str, Any]:
        """Let the model play the side to move (its side, or either side when it plays none)."""
        with self._changing(game_id):
            record, board, turn = self._to_play(game_id, version)
            if record.model_side not in (turn, "none"):
                raise GameError(
                    "not_model_turn",
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
        the human's turn again. Nothing to undo -> ``nothing_to_undo``."""
        with self._changing(game_id):
            record = self._get(game_id)
            self._check_version(record, version)
            if not record.moves:
                raise GameError("nothing_to_undo", "no move has been played yet")
            moves = record.moves[:-1]
            if record.model_side != "none" and record.moves[-1].by == "model" and moves:
                # The model's reply and the human move before it go together.
                moves = moves[:-1]
            saved = self._save(record.with_moves(moves))
        return game_state(saved)
