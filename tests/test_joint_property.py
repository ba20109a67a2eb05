"""Property: every answer, in joint and standalone mode, validates against its schema (100%)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decision.joint.engine import EngineConfig, decide
from decision.joint.toy import lease_document, toy_model
from decision.schemas.json_subset import validate
from decision.schemas.models import Question


@pytest.fixture(scope="module")
def model():
    return toy_model(seed=4)


WORDS = st.text(alphabet="abcdefghij klmn0123456789-.", min_size=1, max_size=12)
PATTERNS = [("[a-c]{3}", 3), ("(ab|c)+", 1), ("[0-9]{1,4}", 1), ("x|xy|xyz", 1),
            ("[A-H][1-8]", 2), ("(yes|no|maybe)[!?]", 2), ("é[a-z]?", 2)]
DOC = lease_document(2, seed=5)
JSON_SCHEMAS = [
    {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string",
                                                                     "maxLength": 3}}},
    {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 3},
    {"enum": ["late", "on time", 3]},
]


@st.composite
def answer_schemas(draw) -> dict:
    kind = draw(st.sampled_from(["choice", "boolean", "integer", "number", "pattern", "json"]))
    if kind == "choice":
        return {"type": kind, "options": draw(st.lists(WORDS, min_size=1, max_size=5,
                                                        unique=True))}
    if kind == "integer":
        lo = draw(st.integers(-(10**6), 10**6))
        return {"type": kind, "minimum": lo, "maximum": lo + draw(st.integers(0, 10**5))}
    if kind == "number":
        return {"type": kind, "max_tokens": draw(st.integers(1, 5))}
    if kind == "pattern":
        regex, shortest = draw(st.sampled_from(PATTERNS))
        return {"type": kind, "regex": regex, "max_tokens": shortest + draw(st.integers(0, 3))}
    if kind == "json":
        return {"type": kind, "schema": draw(st.sampled_from(JSON_SCHEMAS)), "max_tokens": 20}
    return {"type": kind}


def _valid(question: Question, value, text: str) -> bool:
    answer = question.answer
    kind = answer.type
    if kind == "choice":
        return value in answer.options()
    if kind == "boolean":
        return isinstance(value, bool) and text in ("yes", "no")
    if kind == "integer":
        return isinstance(value, int) and answer.minimum <= value <= answer.maximum
    if kind == "number":
        return isinstance(value, float) and re.fullmatch(answer.regex(), text) is not None
    if kind == "pattern":
        return re.fullmatch(answer.pattern, text) is not None
    return validate(value, answer.json_schema)


@settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.data_too_large])
@given(
    schemas=st.lists(answer_schemas(), min_size=1, max_size=3),
    threshold=st.sampled_from([0.3, 0.9]),
    max_steps=st.sampled_from([None, None, 2]),
    policy=st.sampled_from([EngineConfig(), EngineConfig(min_scope="slot"),
                            EngineConfig(commit="token")]),
)
def test_every_answer_validates(model, schemas, threshold, max_steps, policy) -> None:
    questions = [
        Question.model_validate({"id": f"q{i}", "text": f"Question {i}?", "answer": s})
        for i, s in enumerate(schemas)
    ]
    for mode in ("joint", "standalone"):
        decision = decide(model, DOC, questions, mode=mode, threshold=threshold,
                          max_steps=max_steps, config=policy)
        assert decision.mode == mode
        for question, answer in zip(questions, decision.answers, strict=True):
            assert answer.id == question.id
            assert _valid(question, answer.value, answer.text), (question.answer, answer)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(schemas=st.lists(
    st.one_of(st.just({"type": "boolean"}),
              st.lists(WORDS, min_size=1, max_size=12, unique=True).map(
                  lambda options: {"type": "choice", "options": options}),
              st.integers(0, 50).map(
                  lambda low: {"type": "integer", "minimum": low, "maximum": low + 30})),
    min_size=1, max_size=8))
def test_every_scored_answer_validates(model, schemas) -> None:
    """score_options: every answer validates; a closed question's is the most probable of its
    options (the open ones are denoised), in both modes."""
    questions = [
        Question.model_validate({"id": f"q{i}", "text": f"Question {i}?", "answer": s})
        for i, s in enumerate(schemas)
    ]
    for mode in ("joint", "standalone"):
        decision = decide(model, DOC, questions, mode=mode, return_probabilities=True,
                          score_options=True)
        assert decision.mode == mode
        for question, answer in zip(questions, decision.answers, strict=True):
            assert _valid(question, answer.value, answer.text), (question.answer, answer)
            if question.answer.options() is None:
                assert answer.option_probabilities is None
                continue
            probs = answer.option_probabilities
            assert abs(sum(probs.values()) - 1.0) < 1e-4
            assert probs[answer.text] == max(probs.values())
