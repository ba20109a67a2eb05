"""Forced-mate search (apps/xiangqi/mate.py) against a plain Board reference, and the mate labels
built on it (apps/xiangqi/mate_labels.py)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from apps.xiangqi.board import Board
from apps.xiangqi.core import Move
from apps.xiangqi.errors import InvalidFen
from apps.xiangqi.mate import mating_moves
from apps.xiangqi.mate_labels import MATE_CATEGORY, fastest_mate, game_labels, main
from apps.xiangqi.training import load_games

# two chariots against a bare general: b0b9 and a8f8 mate at once (d9 faces the red general)
TWO_CHARIOTS = "4k4/R8/9/9/9/9/9/9/9/1R1K5 w - - 0 1"


def _reference_wins(board: Board, moves: int) -> bool:
    """Whether the side to move forces the opponent out of legal moves within ``moves`` of its
    moves, by plain push/pop on the Board."""
    for move in board.legal_moves:
        board.push(move)
        try:
            replies = board.legal_moves
            if not replies:
                return True
            if moves > 1 and all(_reply_still_loses(board, reply, moves - 1) for reply in replies):
                return True
        finally:
            board.pop()
    return False


def _reply_still_loses(board: Board, reply: Move, moves: int) -> bool:
    board.push(reply)
    try:
        return _reference_wins(board, moves)
    finally:
        board.pop()


def _reference_mates(board: Board, moves: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for move in board.legal_moves:
        for n in range(1, moves + 1):
            board.push(move)
            try:
                replies = board.legal_moves
                wins = not replies or (n > 1 and all(
                    _reply_still_loses(board, reply, n - 1) for reply in replies))
            finally:
                board.pop()
            if wins:
                out[move.iccs()] = n
                break
    return out


_RED_PALACE = [r * 9 + f for r in range(3) for f in range(3, 6)]
_BLACK_PALACE = [r * 9 + f for r in range(7, 10) for f in range(3, 6)]


@st.composite
def endgames(draw: st.DrawFn) -> Board:
    """A general each, two or three red attackers (chariot, horse, cannon) anywhere and up to two
    black defenders: positions where short mates are common."""
    squares: dict[int, str] = {draw(st.sampled_from(_RED_PALACE)): "K"}
    squares.setdefault(draw(st.sampled_from(_BLACK_PALACE)), "k")
    for piece in draw(st.lists(st.sampled_from("RNC"), min_size=2, max_size=3)):
        squares.setdefault(draw(st.integers(0, 89)), piece)
    for piece in draw(st.lists(st.sampled_from("ranc"), max_size=2)):
        squares.setdefault(draw(st.integers(0, 89)), piece)
    rows = []
    for rank in range(9, -1, -1):
        row, empty = "", 0
        for file in range(9):
            piece = squares.get(rank * 9 + file)
            if piece is None:
                empty += 1
                continue
            row += (str(empty) if empty else "") + piece
            empty = 0
        rows.append(row + (str(empty) if empty else ""))
    try:
        board = Board("/".join(rows) + " w - - 0 1")
    except InvalidFen:
        assume(False)
    assume(board.outcome() is None)
    return board


@settings(max_examples=60, deadline=None)
@given(endgames(), st.integers(1, 2))
def test_mating_moves_equal_the_plain_reference(board: Board, moves: int) -> None:
    found = {m.iccs(): n for m, n in mating_moves(board, moves).items()}
    assert found == _reference_mates(board, moves)
    assert bool(found) == _reference_wins(board, moves)


def test_two_chariots_mate_in_one() -> None:
    found = {m.iccs(): n for m, n in mating_moves(Board(TWO_CHARIOTS), 2).items()}
    assert found["b0b9"] == 1 and found["a8f8"] == 1
    assert "a8a9" not in found  # a check the general escapes to e8, and no mate follows
    assert found == _reference_mates(Board(TWO_CHARIOTS), 2)
    assert "d0e0" not in found  # the red general steps into the open file: no mate follows
    assert sorted(m for m, n in found.items() if n == 1) == ["a8f8", "b0b9"]


def test_no_mate_from_the_start_and_moves_must_be_positive() -> None:
    assert mating_moves(Board(), 1) == {}
    with pytest.raises(ValueError):
        mating_moves(Board(), 0)


def test_fastest_mate_keeps_the_preferred_move_only_when_it_is_as_fast() -> None:
    board = Board(TWO_CHARIOTS)
    assert fastest_mate(board, 2, board.parse_iccs("b0b9")) == (board.parse_iccs("b0b9"), 1)
    # a8b8 wins too, but in two: the first mate in one in legal-move order is taken
    first = next(m for m in board.legal_moves if m.iccs() in ("a8f8", "b0b9"))
    assert fastest_mate(board, 2, board.parse_iccs("a8b8")) == (first, 1)
    assert fastest_mate(Board(), 2) is None


def _game(moves: str, model: str = "red") -> dict:
    return {"game": 3, "model": model, "start_fen": TWO_CHARIOTS, "moves": moves}


def test_game_labels_label_the_model_positions_with_a_forced_win() -> None:
    # red (the model) misses the mate twice: d0d1, and after e9f9 the check a8f8 (the general
    # takes nothing but steps to e9 or f8); b0b9 mates both times
    game = _game("d0d1 e9f9 a8f8")
    records = list(game_labels(game, 2, "gen"))
    board = Board(TWO_CHARIOTS)
    expected_plies = []
    for ply, iccs in enumerate(game["moves"].split()):
        if board.turn and mating_moves(board, 2):
            expected_plies.append(ply)
        board.push_iccs(iccs)
    assert [len(r["moves"]) - 1 for r in records] == expected_plies == [0, 2]
    first, last = records
    assert first["moves"] == ["b0b9"] and first["student"] == "d0d1"
    assert first["event"] == "mate in 1" and first["category"] == MATE_CATEGORY
    assert last["moves"] == ["d0d1", "e9f9", "b0b9"] and last["student"] == "a8f8"
    assert last["event"] == "mate in 1"
    # where the model's own move is one of the fastest wins, it stays the label
    assert [r["moves"][-1] for r in game_labels(_game("b0b9"), 2, "gen")] == ["b0b9"]
    assert [r["moves"][-1] for r in game_labels(_game("a8f8"), 2, "gen")] == ["a8f8"]
    assert first["start_fen"] == TWO_CHARIOTS and first["game"] == "gen-3-0"
    # black to move in none of the model's positions: nothing is labelled for black's side
    assert list(game_labels(_game("d0d1 e9f9 a8f8", model="black"), 2, "gen")) == []


def test_the_cli_writes_records_the_training_driver_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    match = tmp_path / "gen.json"
    match.write_text(json.dumps({"results": [_game("d0d1 e9f9 a8f8"), _game("b0b9")]}))
    out = tmp_path / "mates.jsonl.gz"
    assert main([str(match), "--moves", "1", "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["games"] == 2 and summary["positions"] == 3
    assert summary["mates"] == {"1": {"positions": 3, "model_played": 1, "share": 0.3333}}
    with gzip.open(out, "rt") as f:
        assert [json.loads(line)["mate_in"] for line in f] == [1, 1, 1]
    games = load_games(out)
    assert [g.moves[-1] for g in games] == ["b0b9", "b0b9", "b0b9"]
    with pytest.raises(SystemExit):
        main([str(match), "--out", str(out)])  # never overwrites
    with pytest.raises(SystemExit):
        main([str(tmp_path / "typo.json"), "--out", str(tmp_path / "never.jsonl.gz")])
    assert not (tmp_path / "never.jsonl.gz").exists()
    progress = tmp_path / "gen.jsonl"  # a match's --progress file: one game per line
    progress.write_text(json.dumps(_game("d0d1 e9f9 a8f8")) + "\n")
    again = tmp_path / "again.jsonl.gz"
    assert main([str(progress), "--moves", "1", "--out", str(again)]) == 0
    assert [g.moves for g in load_games(again)] == [g.moves for g in games[:2]]
