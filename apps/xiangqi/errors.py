"""Errors of the Xiangqi rules engine.

They subclass :class:`decision.errors.DecisionInputError` (itself a ``ValueError``), so a caller
such as the HTTP service reports a bad FEN or move like any other bad input (HTTP 422 with a field).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decision.errors import DecisionInputError

if TYPE_CHECKING:
    from apps.xiangqi.core import Move


class XiangqiError(DecisionInputError):
    """Base class of every error the rules engine raises for bad input."""


class InvalidFen(XiangqiError):
    """A FEN string that does not describe a valid Xiangqi position; the message says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "fen")


class InvalidSquare(XiangqiError):
    """A square name or index outside the board (files a-i, ranks 0-9)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "square")


class InvalidMove(XiangqiError):
    """Move text that is not a move at all (not ``h2e2``-style ICCS)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "move")


class IllegalMove(XiangqiError):
    """A well-formed move that is not legal in the position; carries the legal moves."""

    def __init__(self, message: str, move: Move | None, legal_moves: list[Move]) -> None:
        super().__init__(message, "move")
        self.move = move
        self.legal_moves = legal_moves
