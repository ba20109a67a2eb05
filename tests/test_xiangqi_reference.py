"""Cross-check the table-driven engine against a naive generator written straight from the rules.

The reference below works on (file, rank) coordinates with no precomputed tables, and decides
legality the slow, obvious way: after the move, the generals must not face each other on an open
file and no enemy piece may have a move onto the mover's general. Both must agree on the legal
move set and on check in positions from recorded games and from random playouts.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from apps.xiangqi import Board, square_name
from apps.xiangqi.dataset import data_dir, iter_games, replay

Pos = tuple[int, int]  # (file, rank)
Placement = dict[Pos, str]  # FEN letter, upper case = Red

VALID = data_dir(Path(__file__).resolve().parents[1]) / "xiangqi" / "valid-games.jsonl.gz"


def placement(board: Board) -> Placement:
    return {(sq % 9, sq // 9): p.symbol() for sq, p in board.piece_map().items()}


def _is_red(symbol: str) -> bool:
    return symbol.isupper()


def _in_palace(f: int, r: int, red: bool) -> bool:
    return 3 <= f <= 5 and (r <= 2 if red else r >= 7)


def _on_board(f: int, r: int) -> bool:
    return 0 <= f < 9 and 0 <= r < 10


def pseudo(pl: Placement, red: bool) -> list[tuple[Pos, Pos]]:
    """Moves by each piece's movement rule, ignoring the safety of one's own general."""
    out = []
    for (f, r), s in pl.items():
        if _is_red(s) != red:
            continue
        kind = s.lower()
        cands: list[Pos] = []
        if kind == "k":
            cands = [(f + a, r + b) for a, b in ((1, 0), (-1, 0), (0, 1), (0, -1))]
            cands = [c for c in cands if _in_palace(*c, red)]
        elif kind == "a":
            cands = [(f + a, r + b) for a in (1, -1) for b in (1, -1)]
            cands = [c for c in cands if _in_palace(*c, red)]
        elif kind == "b":
            for a, b in itertools.product((2, -2), repeat=2):
                t = (f + a, r + b)
                own_side = t[1] <= 4 if red else t[1] >= 5
                if _on_board(*t) and own_side and (f + a // 2, r + b // 2) not in pl:
                    cands.append(t)
        elif kind == "n":
            for a, b in ((1, 2), (1, -2), (-1, 2), (-1, -2), (2, 1), (2, -1), (-2, 1), (-2, -1)):
                leg = (f, r + b // 2) if abs(b) == 2 else (f + a // 2, r)
                if leg not in pl:
                    cands.append((f + a, r + b))
        elif kind in "rc":
            for a, b in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                t, screens = (f + a, r + b), 0
                while _on_board(*t):
                    if t in pl:
                        if kind == "r" or screens == 1:
                            cands.append(t)
                            break
                        screens += 1
                    elif kind == "r" or screens == 0:
                        cands.append(t)
                    t = (t[0] + a, t[1] + b)
        elif kind == "p":
            ahead = 1 if red else -1
            cands = [(f, r + ahead)]
            crossed = r >= 5 if red else r <= 4
            if crossed:
                cands += [(f + 1, r), (f - 1, r)]
        for t in cands:
            if _on_board(*t) and (t not in pl or _is_red(pl[t]) != red):
                out.append(((f, r), t))
    return out


def in_check(pl: Placement, red: bool) -> bool:
    """The general of ``red`` can be captured, or the generals face each other."""
    gen = next(p for p, s in pl.items() if s == ("K" if red else "k"))
    other = next(p for p, s in pl.items() if s == ("k" if red else "K"))
    if gen[0] == other[0]:
        lo, hi = sorted((gen[1], other[1]))
        if not any((gen[0], r) in pl for r in range(lo + 1, hi)):
            return True
    return any(t == gen for _, t in pseudo(pl, not red))


def legal(pl: Placement, red: bool) -> set[str]:
    out = set()
    for fr, to in pseudo(pl, red):
        after = dict(pl)
        after[to] = after.pop(fr)
        if not in_check(after, red):
            out.add(square_name(fr[1] * 9 + fr[0]) + square_name(to[1] * 9 + to[0]))
    return out


def _agree(board: Board) -> None:
    pl = placement(board)
    assert {m.iccs() for m in board.legal_moves} == legal(pl, board.turn), board.fen()
    assert board.is_check() == in_check(pl, board.turn), board.fen()


def test_agrees_on_random_playouts() -> None:
    rng = random.Random(2026)
    checked = 0
    for _ in range(6):
        board = Board()
        for _ in range(rng.randrange(20, 160)):
            moves = board.legal_moves
            if not moves:
                break
            board.push(rng.choice(moves))
            if len(board.move_stack) % 7 == 0:
                _agree(board)
                checked += 1
        _agree(board)
    assert checked >= 20


@pytest.mark.skipif(not VALID.is_file(), reason=f"Xiangqi games not found at {VALID}")
def test_agrees_on_recorded_positions() -> None:
    checked = 0
    for game in itertools.islice(iter_games(VALID), 0, 400, 20):
        board = replay(game)
        while board.move_stack:
            if len(board.move_stack) % 9 == 0:
                _agree(board)
                checked += 1
            board.pop()
    assert checked >= 100
