"""Answer schemas: exact integer ranges, fail-fast errors, cached automata of the right language."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from decision.errors import SchemaError
from decision.joint.toy import lease_sentences
from decision.schemas import (
    AnswerSchema,
    ChoiceAnswer,
    IntegerAnswer,
    JsonAnswer,
    PatternAnswer,
    Question,
    compile_answer,
    tokenizer_context,
)
from decision.schemas.compile import compile_regex
from decision.schemas.json_subset import json_regex, validate
from decision.schemas.ranges import integer_range_regex
from decision.schemas.regex_guard import check_regex
from decision.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def ctx():
    return tokenizer_context(train_tokenizer(lease_sentences(300), vocab_size=600))


@settings(max_examples=300, deadline=None)
@given(st.integers(-(10**7), 10**7), st.integers(0, 10**6), st.integers(-(10**7), 10**7))
def test_range_regex_equals_int_comparison(lo: int, width: int, probe: int) -> None:
    hi = lo + width
    pattern = re.compile(integer_range_regex(lo, hi))
    for x in (probe, lo, hi, lo - 1, hi + 1, 0, -1, (lo + hi) // 2):
        assert (pattern.fullmatch(str(x)) is not None) == (lo <= x <= hi), (lo, hi, x)
    for bad in ("-0", "01", "+1", "", "1.0"):
        assert pattern.fullmatch(bad) is None


def _accepts(automaton, ids: list[int]) -> bool:
    table = {
        (int(s), int(v)): int(d)
        for s, v, d in zip(automaton.src, automaton.tok, automaton.dst, strict=True)
    }
    state = 0
    for v in ids:
        if (state, v) not in table:
            return False
        state = table[(state, v)]
    return bool(automaton.accept[state])


def test_integer_automaton_is_exact(ctx) -> None:
    answer = IntegerAnswer(minimum=-12, maximum=345)
    automaton = compile_answer(answer, ctx)
    eos = ctx.special.eos
    for x in range(-30, 400):
        ids = ctx.tokenizer.encode(str(x)).ids
        padded = ids + [eos] * (automaton.budget - len(ids))
        assert _accepts(automaton, padded) == (-12 <= x <= 345), x
    # nothing may follow the [EOS] padding
    one, two = ctx.tokenizer.encode("1").ids, ctx.tokenizer.encode("2").ids
    assert not _accepts(automaton, one + [eos] + two)


def test_integer_budget_fits_the_longer_bound_on_either_side(ctx) -> None:
    """The slot holds the widest number of the range: "-1000" is five characters where "5" is
    one, so a budget read off the maximum alone could never spell the minimum."""
    eos = ctx.special.eos
    for lo, hi in ((-1000, 5), (0, 100000), (-7, -3)):
        automaton = compile_answer(IntegerAnswer(minimum=lo, maximum=hi), ctx)
        for x in (lo, hi):
            ids = ctx.tokenizer.encode(str(x)).ids
            assert len(ids) <= automaton.budget, (lo, hi, x)
            assert _accepts(automaton, ids + [eos] * (automaton.budget - len(ids))), (lo, hi, x)


def _same_language(a, b) -> bool:
    """Whether two token DFAs accept the same sequences (breadth-first over state pairs)."""
    def table(automaton):
        out: dict[int, dict[int, int]] = {}
        for s, v, d in zip(automaton.src.tolist(), automaton.tok.tolist(), automaton.dst.tolist(),
                           strict=True):
            out.setdefault(s, {})[v] = d
        return out

    ta, tb = table(a), table(b)
    seen, todo = {(0, 0)}, [(0, 0)]
    while todo:
        x, y = todo.pop()
        if bool(a.accept[x]) != bool(b.accept[y]) or ta.get(x, {}).keys() != tb.get(y, {}).keys():
            return False
        for v, nx in ta.get(x, {}).items():
            pair = (nx, tb[y][v])
            if pair not in seen:
                seen.add(pair)
                todo.append(pair)
    return True


@settings(max_examples=60, deadline=None)
@given(st.integers(-(10**5), 10**5), st.integers(0, 10**5))
def test_integer_automaton_equals_the_outlines_route(ctx, lo: int, width: int) -> None:
    # the direct DFA against outlines-core's index of the range regex, on the same tokenizer
    answer = IntegerAnswer(minimum=lo, maximum=lo + width)
    direct = compile_answer(answer, ctx)
    via_regex = compile_regex(integer_range_regex(lo, lo + width), ctx, direct.budget,
                              guarded=False)
    assert _same_language(direct, via_regex), (lo, lo + width)


def test_integer_automaton_with_18_digit_bounds(ctx) -> None:
    # outlines-core needs minutes for this range's regex; the direct construction is exact
    lo, hi = -123456789012345678, 987654321098765432
    automaton = compile_answer(IntegerAnswer(minimum=lo, maximum=hi), ctx)
    eos = ctx.special.eos
    for x in (lo, lo - 1, hi, hi + 1, 0, -1, 10**17, -(10**17), 123456789012345679, 10**18):
        ids = ctx.tokenizer.encode(str(x)).ids
        padded = ids + [eos] * (automaton.budget - len(ids))
        assert _accepts(automaton, padded) == (lo <= x <= hi), x


def test_union_parses_dicts_and_caches(ctx) -> None:
    adapter = TypeAdapter(AnswerSchema)
    choice = adapter.validate_python({"type": "choice", "options": ["a b", "c.d"]})
    assert isinstance(choice, ChoiceAnswer)
    assert compile_answer(choice, ctx) is compile_answer(ChoiceAnswer(options=["a b", "c.d"]), ctx)
    q = Question.model_validate({"id": "q", "text": "t?", "answer": {"type": "boolean"}})
    assert q.answer.parse("yes") is True


@pytest.mark.parametrize(
    "payload",
    [
        {"type": "choice", "options": []},
        {"type": "choice", "options": ["a", "a"]},
        {"type": "choice", "options": [""]},
        {"type": "choice", "options": [str(i) for i in range(257)]},
        {"type": "integer", "minimum": 5, "maximum": 1},
        {"type": "pattern", "regex": "a", "max_tokens": 0},
        {"type": "date"},
    ],
)
def test_invalid_schemas_rejected(payload) -> None:
    with pytest.raises(ValidationError):
        TypeAdapter(AnswerSchema).validate_python(payload)


@pytest.mark.parametrize(
    ("regex", "needle"),
    [("(?=a)b", "look-around"), ("(a)\\1", "back-references"), ("^a$", "anchors"),
     ("(a{100}){100}", "expands"), ("(", "invalid"),
     # a regex that matches nothing was outlines-core's "vocabulary provided is incompatible
     # ... may be due to an encoding issue in your vocabulary", naming the answer, not the regex
     ("[^\\s\\S]", "matches no text"), ("a[^\\s\\S]b", "matches no text"),
     # Rust reads whitespace in braces as a repetition, Python as text: the expanded size read
     # 17 units and the compile ran into the 10 s limit; a{2, 5} compiled as a{2,5}, which
     # Python's matches() reads as the text "a{2, 5}"
     ("(a{ 1000 }){ 1000 }", "counted repetition with whitespace"),
     ("a{2, 5}", "counted repetition with whitespace")],
)
def test_bad_regexes_fail_fast(ctx, regex: str, needle: str) -> None:
    with pytest.raises(SchemaError) as err:
        compile_answer(PatternAnswer(regex=regex, max_tokens=4), ctx, "questions.0.answer")
    assert needle in err.value.message and err.value.field == "questions.0.answer.regex"


def test_dfa_blowup_is_bounded(ctx) -> None:
    # small regex, exponential DFA: stopped by the time guard or the size limit, never a hang
    with pytest.raises(SchemaError):
        compile_regex("[a-z]*a[a-z]{22}", ctx, budget=8, cpu_limit=1)


@pytest.mark.parametrize(
    ("schema", "needle"),
    [
        ({"type": "integer", "minimum": 1}, "minimum"),
        ({"type": "object"}, "properties"),
        ({"type": "string", "pattern": "a+"}, "pattern"),
        ({"oneOf": []}, "type"),
    ],
)
def test_unsupported_json_keywords(ctx, schema, needle) -> None:
    with pytest.raises(SchemaError) as err:
        compile_answer(JsonAnswer(schema=schema), ctx, "q")
    assert needle in err.value.message or needle in (err.value.field or "")


def test_json_validate_subset() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "maxLength": 2}, "b": {"enum": [1, 2]}},
        "required": ["a"],
    }
    assert validate({"a": "xy", "b": 2}, schema)
    assert not validate({"a": "xyz"}, schema)
    assert not validate({"b": 1}, schema)
    assert not validate({"a": "x", "b": True}, schema)


def test_guard_counts_expansion() -> None:
    assert check_regex("[a-h][1-8]", "f") == 2
    assert check_regex("(ab){3}", "f") == 6


def test_guard_refuses_braces_rust_reads_as_a_spaced_repetition() -> None:
    for regex in ("x{ 3 }", "\\\\{ 3 }", "a{3 ,}", "(?x)a{ 3 }", "a{\t3}", "b{3,\u00a05}"):
        with pytest.raises(SchemaError, match="counted repetition with whitespace"):
            check_regex(regex, "f")
    # braces that are text for both: escaped, in a class, or not a repetition
    for regex in ("\\{ 3 }", "[{ 3 }]", "[]{ 3 }]", "[^]{ 3 }]", "a{3,5}", "a{x }"):
        assert check_regex(regex, "f") > 0


def test_guard_refuses_whitespace_verbose_mode_reads_apart(ctx) -> None:
    """In verbose mode Rust skips every Unicode space, in classes too; Python skips only ASCII
    spaces outside classes. "(?x)a" U+3000 "b" compiled to the answer "ab", which Python's
    reading does not match; "(?x)[ a]b" never gave " b"."""
    for regex in ("(?x)a\u3000b", "(?x)a\u00a0b", "(?ix)a\u2028b", "(?x:a\x85b)c", "(?x)[ a]b",
                  "(?x)a[\tb]"):
        with pytest.raises(SchemaError, match="verbose mode") as err:
            compile_answer(PatternAnswer(regex=regex, max_tokens=4), ctx, "q")
        assert err.value.field == "q.regex"
    # read alike: escaped, in a comment, ASCII spaces outside classes, or verbose mode off
    for regex in ("(?x)a\\u3000b", "(?x)a[\\ ]b", "(?x)a b # c\u3000d\n", "a\u3000b",
                  "(?i)[ a]\u00a0", "(?x) [a-z] {2} "):
        assert check_regex(regex, "f") > 0, regex


def test_full_match_semantics_not_leftmost_first(ctx) -> None:
    # outlines-core alone would drop "none" (prefix "no" matches first) and "ab" in "a|ab"
    eos = ctx.special.eos
    choice = compile_answer(ChoiceAnswer(options=["no", "none"]), ctx)
    pattern = compile_answer(PatternAnswer(regex="a|ab", max_tokens=2), ctx)
    for automaton, text in ((choice, "none"), (choice, "no"), (pattern, "ab"), (pattern, "a")):
        ids = [ctx.by_bytes[bytes([b])][0] for b in text.encode()]
        assert _accepts(automaton, ids + [eos] * 4), text


def test_a_verbose_regex_may_end_in_a_comment(ctx) -> None:
    """outlines-core could not build "(?x)[0-9]+ # digits" (a (?x) comment running to the end of
    the regex; refused as "error building NFA"); a newline after it was fine."""
    eos = ctx.special.eos
    for regex in ("(?x)[0-9]+ # digits", "(?ix) [0-9]{2} # two\n# digits"):
        automaton = compile_answer(PatternAnswer(regex=regex, max_tokens=4), ctx)
        ids = [ctx.by_bytes[bytes([b])][0] for b in b"42"]
        assert _accepts(automaton, ids + [eos] * 2), regex
        assert not _accepts(automaton, ids[:1] + [ctx.by_bytes[b"#"][0]] + [eos] * 2), regex
    assert PatternAnswer(regex="(?i-x)a #").regex() == "(?i-x)a #"  # verbose mode off: as is


def test_rust_classes_raise_no_python_warning(ctx) -> None:
    # Python's parser, only screening the regex, warned "Possible nested set" into the log
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compile_answer(PatternAnswer(regex="[[:digit:]]{2}", max_tokens=4), ctx)


def test_budget_too_small_fails_fast(ctx) -> None:
    with pytest.raises(SchemaError) as err:
        compile_answer(PatternAnswer(regex="[0-9]{6}", max_tokens=3), ctx, "q")
    assert err.value.field == "q.max_tokens" and "6 tokens" in err.value.message


def test_oversized_choice_slot_refused(ctx) -> None:
    with pytest.raises(SchemaError) as err:
        compile_answer(ChoiceAnswer(options=["x" + "7" * 300]), ctx, "q")
    assert "at most 256" in err.value.message


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        # not silently unenforced: outlines-core ignores bounds that are not JSON integers
        ({"type": "string", "maxLength": 2.0}, "q.schema.maxLength"),
        ({"type": "string", "maxLength": "3"}, "q.schema.maxLength"),
        ({"type": "string", "minLength": -1}, "q.schema.minLength"),
        ({"type": "array", "items": {"type": "null"}, "maxItems": True}, "q.schema.maxItems"),
        ({"type": "array", "items": {"type": "null"}, "minItems": 3, "maxItems": 1},
         "q.schema.minItems"),
        ({"type": "object", "properties": {"a": {"type": "string", "minLength": 2,
                                                 "maxLength": 1}}},
         "q.schema.properties.a.minLength"),
        # a type list is JSON Schema, not our subset: an error, not a TypeError
        ({"type": ["string", "null"]}, "q.schema.type"),
        ({"type": "object", "properties": {"a": {"type": "null"}}, "required": [["a"]]},
         "q.schema.required"),
        # the regex is the enum alone: a type or const beside it must agree, not be ignored
        ({"type": "string", "enum": ["a", 1]}, "q.schema.type"),
        ({"type": "integer", "const": True}, "q.schema.type"),
        ({"enum": [1, 2], "const": 3}, "q.schema"),
        # outlines-core puts keys unescaped into the regex: the answer did not parse ('a"b')
        # or parsed to another key ('a\\b' as a + backspace)
        ({"type": "object", "properties": {'a"b': {"type": "boolean"}}}, "q.schema.properties"),
        ({"type": "object", "properties": {"a\\b": {"type": "boolean"}}},
         "q.schema.properties"),
        ({"type": "object", "properties": {"a\nb": {"type": "boolean"}}}, "q.schema.properties"),
        ({"enum": [{'k"': 1}]}, "q.schema.enum"),
        ({"const": [{"x": {"\\u0041": 1}}]}, "q.schema.const"),
        # and writes integers beyond 64 bits as floats (1e+30), no longer the enum's value
        ({"enum": [10**30]}, "q.schema.enum"),
        ({"const": 2**63}, "q.schema.const"),
        ({"const": {"n": [-(2**63) - 1]}}, "q.schema.const"),
        # and reads some floats as their neighbour: the answer 123.45678901234568 was not the
        # enum's 123.45678901234567
        ({"enum": [123.45678901234567, "x"]}, "q.schema.enum"),
        ({"const": {"x": [1e-274]}}, "q.schema.const"),
    ],
)
def test_json_schema_errors_name_the_keyword(ctx, schema, field) -> None:
    with pytest.raises(SchemaError) as err:
        compile_answer(JsonAnswer(schema=schema), ctx, "q")
    assert err.value.field == field and err.value.message


def test_json_keys_and_integers_a_regex_gives_back_are_accepted(ctx) -> None:
    for schema in ({"type": "object", "properties": {"é k-1": {"type": "boolean"}}},
                   {"enum": ['a"b', "c\\d", {"k": 'q"'}, 2**63 - 1, -(2**63)]}):
        compile_answer(JsonAnswer(schema=schema), ctx, "q")


@pytest.mark.parametrize(
    ("schema", "field"),
    [({"const": {"a.b": 0}}, "q.schema.const"), ({"enum": [{"?": 0}, 1]}, "q.schema.enum"),
     ({"enum": [[{"x*": "y"}]]}, "q.schema.enum"),
     ({"type": "object", "properties": {"p": {"const": {"(": 1}}}}, "q.schema.properties.p.const"),
     ({"const": {"$": 1}}, "q.schema.const")],
)
def test_json_enum_object_keys_holding_regex_syntax_refused(ctx, schema, field) -> None:
    # outlines-core writes an enum/const object's keys into the regex unescaped: the const
    # {"a.b": 0} allowed the answer {"axb": 0}, {"?": 0} the answer {"": 0}
    with pytest.raises(SchemaError) as err:
        compile_answer(JsonAnswer(schema=schema), ctx, "q")
    assert err.value.field == field and "regex syntax" in err.value.message


def test_json_enum_object_keys_of_plain_text_are_exact(ctx) -> None:
    schema = {"enum": [{"a-b#&~ \u00e9": 1}]}
    automaton = compile_answer(JsonAnswer(schema=schema), ctx, "q")
    for text, valid in (('{"a-b#&~ \u00e9":1}', True), ('{"a-b#&~ e":1}', False)):
        ids = [ctx.by_bytes[bytes([b])][0] for b in text.encode()]
        assert _accepts(automaton, ids + [ctx.special.eos] * (48 - len(ids))) == valid, text
        assert validate(json.loads(text), schema) == valid


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_json_enum_floats_are_given_back_exactly_or_refused(value: float) -> None:
    # the answer a float const allows is that float, never its neighbour
    try:
        regex = json_regex({"const": value})
    except SchemaError as err:
        assert "another number" in err.message
        return
    assert json.loads(re.sub(r"\\(.)", r"\1", regex)) == value


def test_json_enum_floats_of_few_digits_accepted(ctx) -> None:
    values = [0.1, 2.5, -0.0, 1e300, 0.001, 3.141592653589793, 0.30000000000000004]
    automaton = compile_answer(JsonAnswer(schema={"enum": values}, max_tokens=32), ctx)
    for value in values:
        ids = [ctx.by_bytes[bytes([b])][0] for b in json.dumps(value).encode()]
        assert _accepts(automaton, ids + [ctx.special.eos] * (32 - len(ids))), value


def test_json_enum_with_its_type_accepted(ctx) -> None:
    automaton = compile_answer(JsonAnswer(schema={"type": "string", "enum": ["a", "b"]}), ctx)
    ids = [ctx.by_bytes[bytes([b])][0] for b in b'"a"']
    assert _accepts(automaton, ids + [ctx.special.eos])


def test_json_bounds_still_enforced(ctx) -> None:
    automaton = compile_answer(JsonAnswer(schema={"type": "string", "maxLength": 1}), ctx)
    ids = [ctx.by_bytes[bytes([b])][0] for b in b'"ab"']
    assert not _accepts(automaton, ids + [ctx.special.eos] * 4)
    assert _accepts(automaton, ids[:2] + ids[3:] + [ctx.special.eos] * 4)


@pytest.mark.parametrize(
    "schema",
    [{"type": "number"},
     {"type": "object", "properties": {"x": {"type": "array", "items": {"type": "number"}}}}],
)
def test_json_numbers_parse_finite(schema) -> None:
    # outlines-core allows any exponent: "1e+999" would parse to infinity
    pattern = re.compile(json_regex(schema))
    wrap = (lambda n: n) if schema["type"] == "number" else (lambda n: f'{{"x":[{n}]}}')
    for number in ["1e+999", "1E-400", "-2.5e+100"]:
        assert not pattern.fullmatch(wrap(number)), number
    for number in ["1e+99", "-0.25E-7", "12", "3.5"]:
        assert pattern.fullmatch(wrap(number)), number


@pytest.mark.parametrize("regex", ["(yes|no)?", "[0-9]*", "()", "a{0,2}", "x|"])
def test_patterns_matching_the_empty_string(ctx, regex: str) -> None:
    # outlines-core refuses an end-anchored regex that matches the empty string
    automaton = compile_answer(PatternAnswer(regex=regex, max_tokens=3), ctx)
    eos = ctx.special.eos
    assert _accepts(automaton, [eos] * 3)  # the empty answer
    for text in ("yes", "no", "0", "42", "a", "aa", "x", "b", "aaa", "yesno"):
        ids = [ctx.by_bytes[bytes([b])][0] for b in text.encode()]
        assert _accepts(automaton, ids + [eos]) == (re.fullmatch(regex, text) is not None), text


def test_choice_options_read_as_text(ctx) -> None:
    # "[EOS]" and "<a1>" are answers' text, not the special tokens the tokenizer would read
    answer = ChoiceAnswer(options=["[EOS]", "<a1>"])
    automaton = compile_answer(answer, ctx, "q")
    assert automaton.budget == max(len(ctx.canonical_ids(o)) for o in answer.options()) > 1
    assert ctx.special.eos not in ctx.canonical_ids("[EOS]")
    assert ctx.text(ctx.canonical_ids("<a1>")) == "<a1>"


def test_a_system_without_rlimits_is_told_what_it_needs() -> None:
    # Windows has no `resource` module: importing the compiler was a bare ModuleNotFoundError
    code = ("import sys; sys.modules['resource'] = None\n"
            "try:\n    import decision.schemas.compile\n"
            "except ImportError as exc:\n    print(type(exc).__name__, exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ImportError decision runs on Linux or macOS"), proc.stdout
    assert "WSL" in proc.stdout
