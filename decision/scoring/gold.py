"""Gold answers in the CSV are text; they are parsed by the question's schema and compared typed.

Parsing the gold up front (when the file is read) turns an unparseable gold cell into a malformed
row reported by line number, instead of a question silently scored wrong.
"""

from __future__ import annotations

import json
import math
from typing import Any

from decision.errors import DecisionInputError
from decision.schemas.models import (
    BooleanAnswer,
    ChoiceAnswer,
    IntegerAnswer,
    JsonAnswer,
    NumberAnswer,
    PatternAnswer,
)

_TRUE = {"yes", "true", "1"}
_FALSE = {"no", "false", "0"}


def parse_gold(answer: Any, text: str) -> Any:
    """The typed gold of ``text`` under the answer schema ``answer``; raises
    ``DecisionInputError`` (field ``gold``) when it is not a possible answer."""
    value: Any
    if isinstance(answer, BooleanAnswer):
        low = text.strip().lower()
        if low not in _TRUE | _FALSE:
            raise DecisionInputError(f"gold {text!r} is not yes/no", "gold")
        return low in _TRUE
    if isinstance(answer, ChoiceAnswer):
        if text not in answer.options():
            raise DecisionInputError(
                f"gold {text!r} is not one of the options {answer.options()}", "gold"
            )
        return text
    if isinstance(answer, IntegerAnswer):
        try:
            value = int(text.strip())
        except ValueError:
            raise DecisionInputError(f"gold {text!r} is not an integer", "gold") from None
        if not answer.minimum <= value <= answer.maximum:
            raise DecisionInputError(
                f"gold {value} is outside [{answer.minimum}, {answer.maximum}]", "gold"
            )
        return value
    if isinstance(answer, NumberAnswer):
        try:
            value = float(text.strip())
        except ValueError:
            raise DecisionInputError(f"gold {text!r} is not a number", "gold") from None
        if not math.isfinite(value):
            raise DecisionInputError(f"gold {text!r} is not a finite number", "gold")
        return value
    if isinstance(answer, JsonAnswer):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise DecisionInputError(f"gold is not JSON: {exc.msg}", "gold") from None
    if isinstance(answer, PatternAnswer):
        return text
    raise DecisionInputError(f"unsupported answer type {type(answer).__name__}", "answer_type")


def is_correct(answer: Any, value: Any, gold: Any) -> bool:
    """Typed comparison of a predicted value with the parsed gold."""
    if isinstance(answer, NumberAnswer):
        return math.isclose(float(value), float(gold), rel_tol=1e-9, abs_tol=1e-12)
    return bool(value == gold and type(value) is type(gold))
