"""Drill draws: master positions drawn per distinct recurring position, not per ply."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.xiangqi import Board
from apps.xiangqi.book import MoveBook
from apps.xiangqi.train_player import XiangqiSection, master_refs
from apps.xiangqi.training import GameRecord, board_at, book_positions
from decision.errors import DecisionInputError

START = Board().fen()
# lines from the start that share their first plies, and one that transposes into another
LINES = [("h2e2", "h9g7", "h0g2"), ("h2e2", "b9c7", "b0c2"), ("b2e2", "h9g7", "h0g2"),
         ("b0c2", "h9g7", "h2e2", "b9c7"), ("h2e2", "h9g7", "b0c2", "b9c7"), ("h2e2", "h9g7"),
         ()]


def record(moves: tuple[str, ...]) -> GameRecord:
    return GameRecord(START, moves, "full")


def positions_in_order(games: list[GameRecord]) -> list[tuple[int, int, int]]:
    """(key, game, ply) of every ply of every game, in the games' order."""
    return [(board_at(game, ply).zobrist_hash(), g, ply)
            for g, game in enumerate(games) for ply in range(len(game.moves))]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(range(len(LINES))), min_size=1, max_size=10),
       st.integers(1, 4), st.integers(0, 1000))
def test_draws_are_first_occurrences_of_recurring_positions(
        picks: list[int], min_count: int, seed: int) -> None:
    games = [record(LINES[i]) for i in picks]
    book = MoveBook.from_games((g.start_fen, g.moves) for g in games)
    seen = positions_in_order(games)
    counts = Counter(key for key, _, _ in seen)
    firsts: dict[int, tuple[int, int]] = {}
    for key, g, ply in seen:
        firsts.setdefault(key, (g, ply))
    eligible = {firsts[key] for key, n in counts.items() if n >= min_count}
    if not eligible:
        with pytest.raises(DecisionInputError, match="no position is reached"):
            book_positions(games, book, min_count, 5, seed)
        return
    refs = book_positions(games, book, min_count, 50, seed)
    assert len(refs) == 50 and {(r.game, r.ply) for r in refs} <= eligible
    assert refs == book_positions(games, book, min_count, 50, seed)  # deterministic


def test_draws_are_uniform_over_positions_not_plies() -> None:
    # the start occurs 5 times and the position after h2e2 4 times: drawn about equally often
    games = [record(LINES[i]) for i in (0, 1, 2, 4, 5)]
    book = MoveBook.from_games((g.start_fen, g.moves) for g in games)
    drawn = Counter((r.game, r.ply) for r in book_positions(games, book, 3, 2000, 7))
    assert set(drawn) == {(0, 0), (0, 1)}
    assert 900 < drawn[(0, 0)] < 1100


def test_master_refs_mix_drill_draws_into_the_ply_draws() -> None:
    games = [record(LINES[i]) for i in (0, 1, 2, 4, 5)]
    book = MoveBook.from_games((g.start_fen, g.moves) for g in games)
    plain = XiangqiSection(train_positions=400, seed=3, book_min_count=2)
    drill = XiangqiSection(train_positions=400, seed=3, book_min_count=2, drill_share=0.5,
                           drill_min_count=3)
    before = master_refs(games, plain)
    assert master_refs(games, plain, book) == before  # no drill: the book changes nothing
    refs = master_refs(games, drill, book)
    assert len(refs) == 400 and refs == master_refs(games, drill, book)
    # 200 drill draws at the two first occurrences, plus the ply draws that land there
    at_firsts = sum((r.game, r.ply) in ((0, 0), (0, 1)) for r in refs)
    ply_draws_there = sum((r.game, r.ply) in ((0, 0), (0, 1)) for r in before[:200])
    assert at_firsts >= 200 and at_firsts > ply_draws_there + 150
    with pytest.raises(ValueError, match="needs the training games' book"):
        master_refs(games, drill)
