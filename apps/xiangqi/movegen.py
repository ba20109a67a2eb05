"""Pseudo-legal move generation and attack detection on a list of 90 signed piece codes.

Legality is decided the cheap way (see :func:`is_safe`): make the move on the list, ask whether the
mover's general is attacked by scanning outward from the general (chariot, cannon with one screen,
facing general, horse with a free leg, soldier), then unmake. Opponent moves are never generated.
"""

from __future__ import annotations

from apps.xiangqi.tables import (
    ADVISOR_MOVES,
    ELEPHANT_MOVES,
    GENERAL_MOVES,
    HORSE_ATTACKERS,
    HORSE_MOVES,
    LEAVE_DANGER,
    LINE_SQUARES,
    RAYS,
    SOLDIER_ATTACKERS,
    SOLDIER_MOVES,
)


def king_attacked(b: list[int], k: int, red: bool) -> bool:
    """True if the general of colour ``red`` standing on ``k`` is attacked.

    "Attacked" includes the flying-general rule: the enemy general first on an open file counts as
    an attacker, so a position where the generals face each other is never legal for the mover.
    """
    if red:
        e_chariot, e_cannon, e_horse, e_general, e_soldier = -5, -6, -4, -1, -7
        soldier_from = SOLDIER_ATTACKERS[0][k]
    else:
        e_chariot, e_cannon, e_horse, e_general, e_soldier = 5, 6, 4, 1, 7
        soldier_from = SOLDIER_ATTACKERS[1][k]
    for ray in RAYS[k]:
        screen = False
        for s in ray:
            p = b[s]
            if p:
                if screen:
                    if p == e_cannon:
                        return True
                    break
                # Generals never share a rank (the palaces are ranks apart), so a general found on
                # any ray is on the same file: they face each other.
                if p == e_chariot or p == e_general:
                    return True
                screen = True
    for h, leg in HORSE_ATTACKERS[k]:
        if b[h] == e_horse and not b[leg]:
            return True
    for s in soldier_from:
        if b[s] == e_soldier:
            return True
    return False


def piece_targets(b: list[int], fr: int) -> list[int]:
    """Pseudo-legal destination squares of the piece on ``fr`` (own general safety not checked)."""
    p = b[fr]
    red = p > 0
    t = p if red else -p
    out: list[int] = []
    if t == 5:  # chariot: slides until the first piece, which it may capture if it is an enemy
        for ray in RAYS[fr]:
            for to in ray:
                q = b[to]
                if not q:
                    out.append(to)
                else:
                    if (q > 0) != red:
                        out.append(to)
                    break
    elif t == 6:  # cannon: slides to empty points; captures only the first piece after one screen
        for ray in RAYS[fr]:
            screen = False
            for to in ray:
                q = b[to]
                if not screen:
                    if not q:
                        out.append(to)
                    else:
                        screen = True
                elif q:
                    if (q > 0) != red:
                        out.append(to)
                    break
    elif t == 4:  # horse: blocked by a piece on its leg
        for to, leg in HORSE_MOVES[fr]:
            if not b[leg]:
                q = b[to]
                if not q or (q > 0) != red:
                    out.append(to)
    elif t == 7:
        for to in SOLDIER_MOVES[red][fr]:
            q = b[to]
            if not q or (q > 0) != red:
                out.append(to)
    elif t == 3:  # elephant: blocked by a piece on its eye; the table keeps it on its own half
        for to, eye in ELEPHANT_MOVES[fr]:
            if not b[eye]:
                q = b[to]
                if not q or (q > 0) != red:
                    out.append(to)
    else:  # general or advisor: one step inside the palace (the tables hold only palace points)
        for to in (GENERAL_MOVES if t == 1 else ADVISOR_MOVES)[fr]:
            q = b[to]
            if not q or (q > 0) != red:
                out.append(to)
    return out


def pseudo_moves(b: list[int], red: bool) -> list[tuple[int, int]]:
    """All pseudo-legal (from, to) pairs of one side, in square order then table order."""
    out: list[tuple[int, int]] = []
    for fr in range(90):
        p = b[fr]
        if p and (p > 0) == red:
            for to in piece_targets(b, fr):
                out.append((fr, to))
    return out


def is_safe(b: list[int], k: int, red: bool, fr: int, to: int, in_check: bool) -> bool:
    """True if the pseudo-legal move fr->to leaves the mover's general (on ``k``) unattacked.

    Shortcut when not in check and the general does not move: only a piece leaving or entering the
    general's rank or file (opening a line, becoming a cannon screen) or leaving a horse-leg point
    next to the general can expose it; other moves are safe without making them.
    """
    moved = b[fr]
    if moved == 1 or moved == -1:
        k = to
    elif not in_check and fr not in LEAVE_DANGER[k] and to not in LINE_SQUARES[k]:
        return True
    captured = b[to]
    b[to] = moved
    b[fr] = 0
    attacked = king_attacked(b, k, red)
    b[fr] = moved
    b[to] = captured
    return not attacked


def legal_pairs(b: list[int], k: int, red: bool) -> list[tuple[int, int]]:
    """All legal (from, to) pairs of the side ``red`` whose general stands on ``k``."""
    in_check = king_attacked(b, k, red)
    return [(fr, to) for fr, to in pseudo_moves(b, red) if is_safe(b, k, red, fr, to, in_check)]


def has_legal_move(b: list[int], k: int, red: bool) -> bool:
    """True if the side has at least one legal move (stops at the first)."""
    in_check = king_attacked(b, k, red)
    for fr in range(90):
        p = b[fr]
        if p and (p > 0) == red:
            for to in piece_targets(b, fr):
                if is_safe(b, k, red, fr, to, in_check):
                    return True
    return False


def perft_pairs(b: list[int], kings: list[int], red: bool, depth: int) -> int:
    """Leaf count of the legal move tree below this position (``depth`` >= 1), bulk-counted."""
    moves = legal_pairs(b, kings[red], red)
    if depth == 1:
        return len(moves)
    total = 0
    for fr, to in moves:
        moved = b[fr]
        captured = b[to]
        b[to] = moved
        b[fr] = 0
        if moved == 1 or moved == -1:
            kings[red] = to
        total += perft_pairs(b, kings, not red, depth - 1)
        if moved == 1 or moved == -1:
            kings[red] = fr
        b[fr] = moved
        b[to] = captured
    return total
