"""The blunder check: the model's move, vetoed when a shallow material search shows it blunders.

:class:`SearchGuidedPlayer` is the model player the service plays with by default (search depth
``DEFAULT_SEARCH_DEPTH``, :mod:`apps.xiangqi.player_settings`). :func:`sound_moves` is the check
itself: the moves the search (:mod:`apps.xiangqi.search`) and the repetition rule
(:mod:`apps.xiangqi.repetition`) let through; :func:`guided_pick` the model's pick among them.
Training (:mod:`apps.xiangqi.training`) and the agreement measurement use the same two functions,
so they live apart from the player that asks the model (:mod:`apps.xiangqi.model_player`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from apps.xiangqi.board import Board
from apps.xiangqi.core import Move
from apps.xiangqi.model_player import (
    MOVE_DECODER,
    ModelPlayer,
    MoveAnswer,
    MoveChoice,
    only_move,
)
from apps.xiangqi.pooling import SymmetryPooling
from apps.xiangqi.repetition import repetition_classes
from apps.xiangqi.search import MATE, SearchConfig, best_score, move_scores

DEFAULT_SEARCH_DEPTH = 3
# depth 3 and margin 0 (soldier units a move may lose against the best searched move) were
# the best of those tried on 500 validation positions of another seed than the reported ones
# (30.2% top-1; depth 2 with margin 0.5, 4x cheaper: 27.2%); docs/xiangqi-model.md
DEFAULT_MARGIN = 0.0


class SearchGuidedPlayer(ModelPlayer):
    """The model's move, unless a shallow material search shows it blunders.

    The search (:mod:`apps.xiangqi.search`) scores every legal move; a move whose score is more
    than ``margin`` soldier units below the best is vetoed, and so is one that lets the game end
    by repetition while another is left, unless the rules would give that repetition to the
    player (the opponent's perpetual check; :func:`sound_moves`). The model picks among the
    rest: its own answer when that survives, else the surviving move it gives the highest
    probability (all options' probabilities come from the same decode). The model still makes
    every choice the search cannot tell apart, which in quiet positions is all of them.
    """

    def __init__(self, model: Any, name: str = "decision-model", threshold: float = 0.9,
                 search: SearchConfig | None = None, margin: float = DEFAULT_MARGIN,
                 decoder: str = MOVE_DECODER, pooling: SymmetryPooling | None = None) -> None:
        super().__init__(model, name, threshold, decoder, pooling)
        self.search = search or SearchConfig(depth=DEFAULT_SEARCH_DEPTH)
        self.margin = check_margin(margin)
        self.overrides = 0  # model answers the search vetoed

    def own_and_guided(self, board: Board) -> tuple[MoveAnswer, Move]:
        """From one asking (one decode, or one an image when pooled): the model's answer and
        the move this player plays (the model's own if the search lets it through, else the
        likeliest sound one)."""
        sound = sound_moves(board, self.search, self.margin)
        answer = self._ask(board, return_probabilities=True)
        return answer, guided_pick(answer.move, answer.probabilities, sound)

    def choose_with_info(self, board: Board) -> MoveChoice:
        only = only_move(board)
        if only is not None:
            return MoveChoice(only, 1.0, self.name)
        answer, chosen = self.own_and_guided(board)
        if chosen == answer.move:
            return MoveChoice(chosen, answer.confidence, self.name)
        self.overrides += 1
        probability = (answer.probabilities or {}).get(chosen.iccs())
        return MoveChoice(chosen, probability, f"{self.name}+search")


def check_margin(margin: float) -> float:
    """``margin`` if it is a usable one: a finite number >= 0 (a negative margin would veto even
    the best move, leaving nothing to play)."""
    if not (math.isfinite(margin) and margin >= 0):
        raise ValueError(f"the search margin must be a finite number >= 0, got {margin!r}")
    return margin


def sound_moves(board: Board, search: SearchConfig, margin: float) -> set[Move]:
    """The legal moves a :class:`SearchGuidedPlayer` may play: searched within ``margin`` of the
    best, and not letting the game end by repetition unless the rules give it to the mover (the
    opponent's perpetual check; see :func:`apps.xiangqi.repetition.repetition_classes`).

    When every move within the margin would repeat (typically a perpetual check, which loses),
    the best of the moves that do not are taken instead, also within ``margin``; only when every
    legal move repeats, or every one that does not is searched as a forced loss (being mated is
    no way out of a repetition, which at worst loses too), is a repeating one kept.

    Moves that win the game at once (:meth:`Board.outcome`) come first and alone: the search does
    not know the repetition rule, so the move that makes the third occurrence of the opponent's
    perpetual check scored as a quiet move, and a capture could veto it.
    """

    legal = board.legal_moves
    winning = _winning_at_once(board, legal)
    if winning:
        return winning
    floor = best_score(board, search) - check_margin(margin)
    scores = move_scores(board, legal, search, floor=floor)
    sound = {m for m, score in scores.items() if score >= floor}
    safe, fresh = repetition_classes(board, sound)
    if safe:
        return safe
    others, _ = repetition_classes(board, set(legal) - sound)
    if others:
        exact = move_scores(board, sorted(others, key=Move.iccs), search)
        top = max(exact.values())
        if top > -MATE / 2:
            return {m for m, score in exact.items() if score >= top - margin}
    return fresh or sound


def _winning_at_once(board: Board, moves: Sequence[Move]) -> set[Move]:
    """The ``moves`` after which the game is over and won by the side to move now."""
    us, work, winning = board.turn, board.copy(), set()
    for move in moves:
        work.push(move)
        outcome = work.outcome()
        work.pop()
        if outcome is not None and outcome.winner == us:
            winning.add(move)
    return winning


def guided_pick(answer: Move, probabilities: dict[str, float] | None, sound: set[Move]) -> Move:
    """The model's ``answer`` if it is sound, else the sound move it gives the most probability
    (ties broken by ICCS order, so the choice is deterministic)."""
    if answer in sound:
        return answer
    probabilities = probabilities or {}
    return max(sound, key=lambda m: (probabilities.get(m.iccs(), 0.0), m.iccs()))
