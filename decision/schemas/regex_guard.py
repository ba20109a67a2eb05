"""Bound a user regex before compiling it, so a schema can never hang or exhaust memory.

The regex is parsed with Python's own parser (the syntax outlines-core accepts is a close
superset for the constructs allowed here); features a DFA cannot express (look-around,
back-references, anchors) are rejected, and the size of the regex after expanding every counted
repetition (``a{1000}`` is 1000 copies of ``a`` for a DFA builder) is bounded.
"""

from __future__ import annotations

import re
import re._constants as sre_constants
import re._parser as sre_parse

from decision.errors import SchemaError

MAX_EXPANDED_SIZE = 5_000
_UNBOUNDED = sre_constants.MAXREPEAT
_REPEATS = (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, sre_constants.POSSESSIVE_REPEAT)
_FORBIDDEN = {
    sre_constants.ASSERT: "look-around",
    sre_constants.ASSERT_NOT: "look-around",
    sre_constants.GROUPREF: "back-references",
    sre_constants.GROUPREF_EXISTS: "conditional groups",
    sre_constants.AT: "anchors (^, $, \\b); the whole answer is matched anyway",
}


def _size(pattern: sre_parse.SubPattern | list, field: str) -> int:
    total = 0
    for op, arg in pattern:
        if op in _FORBIDDEN:
            raise SchemaError(f"regex uses {_FORBIDDEN[op]}, which is not supported", field)
        if op in _REPEATS:
            low, high, sub = arg
            copies = low + 1 if high == _UNBOUNDED else high
            total += max(copies, 1) * _size(sub, field)
        elif op == sre_constants.SUBPATTERN:
            total += _size(arg[-1], field)
        elif op == sre_constants.ATOMIC_GROUP:
            total += _size(arg, field)
        elif op == sre_constants.BRANCH:
            total += sum(_size(branch, field) for branch in arg[1])
        else:
            total += 1
        if total > MAX_EXPANDED_SIZE:
            break
    return total


def check_regex(regex: str, field: str) -> int:
    """Validate ``regex`` and return its expanded size; raise ``SchemaError`` when unusable."""
    if not regex:
        raise SchemaError("regex is empty", field)
    try:
        parsed = sre_parse.parse(regex)
    except (re.error, RecursionError, OverflowError) as exc:
        raise SchemaError(f"invalid regex: {exc}", field) from exc
    size = _size(parsed, field)
    if size > MAX_EXPANDED_SIZE:
        raise SchemaError(
            f"regex expands to more than {MAX_EXPANDED_SIZE} units (counted repetitions); "
            "simplify it or lower its repetition counts",
            field,
        )
    return size
