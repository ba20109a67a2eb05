"""The move book: per position, the training games' most frequent move, against a plain count."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from apps.xiangqi.board import Board
from apps.xiangqi.book import MoveBook, move_index, move_text
from apps.xiangqi.training import GameRecord, iter_positions, load_games

VALID = Path(__file__).resolve().parents[2] / "shared" / "data" / "xiangqi" / "valid-games.jsonl.gz"
START = Board().fen()


@given(st.integers(0, 8), st.integers(0, 9), st.integers(0, 8), st.integers(0, 9))
def test_move_index_round_trips_and_stays_in_range(f1: int, r1: int, f2: int, r2: int) -> None:
    iccs = f"{'abcdefghi'[f1]}{r1}{'abcdefghi'[f2]}{r2}"
    assert 0 <= move_index(iccs) < 8100
    assert move_text(move_index(iccs)) == iccs
    assert move_index(iccs.upper()) == move_index(iccs)


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), max_size=60))
def test_most_common_is_the_counters_with_first_occurrence_breaking_ties(
    pairs: list[tuple[int, int]]
) -> None:
    moves = ["h2e2", "b0c2", "h0g2", "c3c4"]
    keys = np.array([k for k, _ in pairs], dtype=np.uint64)
    played = np.array([move_index(moves[m]) for _, m in pairs], dtype=np.int64)
    book = MoveBook(keys, played)
    counts: dict[int, Counter[str]] = defaultdict(Counter)
    for k, m in pairs:
        counts[k][moves[m]] += 1  # Counter.most_common keeps insertion order among equals
    assert len(book) == len(counts)
    for key in range(7):
        entry = book.most_common(key)
        if key not in counts:
            assert entry is None
            continue
        move, count = counts[key].most_common(1)[0]
        assert entry is not None
        assert (entry.move, entry.count, entry.total) == (move, count, sum(counts[key].values()))
    assert book.recurring(2) == sum(sum(c.values()) >= 2 for c in counts.values())
    for min_count in (1, 2, 3):
        firsts = [next(i for i, (k, _) in enumerate(pairs) if k == key)
                  for key, c in counts.items() if sum(c.values()) >= min_count]
        assert book.first_occurrences(min_count).tolist() == sorted(firsts)


def test_book_of_games_counts_each_position_across_games() -> None:
    games = [(START, ["h2e2", "h9g7"]), (START, ["h2e2", "b9c7"]), (START, ["b2e2", "h9g7"]),
             (START, ["h2e2", "b9c7"])]
    book = MoveBook.from_games(games)
    start = book.most_common(Board().zobrist_hash())
    assert start is not None and (start.move, start.count, start.total) == ("h2e2", 3, 4)
    after = Board()
    after.push_iccs("h2e2")
    reply = book.most_common(after.zobrist_hash())
    assert reply is not None and (reply.move, reply.count, reply.total) == ("b9c7", 2, 3)
    assert book.most_common(Board("3k5/9/9/9/9/9/9/9/9/4K4 w").zobrist_hash()) is None


@pytest.mark.skipif(not VALID.is_file(), reason=f"no game data at {VALID}")
def test_book_of_real_games_matches_a_replayed_count() -> None:
    games: list[GameRecord] = load_games(VALID, limit=60)
    book = MoveBook.from_games((g.start_fen, g.moves) for g in games)
    counts: dict[int, Counter[str]] = defaultdict(Counter)
    for game in games:
        for board, move in iter_positions(game):
            counts[board.zobrist_hash()][move] += 1
    assert len(book) == len(counts)
    for key, moves in counts.items():
        entry = book.most_common(key)
        assert entry is not None and entry.move == moves.most_common(1)[0][0]
        assert entry.total == sum(moves.values())
