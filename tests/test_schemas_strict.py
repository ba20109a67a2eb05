"""Answer-schema fields are strictly typed, as the request options are: a bound of ``true``,
``"10"`` or ``10.0`` and a ``max_tokens`` of ``"5"`` are refused naming the field, not read as
1, 10 and 5; choice options and a regex must be strings."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from decision.schemas import AnswerSchema, Question

ADAPTER = TypeAdapter(AnswerSchema)

# (answer type, integer field, a value in range, the other fields the schema needs)
INTEGER_FIELDS: list[tuple[str, str, int, dict[str, Any]]] = [
    ("integer", "minimum", 0, {}),
    ("integer", "maximum", 10, {}),
    ("number", "max_tokens", 5, {}),
    ("pattern", "max_tokens", 5, {"regex": "[a-c]+"}),
    ("json", "max_tokens", 5, {"schema": {"type": "boolean"}}),
]


def _loose(value: int) -> st.SearchStrategy[Any]:
    """Values lax pydantic read as ``value`` (or as some integer) that a client did not mean."""
    return st.sampled_from([str(value), float(value), f" {value} ", f"{value}.0", True, False])


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(INTEGER_FIELDS), data=st.data())
def test_integer_fields_refuse_bools_strings_and_floats(case, data) -> None:
    kind, name, good, rest = case
    loose = data.draw(_loose(good))
    with pytest.raises(ValidationError) as info:
        ADAPTER.validate_python({"type": kind, **rest, name: loose})
    error = info.value.errors()[0]
    assert error["loc"] == (kind, name), error
    assert "integer" in error["msg"]
    # the integer itself is fine
    assert getattr(ADAPTER.validate_python({"type": kind, **rest, name: good}), name) == good


@pytest.mark.parametrize("options", [[1, 2], ["a", 2], ["a", True], ["a", None], ["a", 1.5]])
def test_choice_options_must_be_strings(options: list[Any]) -> None:
    with pytest.raises(ValidationError) as info:
        ADAPTER.validate_python({"type": "choice", "options": options})
    error = info.value.errors()[0]
    bad = next(i for i, option in enumerate(options) if not isinstance(option, str))
    assert error["loc"] == ("choice", "options", bad)
    assert "string" in error["msg"]


@pytest.mark.parametrize("regex", [5, True, b"[a-c]"])
def test_a_regex_must_be_a_string(regex: Any) -> None:
    with pytest.raises(ValidationError) as info:
        ADAPTER.validate_python({"type": "pattern", "regex": regex})
    assert info.value.errors()[0]["loc"] == ("pattern", "regex")


def test_question_error_names_the_answer_field() -> None:
    with pytest.raises(ValidationError) as info:
        Question.model_validate({"id": "q", "text": "How many?",
                                 "answer": {"type": "integer", "minimum": 0, "maximum": "10"}})
    assert info.value.errors()[0]["loc"] == ("answer", "integer", "maximum")


def test_json_text_is_strict_too() -> None:
    # the service and the CLIs read JSON text; 10.0 in JSON is a float there as well
    with pytest.raises(ValidationError):
        ADAPTER.validate_json('{"type": "integer", "maximum": 10.0}')
    assert ADAPTER.validate_json('{"type": "integer", "maximum": 10}').maximum == 10
