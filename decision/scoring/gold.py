"""Typed comparison of a predicted value with a gold value (parsed by ``csv_format.parse_gold``
when the file is read, so an unparseable gold is a malformed row, not a silent miss)."""

from __future__ import annotations

import math
from typing import Any

from decision.schemas.models import NumberAnswer


def is_correct(answer: Any, value: Any, gold: Any) -> bool:
    """Typed comparison of a predicted value with the parsed gold."""
    if isinstance(answer, NumberAnswer):
        return math.isclose(float(value), float(gold), rel_tol=1e-9, abs_tol=1e-12)
    return bool(value == gold and type(value) is type(gold))
