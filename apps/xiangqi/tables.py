"""Precomputed move and attack tables on the 90-square board (index = rank * 9 + file).

Looking moves up in tables avoids bounds checks in the hot loops of move generation: every entry
already lies on the board and, for the general, advisors and elephants, in their allowed zone.
"""

from __future__ import annotations

import random

from apps.xiangqi.core import BLACK, RED

Table = tuple[tuple[int, ...], ...]
PairTable = tuple[tuple[tuple[int, int], ...], ...]


def _on_board(f: int, r: int) -> bool:
    return 0 <= f < 9 and 0 <= r < 10


def _sq(f: int, r: int) -> int:
    return r * 9 + f


def in_palace(sq: int) -> bool:
    """True on the 3x3 palace of either side (files d-f, ranks 0-2 or 7-9)."""
    f, r = sq % 9, sq // 9
    return 3 <= f <= 5 and (r <= 2 or r >= 7)


def own_half(sq: int, red: bool) -> bool:
    """True if the square is on the given side's half of the board (before the river)."""
    return sq // 9 <= 4 if red else sq // 9 >= 5


def _build_general() -> Table:
    out = []
    for sq in range(90):
        f, r = sq % 9, sq // 9
        targets = []
        if in_palace(sq):
            for df, dr in ((0, 1), (0, -1), (1, 0), (-1, 0)):
                if _on_board(f + df, r + dr) and in_palace(_sq(f + df, r + dr)):
                    # Stay in the same palace (ranks 2 and 7 are not adjacent, so this holds).
                    targets.append(_sq(f + df, r + dr))
        out.append(tuple(targets))
    return tuple(out)


def _build_advisor() -> Table:
    out = []
    for sq in range(90):
        f, r = sq % 9, sq // 9
        targets = []
        if in_palace(sq):
            for df, dr in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
                if _on_board(f + df, r + dr) and in_palace(_sq(f + df, r + dr)):
                    targets.append(_sq(f + df, r + dr))
        out.append(tuple(targets))
    return tuple(out)


