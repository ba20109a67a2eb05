"""WXF (World Xiangqi Federation) move notation, e.g. ``C2=5``, ``H2+3``, ``R+=4``.

Four characters: piece letter (K A E H R C P), the file it stands on numbered 1-9 from the mover's
right (Red: file i = 1 .. a = 9; Black: a = 1 .. i = 9), the direction (``+`` forward, ``-``
backward, ``=`` sideways; WXF also writes ``.`` for sideways, we use ``=``), and then the
destination file for sideways moves and for advisors, elephants and horses, else the number of
ranks moved. Tandem pieces (two of a kind on one file) replace the file digit with ``+`` (front)
or ``-`` (rear); advisors and elephants keep the digit, as WXF does, since their move is never
ambiguous. Soldiers follow the full WXF tandem-pawn rules (3-5 on a file, two tandem files).
:func:`parse_wxf` reads the notation back (``.`` or ``=`` for sideways, ``B``/``N`` aliases).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from apps.xiangqi.core import (
    ADVISOR,
    CANNON,
    CHARIOT,
    COLOR_NAMES,
    ELEPHANT,
    GENERAL,
    HORSE,
    SOLDIER,
    Move,
)
from apps.xiangqi.errors import IllegalMove

if TYPE_CHECKING:
    from apps.xiangqi.board import Board

LETTERS = {
    GENERAL: "K",
    ADVISOR: "A",
    ELEPHANT: "E",
    HORSE: "H",
    CHARIOT: "R",
    CANNON: "C",
    SOLDIER: "P",
}


def file_number(file_index: int, red: bool) -> int:
    """WXF file number 1-9, counted from the mover's right-hand side."""
    return 9 - file_index if red else file_index + 1


def wxf(board: Board, move: Move) -> str:
    """The WXF text of a legal move in ``board`` (raises IllegalMove for an illegal one)."""
    if not board.is_legal(move):
        raise board._illegal(move)
    piece = board.piece_at(move.from_square)
    assert piece is not None
    red, t = piece.color, piece.piece_type
    from_rank, to_rank = move.from_square // 9, move.to_square // 9
    forward = to_rank - from_rank if red else from_rank - to_rank
    if forward == 0:
        tail = "=" + str(file_number(move.to_square % 9, red))
    elif t in (ADVISOR, ELEPHANT, HORSE):
        tail = ("+" if forward > 0 else "-") + str(file_number(move.to_square % 9, red))
    else:
        tail = ("+" if forward > 0 else "-") + str(abs(forward))
    return _prefix(board, move.from_square, piece.code, red) + tail


def _prefix(board: Board, fr: int, code: int, red: bool) -> str:
    """The first two characters: piece letter and file, or the tandem markers."""
    t = abs(code)
    letter = LETTERS[t]
    f = fr % 9
    fno = file_number(f, red)
    if t in (ADVISOR, ELEPHANT):
        return f"{letter}{fno}"
    b = board._board
    # Same pieces on the file, front (closest to the enemy) first.
    column = sorted((s for s in range(f, 90, 9) if b[s] == code), reverse=red)
    if len(column) == 1:
        return f"{letter}{fno}"
    idx = column.index(fr)
    n = len(column)
    if t != SOLDIER:
        # Three or more (only in non-strict diagrams): the middle ones keep the file digit, as
        # WXF writes the middle one of three tandem soldiers.
        return letter + ("+" if idx == 0 else "-" if idx == n - 1 else str(fno))
    tandem_files = sum(1 for g in range(9) if sum(1 for s in range(g, 90, 9) if b[s] == code) >= 2)
    if tandem_files >= 2:
        # Two files with tandem soldiers: the file digit first, then + / - / digit (middle).
        mark = "+" if idx == 0 else "-" if idx == n - 1 else str(fno)
        return f"{fno}{mark}"
    marks = {
        2: ["P+", "P-"],
        3: ["P+", f"P{fno}", "P-"],
        4: ["++", "P+", "P-", "--"],
        5: ["++", "P+", f"P{fno}", "P-", "--"],
    }
    if n not in marks:  # more than five soldiers: only in non-strict diagrams; not WXF-defined
        return f"{letter}{fno}"
    return marks[n][idx]


_ALIASES = {"B": "E", "N": "H", "G": "K"}


def parse_wxf(board: Board, text: str) -> Move:
    """The legal move whose WXF text is ``text``; raises IllegalMove if none matches.

    Matching is against the WXF of every legal move, so whatever :func:`wxf` writes reads back.
    Text that fits two moves (possible only in non-strict diagrams with more pieces of a kind
    than WXF provides for, e.g. six soldiers on a file) raises IllegalMove too.
    """
    norm = text.strip().upper().replace(".", "=") if isinstance(text, str) else ""
    if norm[:1] in _ALIASES:
        norm = _ALIASES[norm[0]] + norm[1:]
    legal = board.legal_moves
    found = [move for move in legal if wxf(board, move) == norm]
    if len(found) == 1:
        return found[0]
    side = COLOR_NAMES[board.turn]
    why = "is ambiguous" if found else "is not a legal WXF move"
    raise IllegalMove(f"{text!r} {why} for {side} in {board.fen()}", None, legal)
