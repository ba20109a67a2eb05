"""Perft: count the leaf nodes of the legal move tree, the standard check of move generation."""

from __future__ import annotations

from apps.xiangqi import movegen
from apps.xiangqi.board import Board


def perft(board: Board, depth: int) -> int:
    """Number of legal move sequences of length ``depth`` from the position (1 at depth 0).

    Works on a copy of the board's piece list, so the board is left untouched.
    """
    if not isinstance(depth, int) or depth < 0:
        raise ValueError(f"perft depth must be an integer >= 0, got {depth!r}")
    if depth == 0:
        return 1
    b = list(board._board)
    kings = [board.king(False), board.king(True)]
    return movegen.perft_pairs(b, kings, board.turn, depth)


def divide(board: Board, depth: int) -> dict[str, int]:
    """Perft split by first move (ICCS -> leaf count), for comparing with another engine."""
    if depth < 1:
        raise ValueError(f"divide needs depth >= 1, got {depth}")
    out: dict[str, int] = {}
    work = board.copy(stack=False)
    for move in work.legal_moves:
        work._push(move)
        out[move.iccs()] = perft(work, depth - 1)
        work.pop()
    return out
