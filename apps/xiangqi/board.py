"""The :class:`Board`: a Xiangqi position with its move history, API modelled on python-chess."""

from __future__ import annotations

from apps.xiangqi import movegen
from apps.xiangqi.core import (
    BLACK,
    COLOR_NAMES,
    GENERAL,
    PIECE_NAMES,
    RED,
    SOLDIER,
    SQUARE_NAMES,
    Color,
    Move,
    Piece,
    parse_square,
)
from apps.xiangqi.errors import IllegalMove, InvalidFen
from apps.xiangqi.fen import STARTING_FEN, board_fen, parse_fen
from apps.xiangqi.outcome import Outcome, Termination
from apps.xiangqi.tables import ZOBRIST, ZOBRIST_BLACK_TO_MOVE

# One shared Move object per (from, to) pair, so move lists cost no constructor calls.
_MOVES: list[Move | None] = [None] * 8100
for _fr in range(90):
    for _to in range(90):
        if _fr != _to:
            _MOVES[_fr * 90 + _to] = Move(_fr, _to)

NO_CAPTURE_LIMIT = 120  # plies without a capture before the game is drawn


def _square_index(square: int | str) -> int:
    """A square index 0-89 from an index or a name; raises InvalidSquare otherwise."""
    sq = parse_square(square) if isinstance(square, str) else square
    if not 0 <= sq < 90:
        parse_square(str(square))  # raises InvalidSquare with the usual message
    return sq


def _move(fr: int, to: int) -> Move:
    m = _MOVES[fr * 90 + to]
    assert m is not None
    return m


