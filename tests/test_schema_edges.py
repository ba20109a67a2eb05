"""Answer schemas at their edges: every accepted regex gives answers that Python's reading of
it matches in full (the oracle of ``decision.schemas.matches`` and the property tests), or it
is refused naming the field."""

from __future__ import annotations

import re

import pytest

from decision.errors import SchemaError
from decision.joint.engine import decide
from decision.joint.toy import lease_document, toy_model
from decision.schemas import PatternAnswer, compile_answer, tokenizer_context
from decision.schemas.regex_guard import check_regex


@pytest.fixture(scope="module")
def model():
    return toy_model(seed=4)


@pytest.fixture(scope="module")
def ctx(model):
    return tokenizer_context(model.tokenizer)


# Verbose mode (x flag) read apart by Rust and Python: Rust starts a comment at a "#" inside a
# character class too ("(?x)[a#]" newline "]" is the class [a] for Rust, [a#] followed by "]"
# for Python: the answer "a" matched no Python reading); a "[" in a comment hid a spaced
# repetition from the check that only skipped classes ("b{ 2 }" is "bb" for Rust, "b{2}" for
# Python); and verbose mode was taken to start at the regex's start, so a literal "#" before a
# scoped "(?x:...)" group hid the group's non-ASCII space ("a#(?x:b" U+3000 "c)": Rust gave
# "a#bc").
READ_APART = ["(?x)[a#]\n]", "(?x)a[#]\nb]", "(?ix)[^#]\n]", "a#(?x:[b#]\n])",
              "(?x)a # [\nb{ 2 }", "(?x)a # [\nb{2 }", "a#(?x:b\u3000c)", "a#(?x:[b ]c)"]


@pytest.mark.parametrize("regex", READ_APART)
def test_regexes_verbose_mode_reads_apart_are_refused(ctx, regex: str) -> None:
    with pytest.raises(SchemaError) as err:
        compile_answer(PatternAnswer(regex=regex, max_tokens=6), ctx, "questions.0.answer")
    assert err.value.field == "questions.0.answer.regex"
    assert "verbose mode" in err.value.message or "counted repetition" in err.value.message


@pytest.mark.parametrize("regex", READ_APART[:2] + READ_APART[4:5] + READ_APART[6:7])
def test_decide_refuses_them_instead_of_answering_outside_the_regex(model, regex: str) -> None:
    question = {"id": "p", "text": "Which?",
                "answer": {"type": "pattern", "regex": regex, "max_tokens": 6}}
    try:
        answer = decide(model, lease_document(2, seed=5), [question]).answers[0]
    except SchemaError as err:
        assert err.field == "questions.0.answer.regex"
        return
    assert re.fullmatch(regex, answer.text), (regex, answer.text)


@pytest.mark.parametrize("regex", [
    "(?x)a # b{ 3 } [ \u3000\nc",  # in a comment: all text
    "(?x:a b)[# ]", "(?x)(?-x:[# ])a", "(?x)(?-x:a\u3000)b ",  # where verbose mode is off
    "[#]\u3000(?x:a)", "(?x)\\#[\\#]\\ ", "(?i)(?x)a b",
])
def test_what_both_read_alike_is_accepted(regex: str) -> None:
    assert check_regex(regex, "f") > 0
