"""The repetition rule one reply deep, as the model players apply it.

The document the model reads shows no move history, so the model cannot see a repetition coming.
These functions give the rules' verdict on a move (:meth:`Board.outcome`, one reply of the
opponent's deep; no search): :func:`repetition_safe_moves` for the options a
:class:`~apps.xiangqi.model_player.ModelPlayer` offers, :func:`repetition_classes` for the blunder
check of :mod:`apps.xiangqi.search_guided`. Kept apart from both, because both use it.
"""

from __future__ import annotations

from apps.xiangqi.board import Board
from apps.xiangqi.core import Color, Move
from apps.xiangqi.outcome import Outcome, Termination


def repetition_safe_moves(board: Board) -> list[Move]:
    """The legal moves that do not let the game end by repetition at once, unless in the
    mover's favour; all of them when every one does.

    A move ends the game at once when it makes the third occurrence of a position, or when a
    reply of the opponent's does (the rule counts the cycle, whoever completes it): a loss for
    the side that checked on every move of it, else a draw. The document shows no move history,
    so the model cannot see either coming; this is the rules' verdict one reply deep, not a
    search (material and mates are not looked at). A draw is avoided too: the model never chose
    it, and against the baseline players avoiding it wins more than it loses
    (docs/xiangqi-model.md). A move that ends the game itself (:meth:`Board.outcome`: a mate,
    the 120-ply draw, a repetition) is judged by that end alone: no reply follows it.
    """
    legal = board.legal_moves
    if not board.has_repeated_position():  # no third occurrence is two plies away
        return legal
    us = board.turn
    work = board.copy()
    safe = []
    for move in legal:
        work.push(move)
        outcome = work.outcome()
        if outcome is not None:  # the game ends on this move
            ends = _lost_or_drawn_by_repetition(outcome, us)
        else:
            ends = _a_reply_completes_threefold(work, us)
        work.pop()
        if not ends:
            safe.append(move)
    return safe or legal


def repetition_classes(board: Board, moves: set[Move]) -> tuple[set[Move], set[Move]]:
    """(safe, fresh) subsets of ``moves``: fresh ones reach a position not seen before in the
    game, or one whose repetition the rules give to the mover (:func:`repeats_to_win`: the
    opponent's perpetual check); safe ones are fresh and no reply of the opponent's then makes a
    position's third occurrence that the mover does not win. The search does not see the
    repetition rule, and a player ahead in material that keeps checking loses by it (perpetual
    check); one that is checked perpetually wins by it, and must not give material away to
    escape the repetition. A move that ends the game itself (a mate, the 120-ply draw, a
    repetition) is judged by :meth:`Board.outcome` alone, no reply or cycle following it: in
    neither set when that end is a repetition the mover loses or draws, else in both."""
    us = board.turn
    work = board.copy()
    fresh, safe = set(), set()
    for move in moves:
        work.push(move)
        outcome = work.outcome()
        if outcome is not None:  # the game ends on this move
            if not _lost_or_drawn_by_repetition(outcome, us):
                fresh.add(move)
                safe.add(move)
        elif work.repetition_count() == 1 or repeats_to_win(work, us):
            fresh.add(move)
            if not _a_reply_completes_threefold(work, us):
                safe.add(move)
        work.pop()
    return safe, fresh


def _a_reply_completes_threefold(board: Board, us: Color) -> bool:
    """Whether some legal move of the side to move (``us``'s opponent) makes a position's third
    occurrence that ``us`` does not win; none can unless a position already occurred twice."""
    if not board.has_repeated_position():
        return False
    return any(_completes_threefold(board, reply, us) for reply in board.legal_moves)


def _completes_threefold(board: Board, move: Move, us: Color) -> bool:
    """Whether ``move`` makes a position's third occurrence that ``us`` does not win."""
    board.push(move)
    try:
        return board.is_repetition(3) and _lost_or_drawn_by_repetition(board.outcome(), us)
    finally:
        board.pop()


def _lost_or_drawn_by_repetition(outcome: Outcome | None, us: Color) -> bool:
    """Whether ``outcome`` ends the game by repetition and not in ``us``'s favour. Repetition
    comes before the 120-ply draw in :meth:`Board.outcome`, a mate before both."""
    return (outcome is not None and outcome.winner != us
            and outcome.termination in (Termination.REPETITION, Termination.DRAW_REPETITION))


def repeats_to_win(board: Board, us: Color) -> bool:
    """On a position that occurred before (``us`` just moved there): whether the rules give the
    repetition to ``us``, now if this is its third occurrence, else when the cycle since its last
    occurrence is played once more (the opponent checked on every move of it, ``us`` did not).
    The game ends where the replayed cycle first ends it: the third occurrence of a position
    inside the cycle, or the 120-ply draw partway through, which gives ``us`` nothing."""
    if not board.is_repetition(3):
        probe = board.copy()
        key = probe.zobrist_hash()
        cycle: list[Move] = []
        while not cycle or len(cycle) % 2 or probe.zobrist_hash() != key:
            cycle.append(probe.pop())
        board = board.copy()
        for move in reversed(cycle):
            board.push(move)
            if board.outcome() is not None:
                break
    outcome = board.outcome()
    return outcome is not None and outcome.winner == us