class Board:
    """A Xiangqi position plus the moves that led to it.

    ``Board(fen)`` reads a Pikafish FEN (default: the starting position). ``turn`` is ``RED`` or
    ``BLACK``; ``move_stack`` lists the moves pushed since the FEN. ``push`` checks legality and
    raises :class:`IllegalMove`; ``pop`` restores the exact previous state. ``strict=False``
    accepts placements no game can reach (an elephant off its points, three chariots), which
    some hand-made diagrams contain; the rules apply to such pieces all the same.
    """

    def __init__(self, fen: str = STARTING_FEN, *, strict: bool = True) -> None:
        self.set_fen(fen, strict=strict)

    # ----------------------------------------------------------------- setup and FEN

    def set_fen(self, fen: str, *, strict: bool = True) -> None:
        """Replace the position by a FEN; clears the move history. Raises :class:`InvalidFen`."""
        fields = parse_fen(fen, strict)
        b = fields.board
        kings = [b.index(-GENERAL), b.index(GENERAL)]
        if kings[0] % 9 == kings[1] % 9 and not any(
            b[s] for s in range(kings[1] + 9, kings[0], 9)
        ):
            raise InvalidFen(
                f"the generals face each other on file {SQUARE_NAMES[kings[0]][0]} with no "
                "piece between (flying general)"
            )
        waiting = not fields.red_to_move
        if movegen.king_attacked(b, kings[waiting], waiting):
            raise InvalidFen(
                f"{COLOR_NAMES[waiting]} is in check but it is {COLOR_NAMES[not waiting]}'s "
                "turn: the side that just moved cannot be in check"
            )
        self._board = b
        self._kings = kings
        self.turn: Color = fields.red_to_move
        self.halfmove_clock = fields.halfmove_clock
        self.fullmove_number = fields.fullmove_number
        self.move_stack: list[Move] = []
        self._undo: list[tuple[int, int, int, int, int]] = []
        h = 0 if self.turn else ZOBRIST_BLACK_TO_MOVE
        for sq, code in enumerate(b):
            if code:
                h ^= ZOBRIST[code + 7][sq]
        # _hashes[i]: position before move i (the last entry is the current position);
        # _gave_check[i]: whether move i left the opponent in check.
        self._hashes: list[int] = [h]
        self._gave_check: list[bool] = []

    def fen(self) -> str:
        """The position as a Pikafish FEN."""
        side = "w" if self.turn else "b"
        return f"{board_fen(self._board)} {side} - - {self.halfmove_clock} {self.fullmove_number}"

    def board_fen(self) -> str:
        """Only the placement field of the FEN."""
        return board_fen(self._board)

    def copy(self, stack: bool = True) -> Board:
        """An independent copy; with ``stack=False`` the history is dropped (as after set_fen)."""
        if not stack:
            return Board(self.fen(), strict=False)  # already accepted once
        other = Board.__new__(Board)
        other._board = self._board.copy()
        other._kings = self._kings.copy()
        other.turn = self.turn
        other.halfmove_clock = self.halfmove_clock
        other.fullmove_number = self.fullmove_number
        other.move_stack = self.move_stack.copy()
        other._undo = self._undo.copy()
        other._hashes = self._hashes.copy()
        other._gave_check = self._gave_check.copy()
        return other

    # ----------------------------------------------------------------- pieces

    def piece_at(self, square: int | str) -> Piece | None:
        """The piece on a square (index 0-89 or name like ``e0``), or ``None``."""
        code = self._board[_square_index(square)]
        return Piece.from_code(code) if code else None

    def king(self, color: Color) -> int:
        """Square of the general of a colour."""
        return self._kings[color]

    def piece_map(self) -> dict[int, Piece]:
        """Every occupied square mapped to its piece."""
        return {sq: Piece.from_code(c) for sq, c in enumerate(self._board) if c}

    def attackers(self, color: Color, square: int | str) -> list[int]:
        """Squares of the ``color`` pieces that could capture on ``square`` by their movement
        rules (pseudo-legal: the safety of their own general is ignored), whatever stands on
        ``square`` now; as python-chess's ``Board.attackers``."""
        sq = _square_index(square)  # -1 would silently stand for i9
        b = self._board.copy()  # the board itself stays untouched (other readers may hold it)
        b[sq] = -SOLDIER if color else SOLDIER  # any enemy piece: only occupancy matters
        return [fr for fr, to in movegen.pseudo_moves(b, color) if to == sq]

    def attacked_squares(self, color: Color) -> set[int]:
        """Every square a ``color`` piece could move to by its movement rules, captures of
        enemy pieces included (pseudo-legal); squares of its own pieces are not in it (use
        :meth:`attackers` for those)."""
        return {to for _, to in movegen.pseudo_moves(self._board, color)}

    def is_attacked_by(self, color: Color, square: int | str) -> bool:
        """True if a piece of ``color`` attacks ``square`` (see :meth:`attackers`)."""
        return bool(self.attackers(color, square))

    # ----------------------------------------------------------------- moves

    @property
    def legal_moves(self) -> list[Move]:
        """The legal moves of the side to move, in from-square order (a1 before b1 ... i9)."""
        pairs = movegen.legal_pairs(self._board, self._kings[self.turn], self.turn)
        return [_MOVES[fr * 90 + to] for fr, to in pairs]  # type: ignore[misc]

    def is_pseudo_legal(self, move: Move) -> bool:
        """True if the move follows the piece's movement rules, ignoring own-general safety."""
        code = self._board[move.from_square]
        if not code or (code > 0) != self.turn:
            return False
        return move.to_square in movegen.piece_targets(self._board, move.from_square)

    def is_legal(self, move: Move) -> bool:
        """True if the move is legal for the side to move."""
        if not self.is_pseudo_legal(move):
            return False
        b = self._board
        k = self._kings[self.turn]
        in_check = movegen.king_attacked(b, k, self.turn)
        return movegen.is_safe(b, k, self.turn, move.from_square, move.to_square, in_check)

    def _illegal(self, move: Move) -> IllegalMove:
        code = self._board[move.from_square]
        side = COLOR_NAMES[self.turn]
        if not code:
            why = f"there is no piece on {SQUARE_NAMES[move.from_square]}"
        elif (code > 0) != self.turn:
            why = f"the piece on {SQUARE_NAMES[move.from_square]} is not {side}'s"
        elif not self.is_pseudo_legal(move):
            name = PIECE_NAMES[abs(code)]
            why = f"the {side} {name} on {SQUARE_NAMES[move.from_square]} cannot move to "
            why += f"{SQUARE_NAMES[move.to_square]}"
        else:
            why = "it would leave the own general in check or facing the other general"
        legal = self.legal_moves
        return IllegalMove(
            f"illegal move {move.iccs()} for {side} in {self.fen()}: {why}", move, legal
        )

    def parse_iccs(self, text: str) -> Move:
        """Parse ICCS text into a move that is legal here; raises InvalidMove / IllegalMove."""
        move = Move.from_iccs(text)
        if not self.is_legal(move):
            raise self._illegal(move)
        return move

    def push_iccs(self, text: str) -> Move:
        """Parse an ICCS move (``h2e2``), check it is legal, play it and return it."""
        move = self.parse_iccs(text)
        self._push(move)
        return move

    def push(self, move: Move) -> None:
        """Play a move after checking it is legal (raises :class:`IllegalMove` otherwise)."""
        if not isinstance(move, Move):
            raise TypeError(f"push expects a Move, got {type(move).__name__}")
        if not self.is_legal(move):
            raise self._illegal(move)
        self._push(move)

    def _push(self, move: Move) -> None:
        b = self._board
        fr, to = move.from_square, move.to_square
        moved = b[fr]
        captured = b[to]
        h = self._hashes[-1] ^ ZOBRIST[moved + 7][fr] ^ ZOBRIST[moved + 7][to]
        h ^= ZOBRIST_BLACK_TO_MOVE
        if captured:
            h ^= ZOBRIST[captured + 7][to]
        self._undo.append((fr, to, captured, self.halfmove_clock, self.fullmove_number))
        b[to] = moved
        b[fr] = 0
        red = self.turn
        if moved == 1 or moved == -1:
            self._kings[red] = to
        self.halfmove_clock = 0 if captured else self.halfmove_clock + 1
        if not red:
            self.fullmove_number += 1
        self.turn = not red
        self.move_stack.append(move)
        self._hashes.append(h)
        self._gave_check.append(movegen.king_attacked(b, self._kings[not red], not red))

    def pop(self) -> Move:
        """Undo the last move and return it; the position, counters and history are restored."""
        if not self.move_stack:
            raise IndexError("pop from a board with no moves played")
        fr, to, captured, halfmove, fullmove = self._undo.pop()
        b = self._board
        moved = b[to]
        b[fr] = moved
        b[to] = captured
        self.turn = not self.turn
        if moved == 1 or moved == -1:
            self._kings[self.turn] = fr
        self.halfmove_clock = halfmove
        self.fullmove_number = fullmove
        self._hashes.pop()
        self._gave_check.pop()
        return self.move_stack.pop()

    def peek(self) -> Move:
        """The last move played."""
        return self.move_stack[-1]

    def gives_check(self, move: Move) -> bool:
        """True if the (legal) move puts the opponent's general in check."""
        b = self._board
        fr, to = move.from_square, move.to_square
        moved, captured = b[fr], b[to]
        b[to], b[fr] = moved, 0
        opponent = not self.turn
        result = movegen.king_attacked(b, self._kings[opponent], opponent)
        b[fr], b[to] = moved, captured
        return result

    # ----------------------------------------------------------------- game state

    def is_check(self) -> bool:
        """True if the side to move is in check."""
        return movegen.king_attacked(self._board, self._kings[self.turn], self.turn)

    def _has_legal_move(self) -> bool:
        return movegen.has_legal_move(self._board, self._kings[self.turn], self.turn)

    def is_checkmate(self) -> bool:
        """In check with no legal move (a loss for the side to move)."""
        return self.is_check() and not self._has_legal_move()

    def is_stalemate(self) -> bool:
        """Not in check but no legal move: in Xiangqi a loss for the side to move."""
        return not self.is_check() and not self._has_legal_move()

    def repetition_count(self) -> int:
        """How many times the current position (with side to move) occurred in the history."""
        return len(self._occurrences())

    def is_repetition(self, count: int = 3) -> bool:
        """True if the current position occurred at least ``count`` times (this one included)."""
        return len(self._occurrences(count)) >= count

    def has_repeated_position(self) -> bool:
        """True if some position since the last capture occurred twice (side to move included):
        only then can the next two plies make a third occurrence and end the game."""
        hashes = self._hashes
        n = len(hashes) - 1
        window = hashes[n - min(self.halfmove_clock, n):]
        return len(set(window)) < len(window)

    def _occurrences(self, limit: int = 1_000_000) -> list[int]:
        """History indices of the current position, newest first, at most ``limit`` of them.

        Only positions since the last capture can repeat it (material differs before), and only
        every second one has the same side to move.
        """
        hashes = self._hashes
        n = len(hashes) - 1
        h = hashes[n]
        found = [n]
        lowest = n - min(self.halfmove_clock, n)
        i = n - 2
        while i >= lowest and len(found) < limit:
            if hashes[i] == h:
                found.append(i)
            i -= 2
        return found

    def _repetition_outcome(self) -> Outcome | None:
        """Threefold repetition: perpetual check loses, otherwise a draw.

        The cycle is every move from the first of the three occurrences to now. A side "checks
        perpetually" if every one of its moves in the cycle gave check. Exactly one such side
        loses (``REPETITION``); both or neither: ``DRAW_REPETITION``. (Perpetual chasing, which the
        Asian rules also punish, is not detected.)
        """
        occ = self._occurrences(3)
        if len(occ) < 3:
            return None
        first, n = occ[-1], len(self._hashes) - 1
        # Move j is played by the side to move in position j; position n has self.turn to move.
        checks = {RED: True, BLACK: True}
        for j in range(first, n):
            mover = self.turn if (n - j) % 2 == 0 else not self.turn
            if not self._gave_check[j]:
                checks[mover] = False
        if checks[RED] != checks[BLACK]:
            loser = RED if checks[RED] else BLACK
            return Outcome(Termination.REPETITION, not loser)
        return Outcome(Termination.DRAW_REPETITION, None)

    def outcome(self) -> Outcome | None:
        """How the game ended, or ``None`` if it goes on.

        Checked in order: no legal move (checkmate or stalemate: the side to move loses),
        threefold repetition, then 120 plies without a capture (draw).
        """
        if not self._has_legal_move():
            term = Termination.CHECKMATE if self.is_check() else Termination.STALEMATE
            return Outcome(term, not self.turn)
        rep = self._repetition_outcome()
        if rep is not None:
            return rep
        if self.halfmove_clock >= NO_CAPTURE_LIMIT:
            return Outcome(Termination.NO_CAPTURE_120, None)
        return None

    def is_game_over(self) -> bool:
        """True if :meth:`outcome` is not ``None``."""
        return self.outcome() is not None

    def result(self) -> str:
        """``"1-0"``, ``"0-1"``, ``"1/2-1/2"``, or ``"*"`` while the game goes on."""
        outcome = self.outcome()
        return outcome.result() if outcome else "*"

    # ----------------------------------------------------------------- notation and display

    def wxf(self, move: Move) -> str:
        """The move in WXF notation (``C2=5``, ``H2+3``, ``R+=4``); see :mod:`apps.xiangqi.wxf`."""
        from apps.xiangqi.wxf import wxf

        return wxf(self, move)

    def parse_wxf(self, text: str) -> Move:
        """The legal move written ``text`` in WXF (``C2=5``, ``C2.5``); raises IllegalMove."""
        from apps.xiangqi.wxf import parse_wxf

        return parse_wxf(self, text)

    def zobrist_hash(self) -> int:
        """64-bit hash of placement and side to move (equal positions hash equally)."""
        return self._hashes[-1]

    def __str__(self) -> str:
        """A text grid, rank 9 at the top, files a-i left to right, ``.`` for empty points."""
        lines = []
        for rank in range(9, -1, -1):
            row = []
            for f in range(9):
                code = self._board[rank * 9 + f]
                row.append(Piece.from_code(code).symbol() if code else ".")
            lines.append(f"{rank} " + " ".join(row))
        lines.append("  a b c d e f g h i")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Board({self.fen()!r})"

    def __eq__(self, other: object) -> bool:
        """Same position, side to move and counters (history is not compared)."""
        return isinstance(other, Board) and self.fen() == other.fen()

    __hash__ = None  # type: ignore[assignment]
