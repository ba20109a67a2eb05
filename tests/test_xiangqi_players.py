"""The position document and move question for the decision model, and the baseline players."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.xiangqi import BLACK, RED, Board, Move, XiangqiError
from apps.xiangqi.core import square_name
from apps.xiangqi.players import (
    WIN_SCORE,
    GreedyPlayer,
    RandomPlayer,
    material,
    play_game,
)
from apps.xiangqi.render import board_grid, move_question, position_document

START_GRID = """  abcdefghi
9 rnbakabnr
8 .........
7 .c.....c.
6 p.p.p.p.p
5 .........
4 .........
3 P.P.P.P.P
2 .C.....C.
1 .........
0 RNBAKABNR"""


def test_document_of_the_start_position() -> None:
    board = Board()
    doc = position_document(board)
    assert board_grid(board) == START_GRID and START_GRID in doc
    assert "Side to move: red. Move 1. Last move: none. In check: no." in doc
    moves_line = doc.splitlines()[-4]
    assert moves_line.startswith("Legal moves (44): ")
    listed = moves_line.split(": ", 1)[1].split()
    assert listed == sorted(m.iccs() for m in board.legal_moves)
    assert position_document(Board()) == doc  # deterministic
    # the cannons can take the horses behind their screens; nothing gives check; the black
    # cannons likewise attack Red's horses
    assert doc.splitlines()[-3:] == [
        "Captures (2): b2b9xn h2h9xn", "Checks (0):", "Hanging (0):",
    ]
    # the black cannon on b7 attacks the horse on b0 over the screen on b2; once the chariot
    # has left a0 nothing defends b0, so the horse hangs (h0 stays guarded by the chariot on i0)
    board = Board()
    for m in ("a0a1", "a9a8"):
        board.push_iccs(m)
    assert position_document(board).splitlines()[-1] == "Hanging (1): b0N"
    board = Board("4k4/9/9/9/4r4/9/9/4R4/9/3K5 w - - 0 1")  # the black chariot is undefended
    assert position_document(board).splitlines()[-3] == "Captures (1): e2e5xr!"


def _can_take(board: Board, by_red: bool, square: int) -> bool:
    """Independent of Board.attackers: on a copy with an enemy soldier on ``square`` and
    ``by_red``'s side to move, is any move of one of its pieces there pseudo-legal?"""
    probe = board.copy()
    probe._board[square] = -7 if by_red else 7  # an enemy soldier (codes: apps.xiangqi.core)
    probe.turn = by_red
    return any(probe.is_pseudo_legal(Move(fr, square)) for fr in range(90) if fr != square)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 10_000), min_size=0, max_size=40))
def test_tactics_lines_agree_with_the_rules(choices: list[int]) -> None:
    board = Board()
    for c in choices:  # a random playout
        legal = list(board.legal_moves)
        if not legal:
            break
        board.push(legal[c % len(legal)])
    captures, checks, hanging = (line.split(": ", 1)[1].split() if ": " in line else []
                                  for line in position_document(board).splitlines()[-3:])
    expect_captures, expect_checks = [], []
    for move in board.legal_moves:
        victim = board.piece_at(move.to_square)
        after = board.copy()
        after.push(move)
        if victim is not None:
            free = not _can_take(after, after.turn, move.to_square)
            expect_captures.append(f"{move.iccs()}x{victim.symbol()}" + ("!" if free else ""))
        if after.is_check():
            expect_checks.append(move.iccs())
    assert captures == sorted(expect_captures)
    assert checks == sorted(expect_checks)
    us = board.turn
    mine = [(sq, p) for sq, p in sorted(board.piece_map().items())
            if p.color == us and p.symbol().upper() != "K"]
    assert hanging == [square_name(sq) + p.symbol() for sq, p in mine
                       if _can_take(board, not us, sq) and not _can_take(board, us, sq)]


def test_document_tracks_side_last_move_and_check() -> None:
    board = Board()
    for m in ("h2e2", "h9g7"):
        board.push_iccs(m)
    doc = position_document(board)
    assert "Side to move: red. Move 2. Last move: h9g7. In check: no." in doc
    assert "\n7 .c....nc.\n" in doc and "\n2 .C..C....\n" in doc
    checked = Board("3k5/9/9/9/3R5/9/9/9/9/4K4 b - - 0 1")  # the chariot on d5 checks
    assert "Side to move: black. Move 1. Last move: none. In check: yes." in (
        position_document(checked)
    )


def test_move_question_offers_exactly_the_legal_moves() -> None:
    board = Board()
    board.push_iccs("h2e2")
    q = move_question(board)
    assert q["id"] == "move" and q["text"] == "Which move should black play?"
    assert q["answer"]["type"] == "choice"
    assert q["answer"]["options"] == sorted(m.iccs() for m in board.legal_moves)
    from decision.schemas import Question

    parsed = Question.model_validate(q)  # the service's own schema accepts it
    assert parsed.answer.options() == q["answer"]["options"]


