"""Baseline Xiangqi players without a model, and a loop that plays a game between two players.

* :class:`RandomPlayer`: a uniformly random legal move (seeded, so games are reproducible).
* :class:`GreedyPlayer`: one ply of lookahead: the move that leaves the best material balance for
  the mover, where a move that checkmates or stalemates the opponent scores above everything and
  ties are broken at random. Piece values (in soldier units) are the common textbook values:
  chariot 9, cannon 4.5, horse 4, advisor 2, elephant 2, soldier 1 before the river and 2 after
  it, general 0 (it is never captured: the game ends first).
"""

from __future__ import annotations

import random
from typing import Protocol

from apps.xiangqi.board import Board
from apps.xiangqi.core import (
    ADVISOR,
    CANNON,
    CHARIOT,
    ELEPHANT,
    GENERAL,
    HORSE,
    RED,
    SOLDIER,
    Color,
    Move,
)

PIECE_VALUES: dict[int, float] = {
    GENERAL: 0.0,
    ADVISOR: 2.0,
    ELEPHANT: 2.0,
    HORSE: 4.0,
    CHARIOT: 9.0,
    CANNON: 4.5,
    SOLDIER: 1.0,
}
CROSSED_SOLDIER_VALUE = 2.0
WIN_SCORE = 1000.0


class Player(Protocol):
    """Anything that picks a legal move for the side to move."""

    def choose(self, board: Board) -> Move: ...


def material(board: Board, color: Color) -> float:
    """Material of ``color`` minus the opponent's, with the values of :data:`PIECE_VALUES`."""
    total = 0.0
    for sq, piece in board.piece_map().items():
        value = PIECE_VALUES[piece.piece_type]
        if piece.piece_type == SOLDIER and (sq // 9 >= 5 if piece.color else sq // 9 <= 4):
            value = CROSSED_SOLDIER_VALUE
        total += value if piece.color == color else -value
    return total


def _require_moves(board: Board) -> list[Move]:
    moves = board.legal_moves
    if not moves:
        raise ValueError(f"no legal move in {board.fen()}: the game is over")
    return moves


class RandomPlayer:
    """Plays a uniformly random legal move."""

    def __init__(self, seed: int | None = 0) -> None:
        self.rng = random.Random(seed)

    def choose(self, board: Board) -> Move:
        return self.rng.choice(_require_moves(board))


class GreedyPlayer:
    """One-ply material greedy player (see the module docstring for the scores)."""

    def __init__(self, seed: int | None = 0) -> None:
        self.rng = random.Random(seed)

    def score(self, board: Board, move: Move) -> float:
        """The mover's score after ``move``: a win is worth :data:`WIN_SCORE`."""
        mover = board.turn
        board.push(move)
        try:
            if not board.legal_moves:  # checkmate or stalemate: both lose for the side to move
                return WIN_SCORE
            return material(board, mover)
        finally:
            board.pop()

    def choose(self, board: Board) -> Move:
        moves = _require_moves(board)
        work = board.copy()
        scored = [(self.score(work, m), m) for m in moves]
        best = max(s for s, _ in scored)
        return self.rng.choice([m for s, m in scored if s == best])


def play_game(red_player: Player, black_player: Player, max_plies: int = 300,
              board: Board | None = None) -> tuple[str, list[str]]:
    """Play until the game ends or ``max_plies`` plies; returns (result, ICCS moves played).

    The result is ``board.result()``: ``"1-0"``, ``"0-1"``, ``"1/2-1/2"``, or ``"*"`` when the
    ply limit stopped an unfinished game. Each player's move is checked legal by ``push``. A
    ``board`` given goes on from its position (its history counts for repetition) and is not
    changed; the moves returned are the ones played here, not its earlier ones.
    """
    if max_plies < 0:
        raise ValueError(f"max_plies must be >= 0, got {max_plies}")
    board = board.copy() if board is not None else Board()
    earlier = len(board.move_stack)
    for _ in range(max_plies):
        if board.outcome() is not None:
            break
        player = red_player if board.turn == RED else black_player
        board.push(player.choose(board.copy()))
    return board.result(), [m.iccs() for m in board.move_stack[earlier:]]
