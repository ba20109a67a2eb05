"""Reading and writing FEN in the Pikafish form.

``rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RNBAKABNR w - - 0 1``: ranks from Black's back
rank (rank 9) down to Red's (rank 0), each listing files a-i; upper case is Red; ``w`` = Red to
move, ``b`` = Black; then two unused ``-`` fields, the plies since the last capture and the move
number. Elephant and horse are written ``B``/``N`` and also read as ``E``/``H``.
"""

from __future__ import annotations

from dataclasses import dataclass

from apps.xiangqi.core import (
    ADVISOR,
    CANNON,
    CHARIOT,
    ELEPHANT,
    GENERAL,
    HORSE,
    PIECE_NAMES,
    PIECE_SYMBOLS,
    SOLDIER,
    SQUARE_NAMES,
    SYMBOL_TYPES,
)
from apps.xiangqi.errors import InvalidFen
from apps.xiangqi.tables import ADVISOR_POINTS, ELEPHANT_POINTS, PALACE_POINTS, SOLDIER_POINTS

STARTING_FEN = "rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C5C1/9/RNBAKABNR w - - 0 1"
COUNTER_DIGITS = 9  # the most digits of the halfmove clock and the move number
MAX_COUNTS = {GENERAL: 1, ADVISOR: 2, ELEPHANT: 2, HORSE: 2, CHARIOT: 2, CANNON: 2, SOLDIER: 5}


@dataclass
class FenFields:
    """The parsed content of a FEN: board codes (90, signed), side to move and counters."""

    board: list[int]
    red_to_move: bool
    halfmove_clock: int
    fullmove_number: int


def parse_fen(fen: str, strict: bool = True) -> FenFields:
    """Parse and validate a FEN; raises :class:`InvalidFen` saying what is wrong.

    Always checks the layout, piece letters, and one general per side inside its palace. With
    ``strict`` also the piece counts and that each piece stands on a point it can ever reach
    (advisors on the palace diagonals, elephants on their seven points, soldiers never behind
    their start). Check-related rules (facing generals, side not to move in check) are verified
    by :class:`~apps.xiangqi.board.Board`, which has the attack detection.
    """
    if not isinstance(fen, str):
        raise InvalidFen(f"FEN must be a string, got {type(fen).__name__}")
    parts = fen.split()
    if not 2 <= len(parts) <= 6:
        raise InvalidFen(
            f"FEN needs 2 to 6 space-separated fields (placement, side, -, -, halfmove, move), "
            f"got {len(parts)}: {fen!r}"
        )
    board = _parse_placement(parts[0])
    side = parts[1]
    if side not in ("w", "b"):
        raise InvalidFen(f"side to move must be 'w' (Red) or 'b' (Black), got {side!r}")
    for unused in parts[2:4]:
        if unused != "-":
            # e.g. "w 5 10": the counters written in the unused fields would be silently lost
            raise InvalidFen(
                f"fields 3 and 4 (after the side to move) must be '-', got {unused[:20]!r}: "
                "the counters come after them ('w - - 0 1')"
            )
    halfmove = _parse_counter(parts[4], "halfmove clock", 0) if len(parts) > 4 else 0
    fullmove = _parse_counter(parts[5], "move number", 1) if len(parts) > 5 else 1
    _validate_pieces(board, strict)
    return FenFields(board, side == "w", halfmove, fullmove)


def _parse_counter(text: str, name: str, minimum: int) -> int:
    # ASCII digits only: str.isdigit() also accepts e.g. '²' and '٣', which int() refuses or reads
    shown = text if len(text) <= 20 else f"{text[:20]}... ({len(text)} characters)"
    if not (text.isascii() and text.isdigit()):
        raise InvalidFen(f"{name} must be an integer >= {minimum}, got {shown!r}")
    # a bound well past any game, so int() never meets Python's 4300-digit conversion limit
    if len(text) > COUNTER_DIGITS:
        raise InvalidFen(
            f"{name} must be an integer of at most {COUNTER_DIGITS} digits, got {shown!r}"
        )
    value = int(text)
    if value < minimum:
        raise InvalidFen(f"{name} must be an integer >= {minimum}, got {shown!r}")
    return value


def _parse_placement(placement: str) -> list[int]:
    rows = placement.split("/")
    if len(rows) != 10:
        raise InvalidFen(f"board needs 10 ranks separated by '/', got {len(rows)}")
    board = [0] * 90
    for i, row in enumerate(rows):
        rank = 9 - i
        f = 0
        for ch in row:
            if ch in "123456789":  # a run of empty points (ASCII, never 0)
                f += int(ch)
            elif ch.isdigit():
                raise InvalidFen(
                    f"rank {rank} ({row!r}): {ch!r} is not a run of 1 to 9 empty points"
                )
            else:
                # ASCII only: str.lower() takes the Kelvin sign U+212A to "k"
                piece_type = SYMBOL_TYPES.get(ch.lower()) if ch.isascii() else None
                if piece_type is None:
                    raise InvalidFen(
                        f"unknown piece letter {ch!r} on rank {rank} "
                        "(expected one of KABENHRCP, upper case Red, lower case Black)"
                    )
                if f >= 9:
                    raise InvalidFen(f"rank {rank} ({row!r}) has more than 9 files")
                board[rank * 9 + f] = piece_type if ch.isupper() else -piece_type
                f += 1
        if f != 9:
            raise InvalidFen(f"rank {rank} ({row!r}) covers {f} files, expected 9")
    return board


def _validate_pieces(board: list[int], strict: bool) -> None:
    counts: dict[int, int] = {}
    for sq, code in enumerate(board):
        if not code:
            continue
        counts[code] = counts.get(code, 0) + 1
        red = code > 0
        piece_type = abs(code)
        if not strict and piece_type != GENERAL:
            continue
        zone = {
            GENERAL: PALACE_POINTS,
            ADVISOR: ADVISOR_POINTS,
            ELEPHANT: ELEPHANT_POINTS,
            SOLDIER: SOLDIER_POINTS,
        }.get(piece_type)
        if zone is not None and sq not in zone[red]:
            side = "Red" if red else "Black"
            raise InvalidFen(
                f"{side} {PIECE_NAMES[piece_type]} on {SQUARE_NAMES[sq]} is on a point it can "
                "never reach"
            )
    for red in (True, False):
        side = "Red" if red else "Black"
        for piece_type, most in MAX_COUNTS.items():
            n = counts.get(piece_type if red else -piece_type, 0)
            if piece_type == GENERAL and n != 1:
                raise InvalidFen(f"{side} must have exactly one general, found {n}")
            if strict and n > most:
                raise InvalidFen(
                    f"{side} has {n} {PIECE_NAMES[piece_type]}s, at most {most} allowed"
                )


def board_fen(board: list[int]) -> str:
    """The placement field of a FEN for 90 signed board codes."""
    rows = []
    for rank in range(9, -1, -1):
        row = ""
        empty = 0
        for f in range(9):
            code = board[rank * 9 + f]
            if not code:
                empty += 1
                continue
            if empty:
                row += str(empty)
                empty = 0
            s = PIECE_SYMBOLS[abs(code)]
            row += s.upper() if code > 0 else s
        if empty:
            row += str(empty)
        rows.append(row)
    return "/".join(rows)
