"""Text renderings of a position for the decision model: the document and the move question.

The document is compact and deterministic (same position and history, same text), so a model
trained on it sees one form per position:

    Xiangqi. Red: upper case, Black: lower case. K general, A advisor, B elephant, N horse,
    R chariot, C cannon, P soldier, . empty point.
      abcdefghi
    9 rnbakabnr
    ...
    0 RNBAKABNR
    Side to move: red. Move 1. Last move: none. In check: no.
    Legal moves (44): a0a1 a0a2 ...
    Captures (2): b2b9xn h2h9xn
    Checks (0):
    Hanging (0):

Rank 9 (Black's back rank) is printed first, as in FEN. Legal moves are ICCS sorted as strings.
The last three lines restate, for the side to move, facts the rules engine already knows and a
small model finds hard to read off the grid: the legal moves that capture (with the letter of the
captured piece, and ``!`` when no enemy piece could take back on that square), the legal moves
that give check, and its own pieces other than the general that an enemy piece attacks and none
of its own defends (square and letter). Attacks are pseudo-legal (``Board.attackers``: the
attacker's own general's safety is ignored). They describe the position, not a preference: which
move to play is still the model's answer.
"""

from __future__ import annotations

from typing import Any

from apps.xiangqi.board import Board
from apps.xiangqi.core import COLOR_NAMES, FILE_NAMES, GENERAL, Move, Piece, square_name
from apps.xiangqi.errors import XiangqiError

LEGEND = (
    "Xiangqi. Red: upper case, Black: lower case. K general, A advisor, B elephant, N horse, "
    "R chariot, C cannon, P soldier, . empty point."
)


def sorted_legal_iccs(board: Board, moves: list[Move] | None = None) -> list[str]:
    """The legal moves of the side to move (``moves`` when the caller has them) as ICCS
    strings, in sorted (stable) order."""
    return sorted(m.iccs() for m in (board.legal_moves if moves is None else moves))


def board_grid(board: Board) -> str:
    """Ten lines of nine characters (rank 9 first) under a file header, one character a point."""
    lines = ["  " + FILE_NAMES]
    for rank in range(9, -1, -1):
        row = ""
        for f in range(9):
            piece: Piece | None = board.piece_at(rank * 9 + f)
            row += piece.symbol() if piece else "."
        lines.append(f"{rank} {row}")
    return "\n".join(lines)


def position_document(board: Board) -> str:
    """The position as the document the decision model reads (see the module docstring)."""
    moves = board.legal_moves
    legal = sorted_legal_iccs(board, moves)
    last = board.peek().iccs() if board.move_stack else "none"
    status = (
        f"Side to move: {COLOR_NAMES[board.turn]}. Move {board.fullmove_number}. "
        f"Last move: {last}. In check: {'yes' if board.is_check() else 'no'}."
    )
    return "\n".join(
        [LEGEND, board_grid(board), status, legal_moves_line(legal),
         *tactics_lines(board, moves)]
    )


def legal_moves_line(legal: list[str]) -> str:
    """The document's line listing the legal moves (ICCS, sorted)."""
    return f"Legal moves ({len(legal)}): {' '.join(legal)}"


def _listing(title: str, items: list[str]) -> str:
    return f"{title} ({len(items)}): {' '.join(items)}".rstrip()


def tactics_lines(board: Board, legal: list[Move] | None = None) -> list[str]:
    """Captures, checking moves and hanging pieces of the side to move (module docstring);
    ``legal``: its legal moves when the caller has them. ``board`` is not modified."""
    us, them = board.turn, not board.turn
    scratch = board.copy()  # captures are tried on it (push / pop), one copy per position
    captures, checks = [], []
    for move in board.legal_moves if legal is None else legal:
        victim = board.piece_at(move.to_square)
        if victim is not None:
            scratch.push(move)
            free = not scratch.attackers(them, move.to_square)
            scratch.pop()
            captures.append(move.iccs() + "x" + victim.symbol() + ("!" if free else ""))
        if board.gives_check(move):
            checks.append(move.iccs())
    # our pieces already stand where the enemy could capture: one pass over its moves finds
    # them; only those need the per-square test for a defender
    threatened = board.attacked_squares(them)
    hanging = [
        square_name(sq) + piece.symbol()
        for sq, piece in sorted(board.piece_map().items())
        if piece.color == us and piece.piece_type != GENERAL
        and sq in threatened and not board.attackers(us, sq)
    ]
    return [
        _listing("Captures", sorted(captures)),
        _listing("Checks", sorted(checks)),
        _listing("Hanging", hanging),
    ]


def move_question(board: Board, moves: list[Move] | None = None) -> dict[str, Any]:
    """A ``choice`` question among the legal moves in ICCS (same order as the document), or
    among ``moves``, legal ones the caller chose (the player leaves out a move that lets the game
    end by repetition at once: ``repetition.repetition_safe_moves``).

    Raises :class:`XiangqiError` when the side to move has no legal move (the game is over).
    """
    legal = sorted_legal_iccs(board, moves)
    side = COLOR_NAMES[board.turn]
    if not legal:
        over = f"{side} has no legal move: the game is over ({board.result()})"
        raise XiangqiError(over, "board")
    return {
        "id": "move",
        "text": f"Which move should {side} play?",
        "answer": {"type": "choice", "options": legal},
    }
