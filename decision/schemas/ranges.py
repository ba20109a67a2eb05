"""Exact regular expressions for integer ranges (outlines-core ignores ``minimum``/``maximum``).

The classic construction: split ``[lo, hi]`` into runs of equal digit count, then, for two
equal-length bounds, fix their common prefix and cover the rest with a lower edge, a middle of
free digits and an upper edge. Numbers are written without leading zeros and without ``-0``.
"""

from __future__ import annotations


def _same_length(lo: str, hi: str) -> list[str]:
    """Alternatives matching every number with ``len(lo)`` digits between ``lo`` and ``hi``."""
    if lo == hi:
        return [lo]
    n = len(lo)
    if n == 1:
        return [f"[{lo}-{hi}]"]
    if lo[0] == hi[0]:
        return [lo[0] + _group(_same_length(lo[1:], hi[1:]))]
    rest = n - 1
    out: list[str] = []
    first, last = int(lo[0]), int(hi[0])
    # lower edge: lo[0] followed by anything >= lo[1:]; absorbed into the middle when lo[1:] = 0..0
    if lo[1:] != "0" * rest:
        out.append(lo[0] + _group(_same_length(lo[1:], "9" * rest)))
        first += 1
    upper_full = hi[1:] == "9" * rest
    if not upper_full:
        last -= 1
    if first <= last:
        digits = str(first) if first == last else f"[{first}-{last}]"
        out.append(digits + ("[0-9]" if rest == 1 else f"[0-9]{{{rest}}}"))
    if not upper_full:
        out.append(hi[0] + _group(_same_length("0" * rest, hi[1:])))
    return out


def _group(alternatives: list[str]) -> str:
    return alternatives[0] if len(alternatives) == 1 else "(" + "|".join(alternatives) + ")"


def _non_negative(lo: int, hi: int) -> list[str]:
    """Alternatives for ``lo <= x <= hi`` with ``0 <= lo <= hi``."""
    out: list[str] = []
    width_lo, width_hi = len(str(lo)), len(str(hi))
    for width in range(width_lo, width_hi + 1):
        start = lo if width == width_lo else 10 ** (width - 1)
        end = hi if width == width_hi else 10**width - 1
        out.extend(_same_length(str(start), str(end)))
    return out


def integer_range_regex(minimum: int, maximum: int) -> str:
    """A regex whose full matches are exactly the decimal integers in ``[minimum, maximum]``."""
    if minimum > maximum:
        raise ValueError(f"minimum {minimum} is above maximum {maximum}")
    parts: list[str] = []
    if minimum < 0:
        # negative part: -x for x in [max(1, -maximum), -minimum]
        parts.append("-" + _group(_non_negative(max(1, -maximum), -minimum)))
    if maximum >= 0:
        parts.extend(_non_negative(max(0, minimum), maximum))
    return _group(parts) if len(parts) > 1 else parts[0]


INTEGER_ALPHABET = "-0123456789"


def integer_range_dfa(minimum: int, maximum: int) -> tuple[list[dict[str, int]], list[bool]]:
    """A character DFA (state 0 initial) for exactly the decimal integers in ``[minimum, maximum]``.

    Built directly rather than from ``integer_range_regex``: outlines-core's determinisation of
    that regex takes minutes for 18-digit bounds with many distinct digits. The language is a
    union of fixed-width ranges ``[start, end]`` (``-`` written into both bounds of the negative
    part); the subset construction tracks, per range, the position and whether the prefix still
    equals each bound. A bound whose remaining digits are all ``0`` (lower) or ``9`` (upper) no
    longer constrains anything and is dropped, which keeps the state count small.
    """
    if minimum > maximum:
        raise ValueError(f"minimum {minimum} is above maximum {maximum}")
    ranges: list[tuple[str, str]] = []
    if minimum < 0:
        lo, hi = max(1, -maximum), -minimum
        ranges += [("-" + s, "-" + e) for s, e in _width_runs(lo, hi)]
    if maximum >= 0:
        ranges += _width_runs(max(0, minimum), maximum)

    # an NFA state: (range index, position, prefix equals start, prefix equals end)
    Item = tuple[int, int, bool, bool]
    start: frozenset[Item] = frozenset((r, 0, True, True) for r in range(len(ranges)))
    ids: dict[frozenset[Item], int] = {start: 0}
    transitions: list[dict[str, int]] = [{}]
    accept: list[bool] = [False]
    todo = [start]
    while todo:
        subset = todo.pop()
        source = ids[subset]
        for char in INTEGER_ALPHABET:
            nxt: set[Item] = set()
            for r, pos, tight_lo, tight_hi in subset:
                lo_s, hi_s = ranges[r]
                if pos == len(lo_s):
                    continue
                floor = lo_s[pos] if tight_lo else "0"
                ceiling = hi_s[pos] if tight_hi else "9"
                if not floor <= char <= ceiling or (char == "-") != (lo_s[pos] == "-"):
                    continue
                rest = pos + 1
                nxt.add((
                    r, rest,
                    tight_lo and char == lo_s[pos] and lo_s[rest:].strip("0") != "",
                    tight_hi and char == hi_s[pos] and hi_s[rest:].strip("9") != "",
                ))
            if not nxt:
                continue
            target = frozenset(nxt)
            if target not in ids:
                ids[target] = len(transitions)
                transitions.append({})
                accept.append(any(pos == len(ranges[r][0]) for r, pos, _, _ in target))
                todo.append(target)
            transitions[source][char] = ids[target]
    return transitions, accept


def _width_runs(lo: int, hi: int) -> list[tuple[str, str]]:
    """``[lo, hi]`` (``0 <= lo <= hi``) split into ranges of numbers with the same digit count."""
    runs = []
    for width in range(len(str(lo)), len(str(hi)) + 1):
        start = lo if width == len(str(lo)) else 10 ** (width - 1)
        end = hi if width == len(str(hi)) else 10**width - 1
        runs.append((str(start), str(end)))
    return runs
