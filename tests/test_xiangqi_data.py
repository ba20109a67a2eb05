"""Every recorded move of the Chinese Chess Practical Dataset must replay as legal.

The in-repo sample (``tests/data/xiangqi-games-sample.jsonl.gz``, 79 CCPD games) is checked on
every run. Where ``../shared/data`` is present, a larger sample (every 5th validation game and the
first 150 training games) runs too, and the full check of all games is marked slow (also in
benchmarks/xiangqi_perft.py).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from apps.xiangqi import Move
from apps.xiangqi.dataset import data_dir, iter_games, replay, start_board

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLE = REPO_ROOT / "tests" / "data" / "xiangqi-games-sample.jsonl.gz"
XIANGQI = data_dir(REPO_ROOT) / "xiangqi"
TRAIN = XIANGQI / "train-games.jsonl.gz"
VALID = XIANGQI / "valid-games.jsonl.gz"

needs_shared_data = pytest.mark.skipif(
    not (TRAIN.is_file() and VALID.is_file()),
    reason=f"Xiangqi games not found under {XIANGQI} (clone shared/ beside the repository)",
)


def _check_games(games: Iterable[dict]) -> tuple[int, int]:
    n_games = n_moves = 0
    for game in games:
        n_games += 1
        board = replay(game)  # raises IllegalMove naming the game's position on any bad move
        n_moves += len(board.move_stack)
        assert [m.iccs() for m in board.move_stack] == game["moves"]
        board.outcome()  # game-state detection must run on every final position
    return n_games, n_moves


def test_in_repo_sample_replays_legally() -> None:
    assert _check_games(iter_games(SAMPLE)) == (79, 6_556)


def test_in_repo_sample_covers_set_up_positions_and_lenient_diagrams() -> None:
    games = list(iter_games(SAMPLE))
    categories = {g["category"] for g in games}
    assert len(categories) == 6
    strict = [start_board(g["start_fen"])[1] for g in games]
    assert strict.count(False) == 2
    opening_array = [g["start_fen"].startswith("rnbakabnr/9/1c5c1/") for g in games]
    assert opening_array.count(False) == 6


@needs_shared_data
def test_in_repo_sample_equals_its_source_records() -> None:
    wanted = {g["game"]: g for g in iter_games(SAMPLE)}
    found = {}
    for path in (VALID, TRAIN):
        found.update((g["game"], g) for g in iter_games(path) if g["game"] in wanted)
    assert found == wanted


@needs_shared_data
def test_sample_of_recorded_games_replays_legally() -> None:
    sample = [g for i, g in enumerate(iter_games(VALID)) if i % 5 == 0]
    sample += list(itertools.islice(iter_games(TRAIN), 150))
    t0 = time.perf_counter()
    n_games, n_moves = _check_games(sample)
    elapsed = time.perf_counter() - t0
    assert n_games == 441 and n_moves > 25_000
    print(f"replayed {n_games} games, {n_moves} moves in {elapsed:.2f} s")


def test_replay_rejects_a_corrupted_game() -> None:
    game = next(iter_games(SAMPLE))
    bad = dict(game, moves=game["moves"][:5] + ["a0a9"])
    with pytest.raises(ValueError, match="a0a9"):
        replay(bad)


def _recorded_mates(games: Iterable[dict]) -> tuple[int, int]:
    mates = agree = 0
    for game in games:
        board = replay(game)
        if game["result"] in ("1-0", "0-1") and board.is_checkmate():
            mates += 1
            agree += board.result() == game["result"]
    return mates, agree


def test_recorded_checkmates_in_the_sample_agree_with_the_recorded_result() -> None:
    validation = (g for g in iter_games(SAMPLE) if g["category"] == "對局")
    assert _recorded_mates(validation) == (16, 16)


@needs_shared_data
def test_recorded_checkmates_agree_with_the_recorded_result() -> None:
    """Where our engine sees checkmate at the end of a validation game, the result matches."""
    mates, agree = _recorded_mates(iter_games(VALID))
    assert mates >= 10 and agree == mates


def test_pop_replays_backwards_to_the_start() -> None:
    for game in itertools.islice(iter_games(SAMPLE), 0, None, 10):
        board = replay(game)
        start, _ = start_board(game["start_fen"])
        for iccs in reversed(game["moves"]):
            assert board.pop() == Move.from_iccs(iccs)
        assert board.fen() == start.fen() and board.zobrist_hash() == start.zobrist_hash()


@pytest.mark.slow
@needs_shared_data
def test_all_recorded_games_replay_legally() -> None:
    totals = {}
    for path in (TRAIN, VALID):
        totals[path.name] = _check_games(iter_games(path))
    assert totals["train-games.jsonl.gz"] == (27_112, 2_209_472)
    assert totals["valid-games.jsonl.gz"] == (1_455, 125_447)


@needs_shared_data
def test_validation_start_positions_are_all_strictly_valid() -> None:
    assert all(start_board(g["start_fen"])[1] for g in iter_games(VALID))


def test_a_misplaced_piece_falls_back_to_lenient_reading() -> None:
    misplaced = "rnb1kabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RNBAKAaNR w - - 0 1"
    board, strict = start_board(misplaced)
    assert not strict and board.fen() == misplaced
