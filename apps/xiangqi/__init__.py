"""A Xiangqi (Chinese chess) rules engine with a python-chess-like API.

>>> board = Board()
>>> board.push_iccs("h2e2")
Move.from_iccs('h2e2')
>>> board.fen()
'rnbakabnr/9/1c5c1/p1p1p1p1p/9/9/P1P1P1P1P/1C2C4/9/RNBAKABNR b - - 1 1'

See docs/xiangqi.md for the rules as implemented and the notation.
"""

from apps.xiangqi.board import NO_CAPTURE_LIMIT, Board
from apps.xiangqi.core import (
    ADVISOR,
    BLACK,
    CANNON,
    CHARIOT,
    ELEPHANT,
    GENERAL,
    HORSE,
    PIECE_TYPES,
    RED,
    SOLDIER,
    SQUARE_NAMES,
    SQUARES,
    Color,
    Move,
    Piece,
    PieceType,
    parse_square,
    square,
    square_file,
    square_name,
    square_rank,
)
from apps.xiangqi.errors import IllegalMove, InvalidFen, InvalidMove, InvalidSquare, XiangqiError
from apps.xiangqi.fen import STARTING_FEN
from apps.xiangqi.outcome import Outcome, Termination
from apps.xiangqi.perft import divide, perft

__all__ = [
    "ADVISOR",
    "BLACK",
    "CANNON",
    "CHARIOT",
    "ELEPHANT",
    "GENERAL",
    "HORSE",
    "NO_CAPTURE_LIMIT",
    "PIECE_TYPES",
    "RED",
    "SOLDIER",
    "SQUARES",
    "SQUARE_NAMES",
    "STARTING_FEN",
    "Board",
    "Color",
    "IllegalMove",
    "InvalidFen",
    "InvalidMove",
    "InvalidSquare",
    "Move",
    "Outcome",
    "Piece",
    "PieceType",
    "Termination",
    "XiangqiError",
    "divide",
    "parse_square",
    "perft",
    "square",
    "square_file",
    "square_name",
    "square_rank",
]
