"""apps.xiangqi.symmetry: mirror and colour-swap images of positions, moves and histories."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.xiangqi import Board, perft
from apps.xiangqi.core import Move
from apps.xiangqi.dataset import iter_games
from apps.xiangqi.fen import STARTING_FEN
from apps.xiangqi.render import move_question
from apps.xiangqi.symmetry import IDENTITY, SYMMETRIES, Symmetry
from apps.xiangqi.training import GameRecord, board_at

# 79 recorded games (tests/data/README.md): master games, fragments from set-up positions with
# either side to move, and the two diagrams read leniently
SAMPLE = Path(__file__).resolve().parent / "data" / "xiangqi-games-sample.jsonl.gz"
REAL_GAMES = [GameRecord(g["start_fen"], tuple(g["moves"]), g["category"])
              for g in iter_games(SAMPLE) if g["moves"]]


def _random_game(seed: int, plies: int) -> Board:
    rng = random.Random(seed)
    board = Board()
    for _ in range(plies):
        if board.outcome() is not None:
            break
        board.push(rng.choice(board.legal_moves))
    return board


def test_names_and_known_squares() -> None:
    assert [s.name for s in SYMMETRIES] == ["identity", "mirror", "swap", "mirror+swap"]
    assert Symmetry(mirror=True).iccs("h2e2") == "b2e2"
    assert Symmetry(swap=True).iccs("h2e2") == "b7e7"  # Black's cannon to its centre file
    assert Symmetry(mirror=True, swap=True).iccs("h2e2") == "h7e7"
    assert IDENTITY.iccs("a0a1") == "a0a1"


def test_start_position_is_its_own_mirror_and_swaps_to_black_to_move() -> None:
    start = Board()
    assert Symmetry(mirror=True).board(start).fen() == STARTING_FEN
    assert Symmetry(swap=True).board(start).fen() == STARTING_FEN.replace(" w ", " b ")



def test_images_keep_the_counters_of_the_fen() -> None:
    # a position read from a FEN deep into a game: its no-capture clock decides the 120-ply draw
    root = Board("5k3/9/9/9/9/9/9/9/9/R2K5 w - - 117 64")
    board = root.copy()
    board.push_iccs("a0a1")
    for symmetry in SYMMETRIES:
        image = symmetry.board(root)
        assert (image.halfmove_clock, image.fullmove_number) == (117, 64), symmetry.name
        assert symmetry.board(board).halfmove_clock == 118, symmetry.name
        assert symmetry.board(symmetry.board(board)).fen() == board.fen()

@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), plies=st.integers(0, 60))
def test_images_keep_the_rules(seed: int, plies: int) -> None:
    board = _random_game(seed, plies)
    for symmetry in SYMMETRIES:
        image = symmetry.board(board)
        assert sorted(m.iccs() for m in image.legal_moves) == sorted(
            symmetry.move(m).iccs() for m in board.legal_moves)
        assert image.is_check() == board.is_check()
        assert image.repetition_count() == board.repetition_count()
        assert image.halfmove_clock == board.halfmove_clock
        assert image.move_stack == [symmetry.move(m) for m in board.move_stack]
        assert (image.turn == board.turn) != symmetry.swap
        assert symmetry.board(image).fen() == board.fen()  # each symmetry is its own inverse


def _check_images_of(record: GameRecord, ply: int) -> None:
    """On a real position (with its history): each image's legal moves, and the question's
    options, are exactly the images of the position's; the played move maps to a legal move
    after which check, mate and the outcome are the images of the game's; mapping twice gives
    the position back."""
    board = board_at(record, ply)
    played = record.moves[ply]
    after = board.copy()
    after.push(Move.from_iccs(played))
    for symmetry in SYMMETRIES:
        image = symmetry.board(board)
        mapped = sorted(symmetry.move(m).iccs() for m in board.legal_moves)
        assert sorted(m.iccs() for m in image.legal_moves) == mapped
        assert move_question(image)["answer"]["options"] == mapped
        assert symmetry.iccs(played) in mapped
        back = symmetry.board(image)
        assert back.fen() == board.fen() and back.move_stack == board.move_stack
        image.push(Move.from_iccs(symmetry.iccs(played)))
        assert image.fen() == symmetry.board(after).fen()
        assert (image.is_check(), image.is_checkmate(), image.is_stalemate()) == (
            after.is_check(), after.is_checkmate(), after.is_stalemate())
        ends, image_ends = after.outcome(), image.outcome()
        assert (ends is None) == (image_ends is None)
        if ends is not None and image_ends is not None:
            assert image_ends.termination == ends.termination
            assert image_ends.winner == (ends.winner if ends.winner is None or not symmetry.swap
                                         else not ends.winner)


@settings(max_examples=40, deadline=None)
@given(game=st.integers(0, len(REAL_GAMES) - 1), at=st.floats(0.0, 1.0, exclude_max=True))
def test_images_of_recorded_positions_keep_the_rules_and_the_played_move(
        game: int, at: float) -> None:
    record = REAL_GAMES[game]
    _check_images_of(record, int(at * len(record.moves)))


def test_images_of_recorded_mates_are_mates() -> None:
    mates = 0
    for record in REAL_GAMES:
        end = board_at(record, len(record.moves) - 1)
        end.push(Move.from_iccs(record.moves[-1]))
        if end.is_checkmate():
            mates += 1
            _check_images_of(record, len(record.moves) - 1)
    assert mates >= 16  # the sample keeps the games that end in a checkmate


@pytest.mark.parametrize("seed", [1, 2])
def test_perft_is_the_same_in_every_image(seed: int) -> None:
    board = _random_game(seed, 24)
    counts = {perft(s.board(board), 2) for s in SYMMETRIES}
    assert len(counts) == 1


@given(st.integers(0, 89), st.integers(0, 89))
def test_square_and_move_maps_are_involutions(a: int, b: int) -> None:
    for symmetry in SYMMETRIES:
        assert symmetry.square(symmetry.square(a)) == a
        if a != b:
            move = Move(a, b)
            assert symmetry.move(symmetry.move(move)) == move


@pytest.fixture
def variants(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("xiangqi_decoding_variants")


def test_vote_counts_answers_and_breaks_ties_by_summed_probability(variants: ModuleType) -> None:
    views = [{"answer": "a0a1", "probs": {"a0a1": 0.5, "b0c2": 0.5}},
             {"answer": "b0c2", "probs": {"a0a1": 0.1, "b0c2": 0.9}}]
    assert variants.vote(views) == "b0c2"  # one vote each; 1.4 summed beats 0.6
    assert variants.vote([*views, {"answer": "a0a1", "probs": {"a0a1": 0.2, "b0c2": 0.8}}]) \
        == "a0a1"  # two votes beat one, whatever the probabilities
    assert variants.mean_probability(views) == "b0c2"


def test_pooled_ties_go_to_the_positions_own_view(variants: ModuleType) -> None:
    # the start position and its mirror: h2e2 and b2e2 sum alike over the two views
    views = [{"answer": "b2e2", "probs": {"h2e2": 0.4, "b2e2": 0.6}},
             {"answer": "h2e2", "probs": {"h2e2": 0.6, "b2e2": 0.4}}]
    assert variants.mean_probability(views) == "b2e2"
    assert variants.vote(views) == "b2e2"


def test_variant_moves_score_the_shipped_rules(variants: ModuleType) -> None:
    views = [{"answer": "a0a1", "probs": {"a0a1": 0.6, "b0c2": 0.3, "i0i1": 0.1}}] + [
        {"answer": "b0c2", "probs": {"a0a1": 0.1, "b0c2": 0.8, "i0i1": 0.1}}] * 3
    row = {"gold": "b0c2", "ply": 0, "board_ply": 0, "key": 0, "views": views,
           "sound": ["b0c2", "i0i1"], "restricted": "i0i1"}
    moves = variants.variant_moves([row, {**row, "ply": 30, "board_ply": 30}])
    assert moves["alone"] == ["a0a1"] * 2 and moves["vote all 4"] == ["b0c2"] * 2
    # the player's pooling: the position's own answer in the opening, the pooled one after
    assert moves["pooled from ply 20 (the player's pooling)"] == ["a0a1", "b0c2"]
    moves = variants.variant_moves([row])
    assert moves["guided (shipped)"] == ["b0c2"]  # a0a1 unsound: the sound move of most probability
    assert moves["guided, restricted choice"] == ["i0i1"]
    lines = variants.report([row], seen=set())
    assert any(line.startswith("| vote all 4 | 100.0 % |") for line in lines)
