"""The symmetries of Xiangqi: the same position seen in a mirror or from the other side.

The rules do not change when the board is mirrored left to right (file ``a`` <-> ``i``), nor when
it is turned half round with the colours swapped (each piece changes colour and moves to the
point facing it, and the other side is to move): python-chess's ``transform(flip_horizontal)``
and ``mirror()``. A move maps to a move, a legal move to a legal move, and a perft count is the
same in every image, which the tests check.

``benchmarks/xiangqi_decoding_variants.py`` uses them to ask the model about every image of a
position (test-time augmentation; docs/xiangqi-model.md has what it measured).
"""

from __future__ import annotations

from dataclasses import dataclass

from apps.xiangqi.board import Board
from apps.xiangqi.core import Move
from apps.xiangqi.fen import board_fen


@dataclass(frozen=True)
class Symmetry:
    """``mirror``: the files reversed; ``swap``: the board turned half round, colours swapped.

    Every symmetry is its own inverse: mapping twice gives back the square, move or board.
    """

    mirror: bool = False
    swap: bool = False

    @property
    def name(self) -> str:
        parts = [part for part, on in (("mirror", self.mirror), ("swap", self.swap)) if on]
        return "+".join(parts) or "identity"

    def square(self, sq: int) -> int:
        rank, file = divmod(sq, 9)
        if self.swap:
            rank, file = 9 - rank, 8 - file
        if self.mirror:
            file = 8 - file
        return rank * 9 + file

    def move(self, move: Move) -> Move:
        return Move(self.square(move.from_square), self.square(move.to_square))

    def iccs(self, text: str) -> str:
        return self.move(Move.from_iccs(text)).iccs()

    def board(self, board: Board) -> Board:
        """The image of ``board`` with its move history replayed in the image (so the last
        move, repetitions and counters carry over)."""
        root = board.copy()
        history = [root.pop() for _ in range(len(root.move_stack))][::-1]
        image = Board(self._fen(root), strict=False)  # the image of a real position is real
        for move in history:
            image.push(self.move(move))
        return image

    def _fen(self, board: Board) -> str:
        codes = [0] * 90
        for sq, piece in board.piece_map().items():
            codes[self.square(sq)] = -piece.code if self.swap else piece.code
        side = "w" if board.turn != self.swap else "b"
        return f"{board_fen(codes)} {side} - - {board.halfmove_clock} {board.fullmove_number}"

IDENTITY = Symmetry()
SYMMETRIES: tuple[Symmetry, ...] = (
    IDENTITY, Symmetry(mirror=True), Symmetry(swap=True), Symmetry(mirror=True, swap=True),
)
