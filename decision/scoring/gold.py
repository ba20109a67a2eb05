"""Gold answers: whether one fits its question's answer schema, typed comparison with a
prediction, and one spelling per value for counting them. (The gold cell is parsed by
``csv_format.parse_gold`` when the file is read, so an unparseable gold is a malformed row, not
a silent miss.)"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from decision.schemas import json_subset
from decision.schemas.models import (
    IntegerAnswer,
    JsonAnswer,
    NumberAnswer,
    PatternAnswer,
    matches,
)


def gold_fits(answer: Any, gold: Any) -> bool:
    """Whether a parsed gold is in the answer's language: a gold outside it could never be
    predicted, so its row would count as wrong whatever the model does."""
    if isinstance(answer, IntegerAnswer):
        return answer.minimum <= gold <= answer.maximum  # the default bounds too
    if isinstance(answer, PatternAnswer):
        try:
            return matches(answer, gold)
        except re.error:  # Rust-regex syntax Python's re does not read: left unchecked
            return True
    if isinstance(answer, JsonAnswer):
        # an integer written 1.0 fits an integer field: the model's 1 equals it (same_value)
        return (json_subset.validate(gold, answer.json_schema)
                or json_subset.validate(_integral_as_int(gold), answer.json_schema))
    return True  # choice, boolean and number golds are checked as they are parsed


def same_value(a: Any, b: Any) -> bool:
    """Equality of typed (JSON) values at every depth: numbers by value (``1`` equals ``1.0``),
    a boolean only a boolean (Python's ``True == 1`` does not hold here), strings exactly."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same_value, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def is_correct(answer: Any, value: Any, gold: Any) -> bool:
    """Typed comparison of a predicted value with the parsed gold."""
    if isinstance(answer, NumberAnswer):
        return math.isclose(float(value), float(gold), rel_tol=1e-9, abs_tol=1e-12)
    return same_value(value, gold)


def _integral_as_int(value: Any) -> Any:
    """``value`` with every integral float an int (``1.0`` -> ``1``) at every depth: the same
    number as ``same_value`` has it, exactly (as floats, an integer of over 308 digits
    overflowed and integers above 2**53 ran together)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_integral_as_int(v) for v in value]
    if isinstance(value, dict):
        return {k: _integral_as_int(v) for k, v in value.items()}
    return value


def gold_key(answer_type: str, text: str) -> str:
    """One spelling per gold value, for counting golds (the majority baseline): ``TRUE`` and
    ``true``, ``+5`` and ``5``, ``1`` and ``1.0`` are one answer, as ``is_correct`` has them.
    A text that does not parse (a hand-edited predictions file) is its own key."""
    try:
        if answer_type == "boolean":
            return text.strip().lower()
        if answer_type == "integer":
            return str(int(text.strip()))
        if answer_type == "number":
            return repr(float(text))
        if answer_type == "json":
            return json.dumps(_integral_as_int(json.loads(text)), sort_keys=True)
    except (ValueError, RecursionError):
        pass
    return text
