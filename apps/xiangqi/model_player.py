"""The decision model as a Xiangqi player: it reads the position and answers a choice of move.

:class:`ModelPlayer` renders the board as a document (:func:`apps.xiangqi.render.position_document`)
and asks one question whose answer schema is a ``choice`` among the legal moves in ICCS
(:func:`apps.xiangqi.render.move_question`), less the moves that let the game end by repetition at
once (:func:`apps.xiangqi.repetition.repetition_safe_moves`). Constrained decoding guarantees the
answer is one of the options, so the model never plays an illegal move, whatever its weights.

Here is how the model is asked (:func:`decide_request`, :func:`decide_images`: the position as
is, or its images when pooled, :mod:`apps.xiangqi.pooling`), which training and the evaluation
share. The model's move with blunders vetoed is :mod:`apps.xiangqi.search_guided`; which player
the service plays with, from its settings, :mod:`apps.xiangqi.player_settings`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from apps.xiangqi.board import Board
from apps.xiangqi.core import Move
from apps.xiangqi.players import Player
from apps.xiangqi.pooling import (
    ImageQuestion,
    SymmetryPooling,
    image_questions,
    pooled_pick,
    pooled_probabilities,
)
from apps.xiangqi.repetition import repetition_safe_moves
from apps.xiangqi.symmetry import IDENTITY


@dataclass(frozen=True)
class MoveChoice:
    """A chosen move with what is known about it (confidence only from a model)."""

    move: Move
    confidence: float | None
    source: str


@dataclass(frozen=True)
class MoveAnswer:
    """The model's move for a position, its confidence and, when asked for (or pooled), every
    option's probability in ICCS."""

    move: Move
    confidence: float | None
    probabilities: dict[str, float] | None


# How the player asks for the move, a choice of four tokens: "score" scores every legal move by
# the chain rule over its tokens (decision.joint.scoring: the engine's score_options); "token" and
# "answer" denoise, fixing one token a step or the first fix's whole move. Of the two denoising
# rules "token" was the better at every stage (stage 5: 14.35 % top-1 against 13.55 % for
# "answer" on the 2,000 validation positions of docs/xiangqi-model.md); scoring is better than
# both (15.55 %; same page).
MOVE_DECODERS = ("score", "token", "answer")
MOVE_DECODER = "score"


def decoder_options(decoder: str) -> dict[str, Any]:
    """The ``decide`` options of one of :data:`MOVE_DECODERS`."""
    if decoder == "score":
        return {"score_options": True}
    if decoder in ("token", "answer"):
        return {"commit": decoder}
    raise ValueError(f"unknown move decoder {decoder!r}; known: {list(MOVE_DECODERS)}")


class ModelPlayer:
    """Plays the move a :class:`decision.DecisionModel` chooses among the legal moves.

    The choice's options leave out a move that lets the game end by repetition at once, a loss
    or a draw the model cannot see coming (:func:`~apps.xiangqi.repetition.repetition_safe_moves`),
    as they leave out an illegal one; the document still lists every legal move, as in training.
    ``decide`` is called under a lock: one model instance serves one position at a time.
    """

    def __init__(self, model: Any, name: str = "decision-model", threshold: float = 0.9,
                 decoder: str = MOVE_DECODER, pooling: SymmetryPooling | None = None) -> None:
        decoder_options(decoder)  # fail now on an unknown decoder
        if pooling is not None and decoder != "score":
            raise ValueError("symmetry pooling averages option probabilities: it needs the "
                             f"'score' decoder, not {decoder!r}")
        self.model = model
        self.name = name
        self.threshold = threshold
        self.decoder = decoder
        self.pooling = pooling
        self._lock = threading.Lock()

    def choose_with_info(self, board: Board) -> MoveChoice:
        """Ask the model; the answer is parsed back into a legal :class:`Move`."""
        only = only_move(board)
        if only is not None:  # nothing to decide; skip the forward passes
            return MoveChoice(only, 1.0, self.name)
        answer = self._ask(board)
        return MoveChoice(answer.move, answer.confidence, self.name)

    def _ask(self, board: Board, return_probabilities: bool = False) -> MoveAnswer:
        """The model's move for the position: asked as is, or in each image of the position
        when ``pooling`` says so (apps/xiangqi/pooling.py), the probabilities then averaged."""
        options = repetition_safe_moves(board)
        images = self.pooling.images_of(board) if self.pooling is not None else (IDENTITY,)
        pooled = len(images) > 1
        asked = image_questions(board, options, images)
        with self._lock:
            decisions = decide_images(self.model, asked, self.threshold,
                                       return_probabilities or pooled, self.decoder)
        answers = [decision.answers[0] for decision in decisions]
        if pooled:
            probabilities = pooled_probabilities(
                images, [answer.option_probabilities or {} for answer in answers])
            own = answers[0].option_probabilities or {}
            value = pooled_pick(probabilities, own)
            confidence: float | None = probabilities[value]
        else:
            probabilities = answers[0].option_probabilities
            value, confidence = str(answers[0].value), _confidence(answers[0])
        move = Move.from_iccs(value)
        if not board.is_legal(move):  # constrained decoding makes this impossible
            raise RuntimeError(f"the model answered {value!r}, which is not a legal move")
        return MoveAnswer(move, confidence, probabilities)

    def choose(self, board: Board) -> Move:
        return self.choose_with_info(board).move


def only_move(board: Board) -> Move | None:
    """The single legal move, if there is just one; raises when the game is over."""
    legal = board.legal_moves
    if not legal:
        raise ValueError("the side to move has no legal move: the game is over")
    return legal[0] if len(legal) == 1 else None


def _confidence(answer: Any) -> float | None:
    confidence = getattr(answer, "confidence", None)
    return None if confidence is None else float(confidence)


def decide_request(document: str, question: Any, threshold: float = 0.9,
                   return_probabilities: bool = False,
                   decoder: str = MOVE_DECODER) -> dict[str, Any]:
    """The player's move question as the keyword arguments of ``decide`` and as one request of
    ``decide_many`` (interfaces.md), with ``decoder``'s options."""
    return {"document": document, "questions": [question], "mode": "joint",
            "threshold": threshold, "return_probabilities": return_probabilities,
            **decoder_options(decoder)}


def decide_images(model: Any, asked: Sequence[ImageQuestion], threshold: float,
                   return_probabilities: bool, decoder: str) -> list[Any]:
    """Each image's decision (interfaces.md): in one batch when the model has ``decide_many``
    (a loaded DecisionModel: a pooled move then costs 2.3x a move as is instead of 3.5x on one
    CPU thread, docs/benchmarks.md), else one ``model.decide`` each, in turn; a bare model
    without either goes through the joint engine."""
    requests = [decide_request(a.document, a.question, threshold, return_probabilities, decoder)
                for a in asked]
    batch = getattr(model, "decide_many", None)
    if len(requests) > 1 and callable(batch):
        return batch(requests)
    if hasattr(model, "decide"):
        return [model.decide(**request) for request in requests]
    from decision.joint.engine import decide_many

    return decide_many(model, requests)


def choose_move(player: Player, board: Board) -> MoveChoice:
    """A player's move with its details when the player gives them."""
    detailed = getattr(player, "choose_with_info", None)
    if callable(detailed):
        return detailed(board)
    return MoveChoice(player.choose(board), None, type(player).__name__)
