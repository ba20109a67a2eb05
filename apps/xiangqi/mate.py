"""Forced-mate search: which moves win by force within a few moves.

A side with no legal move loses in Xiangqi (checkmate and stalemate alike), so a "mate" here is
any line after which the opponent has no legal move. The search is an AND-OR tree over
:mod:`apps.xiangqi.movegen`'s legal moves: the attacker needs one move that works against every
reply. Repetition and the no-capture limit are ignored, as in :mod:`apps.xiangqi.search`.
"""

from __future__ import annotations

from apps.xiangqi import movegen
from apps.xiangqi.board import Board
from apps.xiangqi.core import Move
from apps.xiangqi.search import ScratchBoard


class _MateSearch(ScratchBoard):
    def _checks_first(self, red: bool, pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Moves that give check before the others: most mates are delivered with check."""
        them = not red
        checking, quiet = [], []
        for fr, to in pairs:
            captured = self._make(fr, to)
            gives_check = movegen.king_attacked(self.b, self.kings[them], them)
            self._unmake(fr, to, captured)
            (checking if gives_check else quiet).append((fr, to))
        return checking + quiet

    def wins_after(self, red: bool, fr: int, to: int, moves: int) -> bool:
        """Whether ``red``'s move fr->to forces the opponent out of legal moves within
        ``moves`` moves of ``red`` (this one included)."""
        them = not red
        captured = self._make(fr, to)
        try:
            replies = movegen.legal_pairs(self.b, self.kings[them], them)
            if not replies:
                return True
            if moves == 1:
                return False
            for rfr, rto in replies:
                back = self._make(rfr, rto)
                try:
                    if not self.wins(red, moves - 1):
                        return False
                finally:
                    self._unmake(rfr, rto, back)
            return True
        finally:
            self._unmake(fr, to, captured)

    def wins(self, red: bool, moves: int) -> bool:
        """Whether ``red``, to move, forces a win within ``moves`` of its moves."""
        pairs = movegen.legal_pairs(self.b, self.kings[red], red)
        return any(self.wins_after(red, fr, to, moves)
                   for fr, to in self._checks_first(red, pairs))


def mating_moves(board: Board, moves: int) -> dict[Move, int]:
    """Each legal move of the side to move that forces a win within ``moves`` of its moves
    (1: the move itself leaves the opponent no legal move), with the fewest moves it needs."""
    if moves < 1:
        raise ValueError("moves must be >= 1")
    search = _MateSearch(board)
    red = board.turn
    out: dict[Move, int] = {}
    for move in board.legal_moves:
        for n in range(1, moves + 1):
            if search.wins_after(red, move.from_square, move.to_square, n):
                out[move] = n
                break
    return out