def _build_elephant() -> PairTable:
    """(target, eye) pairs; the elephant never crosses the river, so targets stay on sq's half."""
    out = []
    for sq in range(90):
        f, r = sq % 9, sq // 9
        pairs = []
        for df, dr in ((2, 2), (2, -2), (-2, 2), (-2, -2)):
            if _on_board(f + df, r + dr):
                to = _sq(f + df, r + dr)
                if (to // 9 <= 4) == (r <= 4):
                    pairs.append((to, _sq(f + df // 2, r + dr // 2)))
        out.append(tuple(pairs))
    return tuple(out)


_HORSE_STEPS = ((1, 2), (-1, 2), (1, -2), (-1, -2), (2, 1), (2, -1), (-2, 1), (-2, -1))


def _build_horse() -> PairTable:
    """(target, leg) pairs; the leg is the orthogonal neighbour along the jump's long side."""
    out = []
    for sq in range(90):
        f, r = sq % 9, sq // 9
        pairs = []
        for df, dr in _HORSE_STEPS:
            if _on_board(f + df, r + dr):
                leg = _sq(f, r + dr // 2) if abs(dr) == 2 else _sq(f + df // 2, r)
                pairs.append((_sq(f + df, r + dr), leg))
        out.append(tuple(pairs))
    return tuple(out)


def _build_horse_attackers() -> PairTable:
    """For a target square: (horse square, leg square) pairs of horses that could jump onto it."""
    out: list[list[tuple[int, int]]] = [[] for _ in range(90)]
    for sq, pairs in enumerate(HORSE_MOVES):
        for to, leg in pairs:
            out[to].append((sq, leg))
    return tuple(tuple(p) for p in out)


def _build_rays() -> tuple[Table, ...]:
    """Per square four rays (up, down, right, left), each ordered outward from the square."""
    out = []
    for sq in range(90):
        f, r = sq % 9, sq // 9
        rays = []
        for df, dr in ((0, 1), (0, -1), (1, 0), (-1, 0)):
            ray = []
            nf, nr = f + df, r + dr
            while _on_board(nf, nr):
                ray.append(_sq(nf, nr))
                nf, nr = nf + df, nr + dr
            rays.append(tuple(ray))
        out.append(tuple(rays))
    return tuple(out)


def _build_soldier(red: bool) -> Table:
    """Forward one point; after crossing the river also one point sideways. Never backward."""
    out = []
    fwd = 1 if red else -1
    for sq in range(90):
        f, r = sq % 9, sq // 9
        targets = []
        if _on_board(f, r + fwd):
            targets.append(_sq(f, r + fwd))
        if not own_half(sq, red):
            for df in (1, -1):
                if _on_board(f + df, r):
                    targets.append(_sq(f + df, r))
        out.append(tuple(targets))
    return tuple(out)


def _invert(table: Table) -> Table:
    out: list[list[int]] = [[] for _ in range(90)]
    for sq, targets in enumerate(table):
        for to in targets:
            out[to].append(sq)
    return tuple(tuple(t) for t in out)


GENERAL_MOVES: Table = _build_general()
ADVISOR_MOVES: Table = _build_advisor()
ELEPHANT_MOVES: PairTable = _build_elephant()
HORSE_MOVES: PairTable = _build_horse()
HORSE_ATTACKERS: PairTable = _build_horse_attackers()
RAYS: tuple[Table, ...] = _build_rays()
# Indexed by colour (False = Black, True = Red).
SOLDIER_MOVES: tuple[Table, Table] = (_build_soldier(BLACK), _build_soldier(RED))
# SOLDIER_ATTACKERS[c][sq]: squares from which a soldier of colour c attacks sq.
SOLDIER_ATTACKERS: tuple[Table, Table] = (
    _invert(SOLDIER_MOVES[0]),
    _invert(SOLDIER_MOVES[1]),
)

# Squares where a move can change whether a general on `k` is attacked, when the mover is not the
# general and the general is not in check already: pieces leaving or entering k's rank or file
# (open a line or become a cannon screen) and pieces leaving a diagonal neighbour (a horse leg).
LINE_SQUARES: tuple[frozenset[int], ...] = tuple(
    frozenset(s for s in range(90) if s != k and (s % 9 == k % 9 or s // 9 == k // 9))
    for k in range(90)
)
LEAVE_DANGER: tuple[frozenset[int], ...] = tuple(
    LINE_SQUARES[k] | frozenset(leg for _, leg in HORSE_ATTACKERS[k]) for k in range(90)
)

# Legal points of the pieces that are confined (used to validate FEN positions).
PALACE_POINTS: tuple[frozenset[int], frozenset[int]] = (
    frozenset(s for s in range(90) if in_palace(s) and s // 9 >= 7),
    frozenset(s for s in range(90) if in_palace(s) and s // 9 <= 2),
)
ADVISOR_POINTS: tuple[frozenset[int], frozenset[int]] = (
    frozenset(_sq(f, r) for f, r in ((3, 9), (5, 9), (4, 8), (3, 7), (5, 7))),
    frozenset(_sq(f, r) for f, r in ((3, 0), (5, 0), (4, 1), (3, 2), (5, 2))),
)
ELEPHANT_POINTS: tuple[frozenset[int], frozenset[int]] = (
    frozenset(_sq(f, 9 - r) for f, r in ((2, 0), (6, 0), (0, 2), (4, 2), (8, 2), (2, 4), (6, 4))),
    frozenset(_sq(f, r) for f, r in ((2, 0), (6, 0), (0, 2), (4, 2), (8, 2), (2, 4), (6, 4))),
)
# A soldier never moves backward: on its own half it can only stand on its starting files and
# ranks (3-4 for Red, 5-6 for Black); across the river anywhere.
SOLDIER_POINTS: tuple[frozenset[int], frozenset[int]] = (
    frozenset(s for s in range(90) if s // 9 <= 4 or (s // 9 <= 6 and s % 9 % 2 == 0)),
    frozenset(s for s in range(90) if s // 9 >= 5 or (s // 9 >= 3 and s % 9 % 2 == 0)),
)

# Zobrist keys (fixed seed, so hashes are stable across runs): ZOBRIST[code + 7][sq].
_rng = random.Random(0x58514E47)
ZOBRIST: tuple[tuple[int, ...], ...] = tuple(
    tuple(_rng.getrandbits(64) for _ in range(90)) for _ in range(15)
)
ZOBRIST_BLACK_TO_MOVE: int = _rng.getrandbits(64)
