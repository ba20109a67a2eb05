"""A shallow material search that a model player uses to veto tactical blunders.

Negamax with alpha-beta over the legal moves to ``depth`` plies, then a capture-only quiescence
search (the side to move may stand pat), so an exchange in progress is finished before material
is counted. Material in soldier units with the values of :data:`apps.xiangqi.players.PIECE_VALUES`
(a soldier across the river is worth 2). A side with no legal move loses, checkmate and stalemate
alike (Xiangqi rules), scored ``MATE`` minus the plies to it, whatever material changed hands on
the way, so nearer wins score higher; on the last full-width ply only a checkmate is looked for
(a stalemate there goes unseen).
Repetition and the no-capture limit are ignored: this is a blunder check, not an engine.

It reads the board's square list directly through :mod:`apps.xiangqi.movegen` (the same move
generator ``Board.legal_moves`` uses) and restores every square it touches.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from apps.xiangqi import movegen
from apps.xiangqi.board import Board
from apps.xiangqi.core import SOLDIER, Move
from apps.xiangqi.players import CROSSED_SOLDIER_VALUE, PIECE_VALUES

MATE = 1000.0
_EPS = 1e-6  # below every difference of scores (multiples of 0.5): makes a bound strict
_VALUES = [PIECE_VALUES[abs(code)] if code else 0.0 for code in range(8)]


@dataclass(frozen=True)
class SearchConfig:
    """How deep the full-width part looks and how far captures are followed after it."""

    depth: int = 2
    quiescence_depth: int = 6

    def __post_init__(self) -> None:
        if self.depth < 1 or self.quiescence_depth < 0:
            raise ValueError("depth must be >= 1 and quiescence_depth >= 0")


def _value(code: int, square: int) -> float:
    """Material value of the piece ``code`` standing on ``square``."""
    kind = abs(code)
    if kind == SOLDIER and (square // 9 >= 5 if code > 0 else square // 9 <= 4):
        return CROSSED_SOLDIER_VALUE
    return _VALUES[kind]


def _gain(b: list[int], fr: int, to: int) -> float:
    """Material the mover gains by fr->to: the captured piece and a soldier crossing the river."""
    moved = b[fr]
    gain = _value(b[to], to) if b[to] else 0.0
    if abs(moved) == SOLDIER:
        gain += _value(moved, to) - _value(moved, fr)
    return gain


class ScratchBoard:
    """A board's squares and generals' places, copied, with make/unmake that skip ``Board``'s
    bookkeeping (history, hashes, repetition): the inner loop of a search."""

    def __init__(self, board: Board) -> None:
        self.b = board._board.copy()
        self.kings = list(board._kings)

    def _make(self, fr: int, to: int) -> int:
        b = self.b
        moved, captured = b[fr], b[to]
        b[to], b[fr] = moved, 0
        if moved == 1 or moved == -1:
            self.kings[moved > 0] = to
        return captured

    def _unmake(self, fr: int, to: int, captured: int) -> None:
        b = self.b
        moved = b[to]
        b[fr], b[to] = moved, captured
        if moved == 1 or moved == -1:
            self.kings[moved > 0] = fr


class _Search(ScratchBoard):
    def __init__(self, board: Board, config: SearchConfig) -> None:
        super().__init__(board)
        self.config = config
        self.nodes = 0

    def _ordered(self, pairs: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
        """Captures first, most valuable victim then least valuable attacker (MVV-LVA)."""
        b = self.b
        return sorted(pairs, key=lambda p: (-_VALUES[abs(b[p[1]])] * 10 + _VALUES[abs(b[p[0]])]
                                            if b[p[1]] else 1000.0))

    def negamax(self, red: bool, depth: int, alpha: float, beta: float, ply: int,
                balance: float = 0.0) -> float:
        """Score of the position for the side ``red`` to move (material relative to now).

        ``balance``: the material that side has won since the search's root. A mate is scored
        ``-(MATE - ply) - balance`` here so that it reaches the root as ``MATE - ply`` exactly:
        the material the line won on the way must not make a slower mate outscore a faster one.
        """
        if depth == 0:
            # a mate on the last ply is scored, not stood on: without this a depth-2 search would
            # not see the opponent's mate in one after our move
            k = self.kings[red]
            if movegen.king_attacked(self.b, k, red) and not movegen.has_legal_move(self.b, k, red):
                return -(MATE - ply) - balance
            return self.quiescence(red, self.config.quiescence_depth, alpha, beta)
        self.nodes += 1
        pairs = movegen.legal_pairs(self.b, self.kings[red], red)
        if not pairs:
            return -(MATE - ply) - balance
        best = -math.inf
        for fr, to in self._ordered(pairs):
            gain = _gain(self.b, fr, to)
            captured = self._make(fr, to)
            score = gain - self.negamax(not red, depth - 1, -beta + gain, -alpha + gain, ply + 1,
                                        -(balance + gain))
            self._unmake(fr, to, captured)
            if score > best:
                best = score
            if best > alpha:
                alpha = best
            if alpha >= beta:
                break
        return best

    def quiescence(self, red: bool, depth: int, alpha: float, beta: float) -> float:
        self.nodes += 1
        if depth == 0 or alpha >= beta:
            return 0.0
        best = 0.0  # stand pat: the side to move need not capture
        if best >= beta:
            return best
        alpha = max(alpha, best)
        b = self.b
        k = self.kings[red]
        in_check = movegen.king_attacked(b, k, red)
        captures = [(fr, to) for fr, to in movegen.pseudo_moves(b, red) if b[to]]
        for fr, to in self._ordered(captures):
            if not movegen.is_safe(b, k, red, fr, to, in_check):
                continue
            gain = _gain(b, fr, to)
            captured = self._make(fr, to)
            score = gain - self.quiescence(not red, depth - 1, -beta + gain, -alpha + gain)
            self._unmake(fr, to, captured)
            if score > best:
                best = score
                if best > alpha:
                    alpha = best
                if alpha >= beta:
                    break
        return best


def move_scores(board: Board, moves: Iterable[Move] | None = None,
                config: SearchConfig | None = None, floor: float = -math.inf) -> dict[Move, float]:
    """Each move's searched material outcome for the side to move (soldier units; +-``MATE``
    near a forced win or loss). ``floor``: scores below it are only known to be below it (the
    search proves that much and stops), which is all a veto needs."""
    config = config or SearchConfig()
    search = _Search(board, config)
    red = board.turn
    out: dict[Move, float] = {}
    for move in board.legal_moves if moves is None else moves:
        fr, to = move.from_square, move.to_square
        gain = _gain(search.b, fr, to)
        captured = search._make(fr, to)
        # a reply proven >= gain - floor + eps puts the move strictly below the floor
        reply = search.negamax(not red, config.depth - 1, -math.inf, gain - floor + _EPS, 1,
                               -gain)
        search._unmake(fr, to, captured)
        out[move] = gain - reply
    return out


def best_score(board: Board, config: SearchConfig | None = None) -> float:
    """The searched material outcome of the best move for the side to move."""
    config = config or SearchConfig()
    search = _Search(board, config)
    return search.negamax(board.turn, config.depth, -math.inf, math.inf, 0)
