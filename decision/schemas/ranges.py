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
