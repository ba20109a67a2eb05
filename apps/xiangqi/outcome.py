"""How a game ended: :class:`Termination` and :class:`Outcome` (mirrors python-chess)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from apps.xiangqi.core import Color


class Termination(enum.Enum):
    """Why a game ended."""

    CHECKMATE = enum.auto()
    """The side to move is in check and has no legal move: it loses."""
    STALEMATE = enum.auto()
    """The side to move is not in check but has no legal move: in Xiangqi it loses."""
    REPETITION = enum.auto()
    """Threefold repetition where one side checked on every one of its moves: that side loses."""
    DRAW_REPETITION = enum.auto()
    """Threefold repetition where both sides, or neither, checked on every move: a draw."""
    NO_CAPTURE_120 = enum.auto()
    """120 plies (60 moves each) without a capture: a draw."""


@dataclass(frozen=True)
class Outcome:
    """The end of a game: its termination and winner (``RED``, ``BLACK`` or ``None`` = draw)."""

    termination: Termination
    winner: Color | None

    def result(self) -> str:
        """``"1-0"`` (Red won), ``"0-1"`` (Black won) or ``"1/2-1/2"``."""
        if self.winner is None:
            return "1/2-1/2"
        return "1-0" if self.winner else "0-1"
