"""The decision model as a Xiangqi player: it reads the position and answers a choice of move.

:class:`ModelPlayer` renders the board as a document (:func:`apps.xiangqi.render.position_document`)
and asks one question whose answer schema is a ``choice`` among the legal moves in ICCS
(:func:`apps.xiangqi.render.move_question`). Constrained decoding guarantees the answer is one of
the options, so the model never plays an illegal move, whatever its weights.

Which model (:func:`player_from_setting`, setting ``DECISION_XIANGQI_MODEL``):

* ``auto`` (default): the dedicated Xiangqi checkpoint at ``models/xiangqi`` when it exists, else
  the default decision model (inside ``decision serve``: the one the service has loaded). The
  default model was never trained on Xiangqi, so its moves are legal but not chosen for strength.
* ``default``: the default decision model; ``random`` / ``greedy``: the rules engine's baseline
  players (no model); any other value: a checkpoint directory.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from apps.xiangqi.board import Board
from apps.xiangqi.core import Move

# Beside the default model (<repo>/models/default), whatever the working directory.
XIANGQI_CHECKPOINT = Path(__file__).resolve().parents[2] / "models" / "xiangqi"
SETTING_ENV = "DECISION_XIANGQI_MODEL"


class Player(Protocol):
    """Anything that picks a legal move for the side to move."""

    def choose(self, board: Board) -> Move: ...


@dataclass(frozen=True)
class MoveChoice:
    """A chosen move with what is known about it (confidence only from a model)."""

    move: Move
    confidence: float | None
    source: str


class ModelPlayer:
    """Plays the move a :class:`decision.DecisionModel` chooses among the legal moves.

    ``decide`` is called under a lock: one model instance serves one position at a time.
    """

    def __init__(self, model: Any, name: str = "decision-model", threshold: float = 0.9) -> None:
        self.model = model
        self.name = name
        self.threshold = threshold
        self._lock = threading.Lock()

    def choose_with_info(self, board: Board) -> MoveChoice:
        """Ask the model; the answer is parsed back into a legal :class:`Move`."""
        from apps.xiangqi.render import move_question, position_document

        legal = list(board.legal_moves)
        if not legal:
            raise ValueError("the side to move has no legal move: the game is over")
        if len(legal) == 1:  # nothing to decide; skip the forward passes
            return MoveChoice(legal[0], 1.0, self.name)
        document = position_document(board)
        question = move_question(board)
        with self._lock:
            decision = _decide(self.model, document, question, self.threshold)
        answer = decision.answers[0]
        move = Move.from_iccs(str(answer.value))
        if move not in legal:  # constrained decoding makes this impossible; check anyway
            raise RuntimeError(f"the model answered {answer.value!r}, which is not a legal move")
        confidence = getattr(answer, "confidence", None)
        return MoveChoice(move, None if confidence is None else float(confidence), self.name)

    def choose(self, board: Board) -> Move:
        return self.choose_with_info(board).move


def _decide(model: Any, document: str, question: Any, threshold: float) -> Any:
    """``model.decide`` (interfaces.md); a bare DecisionModel goes through the joint engine."""
    if hasattr(model, "decide"):
        return model.decide(document, [question], mode="joint", threshold=threshold)
    from decision.joint.engine import decide

    return decide(model, document, [question], mode="joint", threshold=threshold)


def choose_move(player: Player, board: Board) -> MoveChoice:
    """A player's move with its details when the player gives them."""
    detailed = getattr(player, "choose_with_info", None)
    if callable(detailed):
        return detailed(board)
    return MoveChoice(player.choose(board), None, type(player).__name__)


class ServiceModel:
    """The decision service's loaded model, reached through its worker (``decision serve``).

    ``decide`` has ``DecisionModel.decide``'s signature, so :class:`ModelPlayer` uses it
    unchanged; the request joins the service's batches and metrics. It must be called from a
    thread that anyio started (a sync FastAPI route), because the service is async.
    """

    def __init__(self, service: Any) -> None:
        self.service = service

    def decide(
        self, document: str, questions: list[Any], mode: str = "joint", threshold: float = 0.9,
    ) -> Any:
        import anyio.from_thread

        from decision.serve.api import DecideBody, DecideOptions, QuestionIn

        items = [q.model_dump(by_alias=True) if hasattr(q, "model_dump") else dict(q)
                 for q in questions]
        body = DecideBody(
            document=document,
            questions=[QuestionIn(**item) for item in items],
            mode=mode,  # type: ignore[arg-type]
            options=DecideOptions(threshold=threshold),
        )
        return anyio.from_thread.run(self.service.decide, body)


def _has_checkpoint(path: Path) -> bool:
    return (path / "config.json").is_file()


_UNTRAINED = "default-model (untrained on xiangqi)"


def player_from_setting(
    setting: str | None = None, device: str = "cpu", service: Any = None
) -> Player:
    """Build the player a setting names (default: ``$DECISION_XIANGQI_MODEL`` or ``auto``).

    ``service``: the running decision service, if any; the default model is then the one it has
    already loaded (through :class:`ServiceModel`) instead of a second copy.
    """
    value = (setting or os.environ.get(SETTING_ENV) or "auto").strip()
    if value in ("random", "greedy"):
        from apps.xiangqi import players

        return players.GreedyPlayer() if value == "greedy" else players.RandomPlayer()

    from decision import load_model

    if value == "auto" and _has_checkpoint(XIANGQI_CHECKPOINT):
        return ModelPlayer(load_model(str(XIANGQI_CHECKPOINT), device=device), "xiangqi-model")
    if value in ("auto", "default"):
        if service is not None:
            return ModelPlayer(ServiceModel(service), _UNTRAINED)
        return ModelPlayer(load_model(None, device=device), _UNTRAINED)
    path = Path(value)
    return ModelPlayer(load_model(str(path), device=device), path.name or str(path))
