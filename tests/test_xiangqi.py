"""Rules, FEN, notation and error tests of the Xiangqi engine (apps/xiangqi)."""

from __future__ import annotations

import random

import pytest

from apps.xiangqi import (
    BLACK,
    CANNON,
    RED,
    STARTING_FEN,
    Board,
    IllegalMove,
    InvalidFen,
    InvalidMove,
    InvalidSquare,
    Move,
    Outcome,
    Piece,
    Termination,
    XiangqiError,
    parse_square,
    perft,
    square,
    square_name,
)
from decision.errors import DecisionInputError


def fen_of(pieces: dict[str, str], turn: str = "w", halfmove: int = 0) -> str:
    """A FEN from {square name: piece letter}, e.g. {"e0": "K", "e9": "k"}."""
    grid = [["" for _ in range(9)] for _ in range(10)]
    for name, symbol in pieces.items():
        sq = parse_square(name)
        grid[sq // 9][sq % 9] = symbol
    rows = []
    for rank in range(9, -1, -1):
        row, empty = "", 0
        for f in range(9):
            if grid[rank][f]:
                row += (str(empty) if empty else "") + grid[rank][f]
                empty = 0
            else:
                empty += 1
        rows.append(row + (str(empty) if empty else ""))
    return "/".join(rows) + f" {turn} - - {halfmove} 1"


def targets(board: Board, frm: str) -> set[str]:
    """Destination squares of the legal moves of the piece on ``frm``."""
    sq = parse_square(frm)
    return {square_name(m.to_square) for m in board.legal_moves if m.from_square == sq}


def legal(board: Board, iccs: str) -> bool:
    return board.is_legal(Move.from_iccs(iccs))


# --------------------------------------------------------------------------- squares and moves


def test_squares_and_iccs() -> None:
    assert square(0, 0) == 0 and square(8, 9) == 89
    assert square_name(parse_square("h2")) == "h2"
    m = Move.from_iccs("h2e2")
    assert (m.from_square, m.to_square) == (square(7, 2), square(4, 2))
    assert m.iccs() == "h2e2" and str(m) == "h2e2"
    assert Move.from_iccs("H2-E2") == m
    assert len({m, Move.from_iccs("h2e2")}) == 1


@pytest.mark.parametrize(
    "text",
    # a hyphen only between the two squares ("h2-e2"): elsewhere the text is malformed
    ["", "h2e", "j2e2", "h2e10", "a0a0", "h2 e2x", "e2-e", "h-2e2", "h2e2-", "--h2e2", "h2-e-2"],
)
def test_bad_move_text_raises(text: str) -> None:
    with pytest.raises(InvalidMove):
        Move.from_iccs(text)


def test_bad_square_raises() -> None:
    with pytest.raises(InvalidSquare):
        parse_square("j0")
    with pytest.raises(InvalidSquare):
        square(9, 0)
    board = Board()
    for bad in (-1, 90, "j0"):  # -1 once read as i9 (Python's negative index) in attackers()
        with pytest.raises(InvalidSquare):
            board.attackers(RED, bad)
        with pytest.raises(InvalidSquare):
            board.is_attacked_by(BLACK, bad)
        with pytest.raises(InvalidSquare):
            board.piece_at(bad)
    assert board.attackers(RED, "a1") == board.attackers(RED, 9) == [parse_square("a0")]


# --------------------------------------------------------------------------- perft


@pytest.mark.parametrize(("depth", "nodes"), [(1, 44), (2, 1_920), (3, 79_666)])
def test_perft_start(depth: int, nodes: int) -> None:
    board = Board()
    assert perft(board, depth) == nodes
    assert board.fen() == STARTING_FEN  # perft leaves the board untouched


@pytest.mark.slow
def test_perft_start_depth4() -> None:
    assert perft(Board(), 4) == 3_290_240


# --------------------------------------------------------------------------- the rules


def test_flying_general_pins_the_only_blocker() -> None:
    board = Board(fen_of({"e0": "K", "e1": "N", "e9": "k"}))
    assert targets(board, "e1") == set()  # every horse move opens the e file
    assert targets(board, "e0") == {"d0", "f0"}


def test_flying_general_forbids_stepping_onto_open_file() -> None:
    board = Board(fen_of({"e0": "K", "d9": "k", "a5": "R"}))
    assert not legal(board, "e0d0")
    assert legal(board, "e0f0")


def test_horse_leg_blocking() -> None:
    board = Board()
    assert targets(board, "b0") == {"a2", "c2"}  # b0-d1 blocked by the elephant on c0
    board = Board(fen_of({"e0": "K", "d9": "k", "e4": "N", "e5": "P", "d4": "p"}))
    # Leg e5 blocks d6/f6; leg d4 (an enemy soldier) blocks c5/c3; f4 is free.
    assert targets(board, "e4") == {"g5", "g3", "d2", "f2"}


def test_elephant_eye_and_river() -> None:
    board = Board()
    assert targets(board, "c0") == {"a2", "e2"}
    board = Board(fen_of({"e0": "K", "d9": "k", "c0": "B", "d1": "p"}))
    assert targets(board, "c0") == {"a2"}  # eye d1 is occupied
    board = Board(fen_of({"e0": "K", "d9": "k", "c4": "B"}))
    assert targets(board, "c4") == {"a2", "e2"}  # a6/e6 would cross the river
    board = Board(fen_of({"e0": "K", "d9": "k", "c5": "b"}, turn="b"))
    assert targets(board, "c5") == {"a7", "e7"}


def test_palace_confines_general_and_advisors() -> None:
    board = Board(fen_of({"d0": "K", "e1": "A", "f9": "k"}))
    assert targets(board, "d0") == {"d1", "e0"}  # c0 is outside the palace
    board = Board(fen_of({"d1": "K", "f9": "k"}))
    assert targets(board, "d1") == {"d0", "d2", "e1"}  # c1 is outside the palace
    board = Board(fen_of({"e1": "A", "e0": "K", "d9": "k"}))
    assert targets(board, "e1") == {"d0", "f0", "d2", "f2"}
    board = Board(fen_of({"d2": "A", "e0": "K", "d9": "k"}))
    assert targets(board, "d2") == {"e1"}  # c3 is outside the palace


def test_cannon_needs_exactly_one_screen() -> None:
    pieces = {"e0": "K", "d9": "k", "b2": "C", "b5": "P", "b7": "r", "b8": "n", "e2": "p"}
    board = Board(fen_of(pieces))
    t = targets(board, "b2")
    assert "b7" in t  # one screen (b5): capture
    assert "b8" not in t  # two screens
    assert "b5" not in t and "b6" not in t  # no capture of own piece, no slide past a screen
    assert {"b3", "b4", "b1", "b0", "a2", "c2", "d2"} <= t
    assert "e2" not in t  # a cannon cannot capture without a screen


def test_soldier_moves() -> None:
    board = Board(fen_of({"e0": "K", "d9": "k", "e3": "P", "c5": "P"}))
    assert targets(board, "e3") == {"e4"}  # before the river: forward only
    assert targets(board, "c5") == {"c6", "b5", "d5"}  # across: forward or sideways
    board = Board(fen_of({"d0": "K", "e9": "k", "i9": "P"}))
    assert targets(board, "i9") == {"h9"}  # last rank: only sideways, never back
    board = Board(fen_of({"e0": "K", "d9": "k", "e6": "p", "c4": "p"}, turn="b"))
    assert targets(board, "e6") == {"e5"}
    assert targets(board, "c4") == {"c3", "b4", "d4"}


def test_no_move_may_leave_own_general_in_check() -> None:
    # The Red chariot on e3 is pinned by the Black chariot on e8: it may only move along the file.
    board = Board(fen_of({"e0": "K", "f9": "k", "e3": "R", "e8": "r"}))
    assert targets(board, "e3") == {"e1", "e2", "e4", "e5", "e6", "e7", "e8"}
    # In check: only moves that answer it.
    board = Board(fen_of({"e0": "K", "f9": "k", "e8": "r", "a1": "R"}))
    assert board.is_check()
    # e0e1 stays on the file, e0f0 would face the Black general on f9.
    assert {m.iccs() for m in board.legal_moves} == {"e0d0", "a1e1"}
    # A horse check (d2 -> e0, leg d1) is answered by blocking the leg too.
    board = Board(fen_of({"e0": "K", "f9": "k", "d2": "n", "a1": "R"}))
    assert board.is_check()
    moves = {m.iccs() for m in board.legal_moves}
    assert "a1d1" in moves and "a1b1" not in moves and "e0e1" in moves


def test_cannon_screen_created_by_own_move_is_illegal() -> None:
    # Black cannon on e7 and Red general on e0: putting a Red piece on the file gives it a screen.
    board = Board(fen_of({"e0": "K", "d9": "k", "e7": "c", "a4": "R", "e4": "P"}))
    assert board.is_check()  # e4 is already a screen
    board = Board(fen_of({"e0": "K", "d9": "k", "e7": "c", "a4": "R"}))
    assert not board.is_check()
    assert not legal(board, "a4e4")


def test_checkmate_is_a_loss_for_the_side_to_move() -> None:
    board = Board("R3k4/R8/9/9/9/9/9/9/9/3K5 b - - 0 1")
    assert board.is_check() and board.is_checkmate() and not board.is_stalemate()
    assert board.legal_moves == []
    assert board.outcome() == Outcome(Termination.CHECKMATE, RED)
    assert board.result() == "1-0"


def test_stalemate_is_a_loss_for_the_side_to_move() -> None:
    # Black general e9 not in check; d9 faces the Red general, f9 and e8 are covered.
    board = Board("4k4/R8/9/9/9/9/9/9/9/3K1R3 b - - 0 1")
    assert not board.is_check()
    assert board.is_stalemate() and not board.is_checkmate()
    assert board.outcome() == Outcome(Termination.STALEMATE, RED)
    assert board.result() == "1-0"
    # reached by a move, and undone
    board = Board("4k4/9/R8/9/9/9/9/9/9/3K1R3 w - - 0 1")
    assert board.outcome() is None
    board.push_iccs("a7a8")
    assert not board.is_check() and board.outcome() == Outcome(Termination.STALEMATE, RED)
    board.pop()
    assert board.outcome() is None


# Red's chariot checks on ranks 9 and 8 while Black's general steps e9-e8-e9; and the mirror.
PERPETUAL_RED = ("4k4/R8/9/9/9/9/9/9/9/3K5 w - - 0 1", ["a8a9", "e9e8", "a9a8", "e8e9"], BLACK)
PERPETUAL_BLACK = ("5k3/9/9/9/9/9/9/9/r8/4K4 b - - 0 1", ["a1a0", "e0e1", "a0a1", "e1e0"], RED)


@pytest.mark.parametrize(("fen", "cycle", "winner"), [PERPETUAL_RED, PERPETUAL_BLACK])
def test_perpetual_check_loses(fen: str, cycle: list[str], winner: bool) -> None:
    board = Board(fen)
    for i, m in enumerate(cycle * 2):  # the start position occurs a third time at the end
        assert board.outcome() is None, f"game ended early at ply {i}"
        board.push_iccs(m)
    assert board.repetition_count() == 3
    assert board.outcome() == Outcome(Termination.REPETITION, winner)
    assert board.result() == ("1-0" if winner == RED else "0-1")



def test_a_quiet_first_move_of_the_cycle_is_no_perpetual_check() -> None:
    # The window of a threefold repetition starts at the first occurrence: Red's first move in it
    # (a8a7) gives no check, so Red did not check on every move and the repetition is a draw.
    # Both cycles return to the start; only the first move differs from a perpetual check.
    board = Board(PERPETUAL_RED[0])
    moves = ["a8a7", "e9e8", "a7a8", "e8e9", "a8a9", "e9e8", "a9a8", "e8e9"]
    for i, m in enumerate(moves):
        assert board.outcome() is None, f"game ended early at ply {i}"
        board.push_iccs(m)
    assert board.repetition_count() == 3
    assert board._gave_check == [False, False, True, False, True, False, True, False]
    assert board.outcome() == Outcome(Termination.DRAW_REPETITION, None)


def test_perpetual_check_on_the_120th_ply_still_loses() -> None:
    # The third occurrence and the no-capture limit fall on the same ply: repetition is judged
    # first (Board.outcome's order), so the perpetual checker loses rather than drawing.
    fen, cycle, winner = PERPETUAL_RED
    board = Board(fen.replace(" 0 1", " 112 1"))
    for m in cycle * 2:
        assert board.outcome() is None
        board.push_iccs(m)
    assert board.halfmove_clock == 120 and board.repetition_count() == 3
    assert board.outcome() == Outcome(Termination.REPETITION, winner)

def test_mutual_perpetual_check_is_a_draw() -> None:
    # Every move checks: each rook or cannon move discovers a check while parrying one.
    board = Board("5k3/4r4/9/9/4c4/4R4/9/R4C3/9/4K4 w - - 0 1")
    for m in ["e4f4", "e5f5", "f4e4", "f5e5"] * 2:
        assert board.outcome() is None
        board.push_iccs(m)
        assert board.is_check()
    assert board.outcome() == Outcome(Termination.DRAW_REPETITION, None)


def test_threefold_repetition_without_checks_is_a_draw() -> None:
    board = Board(fen_of({"d0": "K", "a0": "R", "f9": "k", "i9": "r"}))
    for _ in range(2):
        for m in ("a0a1", "i9i8", "a1a0", "i8i9"):
            assert board.outcome() is None
            board.push_iccs(m)
    assert board.is_repetition(3)
    assert board.outcome() == Outcome(Termination.DRAW_REPETITION, None)
    assert board.result() == "1/2-1/2"
    board.pop()
    assert board.outcome() is None and board.repetition_count() == 2


def test_a_repeated_position_is_seen_from_its_second_occurrence_until_a_capture() -> None:
    board = Board(fen_of({"d0": "K", "a0": "R", "f9": "k", "i9": "r"}))
    seen = []
    for m in ("a0a1", "i9i8", "a1a0", "i8i9", "a0a1", "i9i8"):
        board.push_iccs(m)
        seen.append(board.has_repeated_position())
    # the start position's second occurrence is at ply 4 (with the same side to move)
    assert seen == [False, False, False, True, True, True]
    board.push_iccs("a1a8")  # a new position; the history still holds the repeat
    board.push_iccs("f9e9")
    assert board.has_repeated_position()
    board.push_iccs("a8i8")  # takes the black chariot: no earlier position can come back
    assert not board.has_repeated_position()
    board.pop()
    assert board.has_repeated_position()


def test_repetition_needs_the_same_side_to_move() -> None:
    # Chariot a0-a1-a2-a0 by Red while Black shuffles between two squares: the placement
    # repeats with different sides to move, which must not count.
    board = Board(fen_of({"d0": "K", "a0": "R", "f9": "k", "i9": "r"}))
    for m in ("a0a1", "i9i8", "a1a2", "i8i9", "a2a0"):
        board.push_iccs(m)
    assert board.repetition_count() == 1


def test_120_plies_without_capture_is_a_draw() -> None:
    board = Board(fen_of({"d0": "K", "a0": "R", "f9": "k", "i9": "r"}, halfmove=119))
    board.push_iccs("a0a1")
    assert board.halfmove_clock == 120
    assert board.outcome() == Outcome(Termination.NO_CAPTURE_120, None)
    assert board.result() == "1/2-1/2"
    board = Board(fen_of({"d0": "K", "a0": "R", "f9": "k", "a5": "r"}, halfmove=119))
    board.push_iccs("a0a5")  # a capture resets the count
    assert board.halfmove_clock == 0 and board.outcome() is None


def test_halfmove_clock_counts_from_the_last_capture() -> None:
    board = Board()
    for m in ("h2e2", "h9g7", "e2e6"):
        board.push_iccs(m)
    assert board.halfmove_clock == 0  # e2e6 captured a soldier
    board.push_iccs("i9h9")
    assert board.halfmove_clock == 1 and board.fullmove_number == 3



def test_move_number_grows_after_blacks_move_only() -> None:
    board = Board()
    board.push_iccs("h2e2")
    assert board.fullmove_number == 1 and board.fen().endswith(" b - - 1 1")
    board.push_iccs("h9g7")
    assert board.fullmove_number == 2 and board.fen().endswith(" w - - 2 2")
    board.push_iccs("h0g2")
    assert board.fullmove_number == 2 and board.fen().endswith(" b - - 3 2")
    board.pop()
    board.pop()
    assert board.fen().endswith(" b - - 1 1")


@pytest.mark.parametrize(
    ("pieces", "check"),
    [
        ({"e0": "K", "d9": "k", "e1": "p"}, True),  # a Black soldier in front of the general
        ({"e0": "K", "d9": "k", "d0": "p"}, True),  # beside it (Black's soldier crossed)
        ({"e1": "K", "d9": "k", "f1": "p"}, True),
        ({"e1": "K", "d9": "k", "e0": "p"}, False),  # soldiers never attack backward
        ({"e1": "K", "d9": "k", "f2": "p"}, False),  # nor diagonally
    ],
)
def test_black_soldiers_check_the_red_general(pieces: dict[str, str], check: bool) -> None:
    board = Board(fen_of(pieces))
    assert board.is_check() == check
    if check:  # the general must answer it: capture the soldier or step away
        assert all(m.from_square == board.king(RED) for m in board.legal_moves)

# --------------------------------------------------------------------------- FEN


def test_starting_position() -> None:
    board = Board()
    assert board.fen() == STARTING_FEN and board.turn == RED
    assert board.piece_at(parse_square("e0")) == Piece.from_symbol("K")
    assert board.piece_at("b7") == Piece(CANNON, BLACK)
    assert board.piece_at("e5") is None
    assert not board.is_check() and board.outcome() is None and board.result() == "*"


@pytest.mark.parametrize("symbol", ["\u212a", "KK", "", "x"])
def test_piece_from_symbol_takes_one_ascii_letter(symbol: str) -> None:
    with pytest.raises(ValueError, match="not a Xiangqi piece letter"):
        Piece.from_symbol(symbol)


@pytest.mark.parametrize(
    "fen",
    [
        STARTING_FEN,
        "R3k4/R8/9/9/9/9/9/9/9/3K5 b - - 0 1",
        "2bakab2/9/2n1c1n2/p1p1p1p1p/9/2P6/P3P1P1P/1C2C4/9/RNBAKABNR b - - 7 12",
    ],
)
def test_fen_round_trip(fen: str) -> None:
    assert Board(fen).fen() == fen


def test_fen_round_trip_along_random_games() -> None:
    rng = random.Random(11)
    for _ in range(3):
        board = Board()
        for _ in range(80):
            moves = board.legal_moves
            if not moves:
                break
            board.push(rng.choice(moves))
            again = Board(board.fen())
            assert again.fen() == board.fen()
            assert again.legal_moves == board.legal_moves
            assert again.is_check() == board.is_check()


def test_fen_reads_aliases_and_short_forms() -> None:
    alias = "rheakaehr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RHEAKAEHR w - - 0 1"
    assert Board(alias).fen() == STARTING_FEN
    assert Board(STARTING_FEN.split()[0] + " b").turn == BLACK
    # five fields: the halfmove clock is read, the move number defaults to 1
    five = Board(STARTING_FEN.split()[0] + " b - - 17")
    assert (five.halfmove_clock, five.fullmove_number) == (17, 1)
    assert five.fen() == STARTING_FEN.split()[0] + " b - - 17 1"


@pytest.mark.parametrize(
    ("fen", "why"),
    [
        ("rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/RNBAKABNR w - - 0 1", "10 ranks"),
        ("rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RNBAKABNR x - - 0 1", "side"),
        ("rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RNBAKABNRR w - - 0 1", "files"),
        ("rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RNBAKABN w - - 0 1", "8 files"),
        ("rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RNBAKABNQ w - - 0 1", "letter"),
        ("rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RNBA1ABNR w - - 0 1", "general"),
        ("rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/4K4/RNBAKABNR w - - 0 1", "general"),
        ("4k4/9/9/9/9/9/9/9/9/4K4 w - - 0 1", "face each other"),
        ("9/4k4/9/9/9/9/9/9/9/4K4 b - - 0 1", "face each other"),  # Black's off its back rank
        ("3k5/9/9/9/9/9/9/9/9/K8 w - - 0 1", "never reach"),
        ("3k5/9/9/9/9/9/9/9/9/3KR4 w - - 0 1", "face each other"),
        ("3k5/9/9/9/9/3R5/9/9/9/4K4 w - - 0 1", "black is in check but it is red's turn"),
        ("3k5/9/9/9/2B6/9/9/9/9/4K4 w - - 0 1", "never reach"),
        ("3k5/9/9/9/9/9/9/9/P8/4K4 w - - 0 1", "never reach"),
        ("3k5/9/9/9/9/9/9/9/9/4K4 w - - -1 1", "halfmove"),
        ("3k5/9/9/9/9/9/9/9/9/4K4 w - - 0 0", "move number"),
        ("RRR1k4/9/9/9/9/9/9/9/9/3K5 b - - 0 1", "at most 2"),
        ("3k5", "fields"),
        ("", "fields"),
        # digits other than ASCII 1-9 (str.isdigit() accepts '\u00b2' and '\u0663')
        ("rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RNBAKABN\u00b2 w", "empty points"),
        ("rnbakabnr/9/1c5c1/p1p1p1p1p/09/9/P1P1P1P1P/1C5C1/9/RNBAKABNR w", "empty points"),
        ("3k5/9/9/9/9/9/9/9/9/4K4 w - - 0 \u0663", "move number"),
        # letters other than ASCII ones ("\u212a".lower() is "k": read as the Red general)
        ("rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RNBA\u212aABNR w", "letter"),
        # past Python's 4300-digit int() limit: once a bare ValueError, not InvalidFen
        ("3k5/9/9/9/9/9/9/9/9/4K4 w - - 0 " + "1" * 5000, "at most 9 digits"),
        ("3k5/9/9/9/9/9/9/9/9/4K4 w - - " + "9" * 4301 + " 1", "halfmove clock"),
        ("3k5/9/9/9/9/9/9/9/9/4K4 w - - 0 1234567890", "move number"),
        # counters written where the two unused '-' belong were once silently read as "0 1"
        ("3k5/9/9/9/9/9/9/9/9/4K4 w 5 10", "fields 3 and 4 .* must be '-'"),
        ("3k5/9/9/9/9/9/9/9/9/4K4 w - x 0 1", "must be '-', got 'x'"),
    ],
)
def test_invalid_fen_raises(fen: str, why: str) -> None:
    with pytest.raises(InvalidFen, match=why) as info:
        Board(fen)
    assert isinstance(info.value, XiangqiError) and isinstance(info.value, ValueError)
    assert isinstance(info.value, DecisionInputError) and info.value.field == "fen"


def test_non_strict_accepts_unreachable_placements() -> None:
    fen = "rnb1kabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RNBAKAaNR w - - 0 1"
    with pytest.raises(InvalidFen, match="advisor on g0"):
        Board(fen)
    board = Board(fen, strict=False)
    assert board.fen() == fen and len(board.legal_moves) > 0
    with pytest.raises(InvalidFen, match="general"):  # generals are always checked
        Board("4k4/9/9/9/9/9/9/9/9/K8 w - - 0 1", strict=False)


# --------------------------------------------------------------------------- WXF


@pytest.mark.parametrize(
    ("moves", "expected"),
    [
        ([], {"h2e2": "C2=5", "h0g2": "H2+3", "c3c4": "P7+1", "a0a1": "R9+1", "d0e1": "A6+5",
              "g0e2": "E3+5", "e0e1": "K5+1", "b2b9": "C8+7", "h2h1": "C2-1"}),
        (["h2e2"], {"b9c7": "H2+3", "h7e7": "C8=5", "c9e7": "E3+5", "i9i8": "R9+1",
                    "g6g5": "P7+1", "b7b0": "C2+7"}),
    ],
)
def test_wxf_known_moves(moves: list[str], expected: dict[str, str]) -> None:
    board = Board()
    for m in moves:
        board.push_iccs(m)
    for iccs, wxf in expected.items():
        assert board.wxf(Move.from_iccs(iccs)) == wxf, iccs


def test_wxf_tandem_pieces() -> None:
    board = Board(fen_of({"e0": "K", "f9": "k", "d3": "R", "d6": "R"}))
    assert board.wxf(Move.from_iccs("d6b6")) == "R+=8"
    assert board.wxf(Move.from_iccs("d3d2")) == "R--1"
    assert board.wxf(Move.from_iccs("d6d8")) == "R++2"
    black = Board(fen_of({"e0": "K", "f9": "k", "b4": "c", "b7": "c"}, turn="b"))
    assert black.wxf(Move.from_iccs("b4e4")) == "C+=5"  # front for Black = lower rank
    assert black.wxf(Move.from_iccs("b7b8")) == "C--1"
    # Elephants keep their file digit (WXF: never ambiguous).
    board = Board(fen_of({"e0": "K", "f9": "k", "c0": "B", "c4": "B"}))
    assert board.wxf(Move.from_iccs("c0e2")) == "E7+5"
    assert board.wxf(Move.from_iccs("c4e2")) == "E7-5"


def test_wxf_tandem_soldiers() -> None:
    three = Board(fen_of({"e0": "K", "d9": "k", "g5": "P", "g6": "P", "g7": "P"}))
    assert three.wxf(Move.from_iccs("g7f7")) == "P+=4"
    assert three.wxf(Move.from_iccs("g6f6")) == "P3=4"
    assert three.wxf(Move.from_iccs("g5f5")) == "P-=4"
    five = {"e0": "K", "d9": "k", "g5": "P", "g6": "P", "g7": "P", "g8": "P", "g9": "P"}
    board = Board(fen_of(five))
    assert [board.wxf(Move.from_iccs(f"g{r}f{r}")) for r in (9, 8, 7, 6, 5)] == [
        "++=4", "P+=4", "P3=4", "P-=4", "--=4"
    ]
    two_files = {"e0": "K", "f9": "k", "g5": "P", "g6": "P", "g7": "P", "c5": "P", "c6": "P"}
    board = Board(fen_of(two_files))
    assert board.wxf(Move.from_iccs("g7f7")) == "3+=4"
    assert board.wxf(Move.from_iccs("g6f6")) == "33=4"
    assert board.wxf(Move.from_iccs("c5d5")) == "7-=6"


def test_wxf_three_of_a_kind_on_a_file_in_a_non_strict_diagram() -> None:
    # Three chariots on the a-file: the middle one is neither front nor rear, so it keeps its
    # file digit (as WXF writes the middle of three tandem soldiers) and every text reads back.
    board = Board(fen_of({"e0": "K", "d9": "k", "a0": "R", "a2": "R", "a5": "R"}), strict=False)
    assert [board.wxf(Move.from_iccs(f"a{r}b{r}")) for r in (5, 2, 0)] == [
        "R+=8", "R9=8", "R-=8"
    ]
    texts = [board.wxf(m) for m in board.legal_moves]
    assert len(set(texts)) == len(texts)
    for m, t in zip(board.legal_moves, texts, strict=True):
        assert board.parse_wxf(t) == m
    # Six soldiers on a file are beyond WXF: their shared text is refused, not guessed.
    six = {"e0": "K", "d9": "k"} | {f"a{r}": "P" for r in range(3, 9)}
    board = Board(fen_of(six), strict=False)
    with pytest.raises(IllegalMove, match="ambiguous"):
        board.parse_wxf("P9=8")


def test_wxf_is_unique_and_parses_back_along_random_games() -> None:
    rng = random.Random(3)
    for _ in range(3):
        board = Board()
        for _ in range(100):
            moves = board.legal_moves
            if not moves:
                break
            texts = [board.wxf(m) for m in moves]
            assert len(set(texts)) == len(texts), board.fen()
            for m, t in rng.sample(list(zip(moves, texts, strict=True)), min(2, len(moves))):
                assert board.parse_wxf(t) == m
            board.push(rng.choice(moves))


def test_parse_wxf_aliases_and_errors() -> None:
    board = Board()
    assert board.parse_wxf("C2.5") == Move.from_iccs("h2e2")
    assert board.parse_wxf("n2+3") == Move.from_iccs("h0g2")
    assert board.parse_wxf("B3+5") == Move.from_iccs("g0e2")
    with pytest.raises(IllegalMove, match="not a legal WXF move"):
        board.parse_wxf("C2+9")


def test_wxf_rejects_illegal_move() -> None:
    with pytest.raises(IllegalMove):
        Board().wxf(Move.from_iccs("h2h8"))


# --------------------------------------------------------------------------- push / pop / errors


def _state(board: Board) -> tuple[object, ...]:
    return (
        board.fen(),
        board.zobrist_hash(),
        list(board.move_stack),
        list(board._hashes),
        list(board._gave_check),
        [m.iccs() for m in board.legal_moves],
        board.king(RED),
        board.king(BLACK),
    )


def test_pop_restores_the_exact_state() -> None:
    rng = random.Random(7)
    board = Board()
    states = [_state(board)]
    n_captures = 0
    for _ in range(120):
        moves = board.legal_moves
        if not moves:
            break
        captures = [m for m in moves if board.piece_at(m.to_square)]
        take = bool(captures) and rng.random() < 0.5
        board.push(rng.choice(captures) if take else rng.choice(moves))
        n_captures += take
        states.append(_state(board))
        # The incremental hash equals the hash of the same position built from its FEN.
        assert board.zobrist_hash() == Board(board.fen(), strict=False).zobrist_hash()
    assert n_captures >= 5  # the walk exercised captures (and their undo)
    while board.move_stack:
        states.pop()
        board.pop()
        assert _state(board) == states[-1]
    with pytest.raises(IndexError):
        board.pop()


def test_copy_is_independent() -> None:
    board = Board()
    board.push_iccs("h2e2")
    other = board.copy()
    other.push_iccs("h9g7")
    assert len(board.move_stack) == 1 and len(other.move_stack) == 2
    assert board.fen() != other.fen()
    assert board.copy(stack=False).move_stack == []


def test_illegal_moves_raise_with_the_legal_moves() -> None:
    board = Board()
    for text, why in [
        ("h2h8", "cannot move"),
        ("e5e6", "no piece"),
        ("h7h0", "not red's"),
        ("b0d1", "cannot move"),
    ]:
        with pytest.raises(IllegalMove, match=why) as info:
            board.push_iccs(text)
        err = info.value
        assert err.move == Move.from_iccs(text) and err.field == "move"
        assert err.legal_moves == board.legal_moves and len(err.legal_moves) == 44
        assert isinstance(err, XiangqiError) and isinstance(err, ValueError)
    pinned = Board(fen_of({"e0": "K", "e1": "N", "e9": "k"}))
    with pytest.raises(IllegalMove, match="general in check or facing"):
        pinned.push(Move.from_iccs("e1d3"))
    assert board.fen() == STARTING_FEN  # failed pushes change nothing
    with pytest.raises(InvalidMove):
        board.push_iccs("nonsense")


def test_gives_check_and_is_check_agree() -> None:
    # The Red soldier on e7 becomes the screen of a cannon arriving on e4.
    board = Board(fen_of({"d0": "K", "e9": "k", "e7": "P", "a4": "C"}))
    assert board.gives_check(Move.from_iccs("a4e4"))
    assert not board.gives_check(Move.from_iccs("a4b4"))
    board.push_iccs("a4e4")
    assert board.is_check() and board._gave_check[-1]