def test_move_question_after_the_game_ended_raises() -> None:
    board = Board("R3k4/R8/9/9/9/9/9/9/9/3K5 b - - 0 1")  # Black is checkmated
    with pytest.raises(XiangqiError, match="no legal move"):
        move_question(board)
    assert "In check: yes" in position_document(board)
    assert "Legal moves (0): " in position_document(board)


def test_material_counts_crossed_soldiers_double() -> None:
    assert material(Board(), RED) == 0.0
    board = Board("3k5/9/9/4P4/9/9/9/9/9/4KR3 w - - 0 1")  # chariot and a crossed soldier
    assert material(board, RED) == 11.0 and material(board, BLACK) == -11.0


def test_random_player_is_legal_and_reproducible() -> None:
    board = Board()
    a = [RandomPlayer(seed=5).choose(board) for _ in range(3)]
    assert all(board.is_legal(m) for m in a)
    assert RandomPlayer(seed=5).choose(board) == a[0]


def test_greedy_player_prefers_the_biggest_capture() -> None:
    # Red chariot on e4 can take a Black soldier on e6 or the Black chariot on a4.
    board = Board("3k5/9/9/4p4/9/r3R4/9/9/9/5K3 w - - 0 1")
    assert GreedyPlayer().choose(board) == Move.from_iccs("e4a4")


def test_greedy_player_prefers_mate_to_material() -> None:
    # Rb1-b9 mates (Ra8 covers rank 8, the Red general faces d9); Rb1xh1 would win a chariot.
    board = Board("4k4/R8/9/9/9/9/9/9/1R5r1/3K5 w - - 0 1")
    assert GreedyPlayer().choose(board) == Move.from_iccs("b1b9")
    board.push_iccs("b1b9")
    assert board.is_checkmate()



def test_greedy_player_scores_a_stalemate_as_a_win() -> None:
    # a7a8 and f0f8 leave Black's general without a move but not in check (a loss in Xiangqi),
    # a7e7 mates; every other move only keeps the material
    board = Board("4k4/9/R8/9/9/9/9/9/9/3K1R3 w - - 0 1")
    greedy = GreedyPlayer()
    wins = {m.iccs() for m in board.legal_moves if greedy.score(board, m) == WIN_SCORE}
    assert wins == {"a7a8", "f0f8", "a7e7"}
    board.push_iccs("a7a8")
    assert board.is_stalemate()

def test_play_game_returns_a_replayable_game() -> None:
    result, moves = play_game(RandomPlayer(1), RandomPlayer(2), max_plies=60)
    board = Board()
    for m in moves:
        board.push_iccs(m)
    assert board.result() == result and len(moves) <= 60
    assert play_game(RandomPlayer(), RandomPlayer(), max_plies=0) == ("*", [])
    with pytest.raises(ValueError):
        play_game(RandomPlayer(), RandomPlayer(), max_plies=-1)


def test_play_game_from_a_board_returns_only_the_moves_it_played() -> None:
    start = Board()
    start.push_iccs("h2e2")
    start.push_iccs("h9g7")
    result, moves = play_game(RandomPlayer(3), RandomPlayer(4), max_plies=10, board=start)
    assert len(moves) == 10 and moves[:2] != ["h2e2", "h9g7"]
    assert [m.iccs() for m in start.move_stack] == ["h2e2", "h9g7"]  # the board given is unchanged
    replay = start.copy()
    for m in moves:
        replay.push_iccs(m)
    assert replay.result() == result



class _Scripted:
    """Plays the given ICCS moves in order."""

    def __init__(self, moves: list[str]) -> None:
        self.moves = list(moves)

    def choose(self, board: Board) -> Move:
        return board.parse_iccs(self.moves.pop(0))


def test_play_game_from_a_board_counts_its_history_for_repetition() -> None:
    # The start position occurred twice in the board's history; the move played here makes it
    # a third time, so the game ends drawn at once instead of playing on.
    start = Board("5k2r/9/9/9/9/9/9/9/9/R2K5 w - - 0 1")
    for m in ("a0a1", "i9i8", "a1a0", "i8i9", "a0a1", "i9i8", "a1a0"):
        start.push_iccs(m)
    result, moves = play_game(_Scripted([]), _Scripted(["i8i9", "i9i8"]), max_plies=2,
                              board=start)
    assert (result, moves) == ("1/2-1/2", ["i8i9"])

def test_greedy_beats_random() -> None:
    score = 0.0
    for seed in (1, 2):
        result, _ = play_game(GreedyPlayer(seed), RandomPlayer(seed), max_plies=200)
        score += {"1-0": 1.0, "1/2-1/2": 0.5}.get(result, 0.0)
        result, _ = play_game(RandomPlayer(seed), GreedyPlayer(seed), max_plies=200)
        score += {"0-1": 1.0, "1/2-1/2": 0.5}.get(result, 0.0)
    assert score >= 3.0
