"""Gold answers in scoring: typed comparison with predictions (at every depth of a JSON value)
and one spelling per gold value for the majority baseline."""

from __future__ import annotations

from typing import Any

import pytest

from decision.metrics import majority_baseline
from decision.schemas.models import Question
from decision.scoring.gold import gold_fits, gold_key, is_correct, same_value
from decision.scoring.output import PredictionRow
from decision.scoring.summary import records


def _answer(schema: dict[str, Any]) -> Any:
    return Question.model_validate({"id": "q", "text": "Q?", "answer": schema}).answer


@pytest.mark.parametrize(("a", "b", "same"), [
    (1.0, 1, True),  # a JSON number answer "1.0" against the gold 1 was marked wrong
    ([1.0], [1], True),
    ({"n": 2.5, "k": [1]}, {"k": [1.0], "n": 2.5}, True),
    (True, 1, False),
    ([True], [1], False),  # nested, Python's True == 1 had marked this right
    ({"x": False}, {"x": 0}, False),
    (None, None, True),
    ("1", 1, False),
    ([1, 2], [2, 1], False),
    ({"a": 1}, {"a": 1, "b": 2}, False),
    ([1, 2], [1], False),  # a list is not equal to its prefix
    ([], [0], False),
])
def test_same_value_is_json_equality_at_every_depth(a: Any, b: Any, same: bool) -> None:
    assert same_value(a, b) is same
    assert same_value(b, a) is same


def test_is_correct_by_answer_type() -> None:
    number = _answer({"type": "number"})
    assert is_correct(number, 0.1 + 0.2, 0.3)
    assert not is_correct(number, 100.01, 100)  # close in print is not the same number
    assert not is_correct(number, 0.0, 1e-9)
    json_number = _answer({"type": "json", "schema": {"type": "number"}})
    assert is_correct(json_number, 1.0, 1)
    assert not is_correct(_answer({"type": "integer"}), True, 1)
    assert is_correct(_answer({"type": "boolean"}), False, False)


@pytest.mark.parametrize(("schema", "gold", "fits"), [
    ({"type": "integer"}, 999_999_999, True),
    ({"type": "integer"}, 10**9, False),  # the default bounds of an integer answer
    ({"type": "pattern", "regex": "[0-9]{1,3}"}, "120", True),
    ({"type": "pattern", "regex": "[0-9]{1,3}"}, "1200", False),
    ({"type": "json", "schema": {"type": "array", "items": {"type": "string"}}}, ["a"], True),
    ({"type": "json", "schema": {"type": "array", "items": {"type": "string"}}}, [1], False),
    ({"type": "choice", "options": ["a", "b"]}, "a", True),
    # an integer written 1.0 (a JSON gold from a float column): the model's {"n": 1} equals it,
    # so it fits; the gold was refused as one "the model could never give"
    ({"type": "json", "schema": {"type": "object", "properties": {"n": {"type": "integer"}},
                                 "required": ["n"]}}, {"n": 1.0}, True),
    ({"type": "json", "schema": {"type": "object", "properties": {"n": {"type": "integer"}},
                                 "required": ["n"]}}, {"n": 1.5}, False),
])
def test_gold_fits_the_answer_language(schema: dict[str, Any], gold: Any, fits: bool) -> None:
    assert gold_fits(_answer(schema), gold) is fits


@pytest.mark.parametrize(("answer_type", "texts"), [
    ("boolean", ["true", "TRUE", " True"]),
    ("integer", ["5", "+5", "05"]),
    ("number", ["1", "1.0", "1e0"]),
    ("json", ['{"a": 1, "b": [true]}', '{"b":[true],"a":1.0}']),
])
def test_gold_key_is_one_spelling_per_value(answer_type: str, texts: list[str]) -> None:
    assert len({gold_key(answer_type, t) for t in texts}) == 1


def test_gold_key_keeps_distinct_values_apart() -> None:
    assert gold_key("json", "[true]") != gold_key("json", "[1]")
    assert gold_key("choice", "Yes") != gold_key("choice", "yes")
    assert gold_key("integer", "not a number") == "not a number"  # a hand-edited file


def test_gold_key_of_json_integers_a_float_cannot_hold() -> None:
    # an integer of 401 digits: float() overflowed, a traceback when the summary was written
    big = "1" + "0" * 400
    assert gold_key("json", f"[{big}]") != gold_key("json", f"[{big[:-1]}1]")
    # 2**53 and 2**53 + 1 are different answers (same_value) and were one float
    assert gold_key("json", str(2**53)) != gold_key("json", str(2**53 + 1))
    assert gold_key("json", str(2**53)) == gold_key("json", f"{2**53}.0")
    rows = [PredictionRow(f"g{i}", "q", "joint", "json", big, 0.9, big, True, 1, 1.0)
            for i in range(2)]
    assert majority_baseline(records(rows)) == pytest.approx(1.0)


def test_the_majority_baseline_counts_one_gold_however_it_is_written() -> None:
    golds = ["true", "TRUE", "True", "false"]
    rows = [PredictionRow(f"g{i}", "q", "joint", "boolean", "true", 0.9, gold, True, 1, 1.0)
            for i, gold in enumerate(golds)]
    assert majority_baseline(records(rows)) == pytest.approx(0.75)  # was 0.25
