"""The tactical search against a naive full-width minimax on the public Board API."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.xiangqi import RED, Board
from apps.xiangqi.players import material
from apps.xiangqi.search import MATE, SearchConfig, best_score, move_scores


def _reference(board: Board, depth: int, qdepth: int, ply: int, root_red: float) -> float:
    """Plain minimax (no pruning), scored as the material balance for the side to move; a mate
    is ``MATE - ply`` beyond the root's balance (``root_red``: Red's material there), whatever
    material the line won on the way."""
    me = board.turn
    at_root = root_red if me == RED else -root_red
    if depth == 0:
        if board.is_checkmate():
            return -(MATE - ply) + at_root
        return _reference_quiescence(board, qdepth)
    moves = board.legal_moves
    if not moves:
        return -(MATE - ply) + at_root
    best = -math.inf
    for move in moves:
        board.push(move)
        best = max(best, -_reference(board, depth - 1, qdepth, ply + 1, root_red))
        board.pop()
    return best


def _reference_quiescence(board: Board, qdepth: int) -> float:
    me = board.turn
    best = material(board, me)  # standing pat
    if qdepth == 0:
        return best
    for move in board.legal_moves:
        if board.piece_at(move.to_square) is None:
            continue
        board.push(move)
        best = max(best, -_reference_quiescence(board, qdepth - 1))
        board.pop()
    return best


def _position(choices: list[int]) -> Board:
    board = Board()
    for c in choices:
        moves = board.legal_moves
        if board.outcome() is not None or not moves:
            break
        board.push(moves[c % len(moves)])
    return board


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 10**6), min_size=0, max_size=40), st.integers(1, 2))
def test_search_equals_plain_minimax(choices: list[int], depth: int) -> None:
    board = _position(choices)
    if board.outcome() is not None:
        return
    config = SearchConfig(depth=depth, quiescence_depth=2)
    base, root_red = material(board, board.turn), material(board, RED)
    scores = move_scores(board, config=config)
    for move, score in scores.items():
        board.push(move)
        want = -_reference(board, depth - 1, 2, 1, root_red) - base
        board.pop()
        assert score == pytest.approx(want), move.iccs()
    assert best_score(board, config) == pytest.approx(max(scores.values()))
    # with a floor, scores at or above it are exact and the rest are reported below it
    floor = max(scores.values()) - 1.0
    bounded = move_scores(board, config=config, floor=floor)
    for move, score in scores.items():
        if score >= floor:
            assert bounded[move] == pytest.approx(score)
        else:
            assert bounded[move] < floor


def test_search_finds_mate_in_one_and_sees_the_recapture() -> None:
    # i0i9 mates: d9 and e8 are Black's own pieces, f9 is covered by the chariot and, down the
    # open f-file, by the facing Red general; nothing can block rank 9 or take the chariot
    board = Board("3ak4/4c4/9/9/9/9/9/9/9/5K2R w")
    scores = move_scores(board)
    best = max(scores, key=scores.__getitem__)
    assert best.iccs() == "i0i9" and scores[best] > MATE / 2
    board.push(best)
    assert board.is_checkmate()
    # taking the soldier on e4 (worth 2 across the river) loses the chariot (9) to e6's chariot
    board = Board("4k4/9/9/4r4/9/R3p4/9/9/9/3K5 w")
    scores = move_scores(board)
    assert scores[board.parse_iccs("a4e4")] == pytest.approx(2.0 - 9.0)
    assert best_score(board) == pytest.approx(0.0)


def test_depth_two_sees_the_mate_it_would_allow() -> None:
    # Black's chariot on c1 threatens c1c0 mate (e1: Red's own cannon, f0: its advisor, and no
    # Red piece can step between on d0). The Red chariot on c4 can take it; moving it off the
    # c-file instead allows the mate, which a depth-2 search must see on its last ply
    board = Board("4k4/9/9/9/9/2R6/9/9/2r1C4/4KA3 w")
    scores = move_scores(board, config=SearchConfig(depth=2))
    assert scores[board.parse_iccs("c4a4")] < -MATE / 2
    assert scores[board.parse_iccs("c4c1")] == pytest.approx(9.0)
    board.push_iccs("c4a4")
    board.push_iccs("c1c0")
    assert board.is_checkmate()


def test_a_mate_is_not_outscored_by_a_slower_mate_that_wins_material() -> None:
    # e3d3 mates at once; i2i4 takes the horse (4) and mates next move. The mate in one must
    # score higher: with the material of the line added to the mate score it scored 999 against
    # 1001, and a guided player with margin 0 vetoed the mate in one as a blunder
    board = Board("3k5/9/9/9/9/8n/4R4/4K3R/9/9 w - - 0 1")
    config = SearchConfig(depth=3)
    scores = move_scores(board, config=config)
    mate, slower = board.parse_iccs("e3d3"), board.parse_iccs("i2i4")
    assert scores[mate] == pytest.approx(MATE - 1)
    assert scores[slower] == pytest.approx(MATE - 3)
    assert best_score(board, config) == pytest.approx(MATE - 1)
    # one ply deeper the slower mate is found by the full-width search (no legal reply left
    # with plies to go), not on its last ply: the material won on the way is not added there
    # either
    deeper = move_scores(board, config=SearchConfig(depth=4))
    assert deeper[mate] == pytest.approx(MATE - 1)
    assert deeper[slower] == pytest.approx(MATE - 3)
    board.push(mate)
    assert board.is_checkmate()
