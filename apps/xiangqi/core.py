"""Basic Xiangqi types: colours, piece types, squares, :class:`Piece` and :class:`Move`.

Squares are integers ``rank * 9 + file``: files a-i are 0-8 from Red's left to right, ranks 0-9
from Red's side, so ``a0`` = 0 (Red's left chariot) and ``i9`` = 89 (Black's chariot on Red's
right). Piece codes on the board are signed integers: positive for Red, negative for Black.
"""

from __future__ import annotations

from typing import TypeAlias

from apps.xiangqi.errors import InvalidMove, InvalidSquare

Color: TypeAlias = bool
RED: Color = True
BLACK: Color = False
COLOR_NAMES: dict[bool, str] = {RED: "red", BLACK: "black"}

PieceType: TypeAlias = int
GENERAL, ADVISOR, ELEPHANT, HORSE, CHARIOT, CANNON, SOLDIER = range(1, 8)
PIECE_TYPES: tuple[int, ...] = (GENERAL, ADVISOR, ELEPHANT, HORSE, CHARIOT, CANNON, SOLDIER)
PIECE_NAMES: dict[int, str] = {
    GENERAL: "general",
    ADVISOR: "advisor",
    ELEPHANT: "elephant",
    HORSE: "horse",
    CHARIOT: "chariot",
    CANNON: "cannon",
    SOLDIER: "soldier",
}
# FEN letters as Pikafish writes them (upper case = Red). ``E``/``H`` are read as aliases.
PIECE_SYMBOLS: dict[int, str] = {
    GENERAL: "k",
    ADVISOR: "a",
    ELEPHANT: "b",
    HORSE: "n",
    CHARIOT: "r",
    CANNON: "c",
    SOLDIER: "p",
}
SYMBOL_TYPES: dict[str, int] = {s: t for t, s in PIECE_SYMBOLS.items()} | {
    "e": ELEPHANT,
    "h": HORSE,
}

FILE_NAMES = "abcdefghi"
RANK_NAMES = "0123456789"
SQUARES: range = range(90)
SQUARE_NAMES: list[str] = [f + r for r in RANK_NAMES for f in FILE_NAMES]
_SQUARE_INDEX: dict[str, int] = {name: i for i, name in enumerate(SQUARE_NAMES)}


def square(file_index: int, rank_index: int) -> int:
    """The square index of a file (0-8) and rank (0-9)."""
    if not (0 <= file_index < 9 and 0 <= rank_index < 10):
        raise InvalidSquare(f"no square at file {file_index}, rank {rank_index}")
    return rank_index * 9 + file_index


def square_file(sq: int) -> int:
    """File index 0-8 (a-i) of a square."""
    return sq % 9


def square_rank(sq: int) -> int:
    """Rank index 0-9 of a square (0 = Red's back rank)."""
    return sq // 9


def square_name(sq: int) -> str:
    """ICCS name of a square, e.g. ``h2``."""
    if not 0 <= sq < 90:
        raise InvalidSquare(f"square index {sq} is outside 0-89")
    return SQUARE_NAMES[sq]


def parse_square(name: str) -> int:
    """Square index of an ICCS square name (``h2``; upper case accepted)."""
    sq = _SQUARE_INDEX.get(name.lower()) if isinstance(name, str) else None
    if sq is None:
        raise InvalidSquare(f"{name!r} is not a square: expected a file a-i then a rank 0-9")
    return sq


class Piece:
    """A piece: its type (``GENERAL`` .. ``SOLDIER``) and colour (``RED``/``BLACK``)."""

    __slots__ = ("piece_type", "color")

    def __init__(self, piece_type: PieceType, color: Color) -> None:
        self.piece_type = piece_type
        self.color = color

    @classmethod
    def from_code(cls, code: int) -> Piece:
        """The piece of a signed board code (positive = Red)."""
        return cls(abs(code), code > 0)

    @classmethod
    def from_symbol(cls, symbol: str) -> Piece:
        """The piece of a FEN letter (``R`` = Red chariot, ``n``/``h`` = Black horse)."""
        # ASCII only: str.lower() takes the Kelvin sign U+212A to "k"
        piece_type = SYMBOL_TYPES.get(symbol.lower()) if symbol.isascii() else None
        if piece_type is None or len(symbol) != 1:
            raise ValueError(f"{symbol!r} is not a Xiangqi piece letter")
        return cls(piece_type, symbol.isupper())

    @property
    def code(self) -> int:
        """Signed board code: +type for Red, -type for Black."""
        return self.piece_type if self.color else -self.piece_type

    def symbol(self) -> str:
        """FEN letter in Pikafish form (upper case = Red)."""
        s = PIECE_SYMBOLS[self.piece_type]
        return s.upper() if self.color else s

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Piece)
            and self.piece_type == other.piece_type
            and self.color == other.color
        )

    def __hash__(self) -> int:
        return hash((self.piece_type, self.color))

    def __repr__(self) -> str:
        return f"Piece.from_symbol({self.symbol()!r})"


class Move:
    """A move from one square to another; text form is ICCS (``h2e2``)."""

    __slots__ = ("from_square", "to_square")

    def __init__(self, from_square: int, to_square: int) -> None:
        if not (0 <= from_square < 90 and 0 <= to_square < 90):
            raise InvalidMove(f"move squares {from_square}, {to_square} are outside 0-89")
        if from_square == to_square:
            raise InvalidMove(f"a move must change square, got {square_name(from_square)} twice")
        self.from_square = from_square
        self.to_square = to_square

    @classmethod
    def from_iccs(cls, text: str) -> Move:
        """Parse ICCS: ``h2e2`` (``H2-E2`` is accepted too)."""
        if not isinstance(text, str):
            raise InvalidMove(f"a move must be a string like 'h2e2', got {type(text).__name__}")
        t = text.strip().lower()
        if len(t) == 5 and t[2] == "-":  # only between the squares: "h2-e2", not "h-2e2"
            t = t[:2] + t[3:]
        if len(t) != 4 or t[:2] not in _SQUARE_INDEX or t[2:] not in _SQUARE_INDEX:
            raise InvalidMove(
                f"{text!r} is not an ICCS move: expected from and to squares like 'h2e2' "
                "(files a-i, ranks 0-9)"
            )
        return cls(_SQUARE_INDEX[t[:2]], _SQUARE_INDEX[t[2:]])

    def iccs(self) -> str:
        """ICCS text, e.g. ``h2e2``."""
        return SQUARE_NAMES[self.from_square] + SQUARE_NAMES[self.to_square]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Move)
            and self.from_square == other.from_square
            and self.to_square == other.to_square
        )

    def __hash__(self) -> int:
        return self.from_square * 90 + self.to_square

    def __str__(self) -> str:
        return self.iccs()

    def __repr__(self) -> str:
        return f"Move.from_iccs({self.iccs()!r})"
