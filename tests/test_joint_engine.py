"""decide / decide_many on a random-weight tiny model: validity, equivalences, steps, errors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from decision.errors import DecisionInputError
from decision.joint.engine import EngineConfig, decide, decide_many
from decision.joint.toy import lease_document, toy_model
from decision.schemas.models import Question

DOC = lease_document(2, seed=3)


@pytest.fixture(scope="module")
def model():
    return toy_model()


QUESTIONS = [
    {"id": "payer", "text": "Who pays for repairs?",
     "answer": {"type": "choice", "options": ["tenant", "landlord", "not stated"]}},
    {"id": "timely", "text": "Is the notice timely?", "answer": {"type": "boolean"}},
    {"id": "days", "text": "How many days of notice?",
     "answer": {"type": "integer", "minimum": 0, "maximum": 120}},
]


def _values(decision) -> list:
    return [(a.id, a.value) for a in decision.answers]


def test_answers_parse_and_report(model) -> None:
    d = decide(model, DOC, QUESTIONS, return_probabilities=True)
    assert d.mode == "joint" and len(d.answers) == 3
    assert d.answers[0].value in {"tenant", "landlord", "not stated"}
    assert isinstance(d.answers[1].value, bool)
    assert 0 <= d.answers[2].value <= 120
    for a in d.answers:
        assert 0.0 <= a.confidence <= 1.0
    probs = d.answers[0].option_probabilities
    assert set(probs) == {"tenant", "landlord", "not stated"}
    assert abs(sum(probs.values()) - 1.0) < 1e-5
    assert d.answers[2].option_probabilities is None
    assert set(d.timings) == {"prefill", "denoise", "sampler", "constraint", "total"}
    assert d.timings["total"] >= d.timings["denoise"] > 0
    assert d.timings["total"] >= d.timings["sampler"] >= d.timings["constraint"] > 0


def test_deterministic(model) -> None:
    first = decide(model, DOC, QUESTIONS, threshold=0.5)
    second = decide(model, DOC, QUESTIONS, threshold=0.5)
    assert _values(first) == _values(second)
    assert [a.confidence for a in first.answers] == [a.confidence for a in second.answers]


def test_joint_one_question_equals_standalone(model) -> None:
    for question in QUESTIONS:
        # joint prefills the whole history; standalone commits the question onto the doc cache
        joint = decide(model, DOC, [question], mode="joint",
                       config=EngineConfig(reuse_document_cache=False))
        alone = decide(model, DOC, [question], mode="standalone")
        assert _values(joint) == _values(alone)
        assert joint.steps == alone.steps
        assert joint.answers[0].confidence == pytest.approx(alone.answers[0].confidence, abs=1e-4)


def test_standalone_cache_reuse_equals_recompute(model) -> None:
    reused = decide(model, DOC, QUESTIONS, mode="standalone")
    fresh = decide(model, DOC, QUESTIONS, mode="standalone",
                   config=EngineConfig(reuse_document_cache=False))
    assert reused.mode == "standalone"
    assert _values(reused) == _values(fresh)
    for a, b in zip(reused.answers, fresh.answers, strict=True):
        assert a.confidence == pytest.approx(b.confidence, abs=1e-4)


def _slot_tokens(model, questions) -> int:
    from decision.schemas.compile import compile_answer, tokenizer_context

    ctx = tokenizer_context(model.tokenizer)
    return sum(compile_answer(Question.model_validate(q).answer, ctx).budget for q in questions)


TOKEN = EngineConfig(commit="token")  # the minimum fixes one token alone


def test_steps_bounded_and_threshold_one_is_sequential(model) -> None:
    masked = _slot_tokens(model, QUESTIONS)
    one = decide(model, DOC, QUESTIONS, threshold=1.0, config=TOKEN)
    assert one.steps == masked and one.tokens_per_forward == pytest.approx(1.0)
    for threshold in (0.3, 0.7, 0.9):
        for config in (TOKEN, EngineConfig()):
            d = decide(model, DOC, QUESTIONS, threshold=threshold, config=config)
            assert 1 <= d.steps <= masked


def test_lower_threshold_fewer_steps(model) -> None:
    # once one token picks an option, the rest of the slot is forced (confidence 1)
    questions = [
        {"id": "c", "text": "Which clause?", "answer": {"type": "choice", "options": [
            "the tenant shall give notice", "rent is due monthly"]}},
        {"id": "n", "text": "Fixed?", "answer": {"type": "integer", "minimum": 2026,
                                                 "maximum": 2026}},
    ]
    masked = _slot_tokens(model, questions)
    strict = decide(model, DOC, questions, threshold=1.0, config=TOKEN)
    loose = decide(model, DOC, questions, threshold=0.9, config=TOKEN)
    assert strict.steps == masked
    assert loose.steps < strict.steps
    assert loose.answers[1].value == 2026 and loose.answers[1].confidence == pytest.approx(1.0)


def test_a_scoring_round_stops_within_a_forward_once_its_batch_is_abandoned(model) -> None:
    """Abandonment was looked at only between scoring rounds, and a round of several-token
    options takes several forwards (seconds for 256 long options): a request given up early in
    a round had the whole round decoded for nobody."""
    from decision.errors import DecodeAbandonedError

    scored = {"document": DOC, "questions": QUESTIONS, "score_options": True}
    with _counted_forwards(model) as forwards:
        decide_many(model, [scored])
    assert forwards[0] >= 2  # the whole decode's rounds; its first alone takes several
    asked = [0]

    def abandoned(i: int) -> bool:
        asked[0] += 1
        return asked[0] > 2  # the round begins (1), its first forward (2), then given up

    with _counted_forwards(model) as forwards, pytest.raises(DecodeAbandonedError):
        decide_many(model, [scored], abandoned=abandoned)
    assert forwards[0] == 1


@contextlib.contextmanager
def _counted_forwards(model: Any) -> Iterator[list[int]]:
    """``model.denoise`` counting its calls into the one-item list yielded."""
    count = [0]
    original = model.denoise

    def counting(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return original(*args, **kwargs)

    model.denoise = counting
    try:
        yield count
    finally:
        del model.denoise


def test_threshold_just_below_one_fixes_certain_tokens(model) -> None:
    """Confidences are float32: compared with a threshold rounded to float32, 1 - 1e-9 became
    1.0, and tokens of confidence 1 (the only valid completion) were not "strictly above" it:
    one token a step, as at threshold 1.0."""
    certain = [
        {"id": "n", "text": "Fixed?", "answer": {"type": "integer", "minimum": 2026,
                                                 "maximum": 2026}},
        {"id": "c", "text": "Which clause?", "answer": {"type": "choice", "options": [
            "the tenant shall give notice"]}},
    ]
    assert decide(model, DOC, certain, threshold=1.0, config=TOKEN).steps == _slot_tokens(
        model, certain)
    below = decide(model, DOC, certain, threshold=1 - 1e-9, config=TOKEN)
    assert below.steps == 1
    assert [a.confidence for a in below.answers] == [1.0, 1.0]


def test_a_long_answer_keeps_a_confidence_above_zero() -> None:
    """An answer's confidence is the product of its tokens': in float32, 60 digits of the toy
    model's ~0.1 each underflowed to 0.0, which reads as "certainly wrong"."""
    question = [{"id": "p", "text": "Code?",
                 "answer": {"type": "pattern", "regex": "[0-9]{60}", "max_tokens": 64}}]
    answer = decide(toy_model(max_positions=256), lease_document(3), question).answers[0]
    assert len(answer.text) == 60 and 0.0 < answer.confidence < 1e-30


def test_slot_scope_fixes_one_token_per_slot(model) -> None:
    from decision.schemas.compile import compile_answer, tokenizer_context

    ctx = tokenizer_context(model.tokenizer)
    budgets = [compile_answer(Question.model_validate(q).answer, ctx).budget for q in QUESTIONS]
    per_slot = decide(model, DOC, QUESTIONS, threshold=1.0,
                      config=EngineConfig(min_scope="slot", commit="token"))
    assert per_slot.steps == max(budgets)
    assert per_slot.tokens_per_forward == pytest.approx(sum(budgets) / max(budgets))
    for a in per_slot.answers:
        assert a.text  # every slot decoded to a valid, non-empty answer


def test_answer_commit_decides_one_answer_a_step(model) -> None:
    """At threshold 1.0 nothing passes the threshold: the minimum (by default) picks one token a
    step and commits its whole answer, so the steps are the questions; every answer is valid."""
    whole = decide(model, DOC, QUESTIONS, threshold=1.0)
    assert whole.steps == len(QUESTIONS)
    tokens = _slot_tokens(model, QUESTIONS)
    assert whole.tokens_per_forward == pytest.approx(tokens / len(QUESTIONS))
    for a in whole.answers:
        assert a.text
    at_once = decide(model, DOC, QUESTIONS, threshold=1.0,
                     config=EngineConfig(min_scope="slot", commit="answer"))
    assert at_once.steps == 1


def test_model_methods_delegate(model) -> None:
    via_model = model.decide(DOC, QUESTIONS[:1], mode="standalone", threshold=0.5)
    direct = decide(model, DOC, QUESTIONS[:1], mode="standalone", threshold=0.5)
    assert _values(via_model) == _values(direct)
    assert _values(model.decide_many([{"document": DOC, "questions": QUESTIONS[:1]}])[0])


def test_max_steps_forces_completion(model) -> None:
    d = decide(model, DOC, QUESTIONS, threshold=1.0, max_steps=2)
    assert d.steps == 2
    assert 0 <= d.answers[2].value <= 120


def test_decide_many_equals_single_calls(model) -> None:
    other = lease_document(3, seed=9)
    requests = [
        {"document": DOC, "questions": QUESTIONS, "threshold": 0.8},
        {"document": other, "questions": QUESTIONS[:2], "mode": "standalone"},
        {"document": other, "questions": [QUESTIONS[2]], "threshold": 1.0},
        {"document": DOC, "questions": QUESTIONS, "threshold": 1.0, "commit": "token"},
        {"document": DOC, "questions": QUESTIONS, "threshold": 1.0, "commit": "answer"},
    ]
    batched = decide_many(model, requests)
    # per request: one token a step with "token", one answer a step with "answer"
    assert batched[3].steps == _slot_tokens(model, QUESTIONS)
    assert batched[4].steps == len(QUESTIONS)
    for request, got in zip(requests, batched, strict=True):
        alone = decide(model, **request)
        assert _values(got) == _values(alone)
        assert got.steps == alone.steps and got.mode == alone.mode


def test_abandoned_requests_stop_decoding(model) -> None:
    """A request whose caller gave up is fixed at once (the others decode as if alone), and a
    batch nobody waits for any more stops with DecodeAbandonedError instead of decoding on."""
    from decision.errors import DecodeAbandonedError

    slow = {"document": DOC, "questions": QUESTIONS, "threshold": 1.0, "commit": "token"}
    live = {"document": DOC, "questions": QUESTIONS[:2], "threshold": 0.8}
    asked: list[int] = []

    def abandoned(i: int) -> bool:
        asked.append(i)
        return i == 0

    batched = decide_many(model, [slow, live], abandoned=abandoned)
    assert asked  # asked before the forwards
    assert batched[0].steps == 1  # fixed in its first step, not one token a step
    alone = decide(model, **live)
    assert _values(batched[1]) == _values(alone) and batched[1].steps == alone.steps

    # scored answers: an abandoned request's slots leave the scoring rounds at once
    scored_live = {**live, "score_options": True}
    scored_slow = {**scored_live, "threshold": 1.0}
    batched = decide_many(model, [scored_slow, scored_live], abandoned=lambda i: i == 0)
    assert batched[0].steps == 0  # never forwarded (it was, every round, until fixed)
    assert [a.text for a in batched[0].answers] == ["tenant", "yes"]  # the first options
    alone = decide(model, **scored_live)
    assert _values(batched[1]) == _values(alone) and batched[1].steps == alone.steps

    with _counted_forwards(model) as forwards:
        with pytest.raises(DecodeAbandonedError):
            decide_many(model, [slow, live], abandoned=lambda i: True)
        scored = {**live, "score_options": True}
        with pytest.raises(DecodeAbandonedError):
            decide_many(model, [scored], abandoned=lambda i: True)
    assert forwards[0] == 0


def test_auto_falls_back_to_standalone(model) -> None:
    long_q = {"id": "long", "text": "Quote the clause.",
              "answer": {"type": "pattern", "regex": "[a-z ]+", "max_tokens": 20}}
    questions = [*QUESTIONS, long_q]
    d = decide(model, DOC, questions, mode="auto", config=EngineConfig(max_block_tokens=16))
    assert d.mode == "joint+standalone"
    modes = {a.id: a.mode for a in d.answers}
    assert modes == {"payer": "joint", "timely": "joint", "days": "joint", "long": "standalone"}
    nine = [{"id": f"b{i}", "text": "Late?", "answer": {"type": "boolean"}} for i in range(9)]
    d = decide(model, DOC, nine, mode="auto")
    assert d.mode == "joint" and len(d.answers) == 9


def test_pydantic_questions_accepted(model) -> None:
    objects = [Question.model_validate(q) for q in QUESTIONS]
    assert _values(decide(model, DOC, objects)) == _values(decide(model, DOC, QUESTIONS))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"questions": [{"id": f"q{i}", "text": "t", "answer": {"type": "boolean"}}
                        for i in range(9)]}, "questions"),
        ({"document": ""}, "document"),
        ({"document": "   "}, "document"),
        ({"document": None}, "document"),
        # JSON's "\ud800" decodes to a lone surrogate, which the tokenizer cannot read
        ({"document": "lease \ud800"}, "document"),
        ({"questions": [{"id": "x", "text": "t",
                         "answer": {"type": "choice", "options": ["a", "\ud800"]}}]},
         "questions.0.answer.options"),
        ({"questions": [QUESTIONS[0], QUESTIONS[0]]}, "questions.1.id"),
        ({"questions": [{"id": "x", "text": "t", "answer": {"type": "choice", "options": []}}]},
         "questions.0.answer.options"),
        ({"questions": []}, "questions"),
        ({"questions": [{"id": "x", "text": "t", "answer": {"type": "pattern", "regex": "(?=a)"}}]},
         "questions.0.answer.regex"),
        ({"mode": "fast"}, "mode"),
        ({"threshold": 0.0}, "threshold"),
        ({"threshold": 1.5}, "threshold"),
        ({"threshold": float("nan")}, "threshold"),
        ({"max_steps": 0}, "max_steps"),
        ({"commit": "slot"}, "commit"),
        # a pydantic error of a flag, not a pydantic ValidationError
        ({"return_probabilities": "maybe"}, "return_probabilities"),
        ({"score_options": None}, "score_options"),
        # a check of the whole answer: its field, without pydantic's union tag ("...integer")
        ({"questions": [{"id": "x", "text": "t",
                         "answer": {"type": "integer", "minimum": 5, "maximum": 1}}]},
         "questions.0.answer"),
        # JSON schema errors name the question, as pattern errors do
        ({"questions": [QUESTIONS[0], {"id": "x", "text": "t", "answer": {
            "type": "json", "schema": {"type": ["string", "null"]}}}]},
         "questions.1.answer.schema.type"),
        ({"questions": [{"id": "x", "text": "t", "answer": {
            "type": "json", "schema": {"type": "string", "maxLength": 2.0}}}]},
         "questions.0.answer.schema.maxLength"),
    ],
)
def test_bad_input(model, kwargs, field) -> None:
    args = {"document": DOC, "questions": QUESTIONS, **kwargs}
    with pytest.raises(DecisionInputError) as err:
        decide(model, **args)
    assert err.value.field == field
    assert err.value.message


def test_check_request_validates_without_decoding(model) -> None:
    from decision.joint.engine import check_request

    check_request(model, {"document": DOC, "questions": QUESTIONS})
    with pytest.raises(DecisionInputError) as err:
        check_request(model, {"document": DOC, "questions": QUESTIONS, "mode": "x"})
    assert err.value.field == "mode"


def test_a_checked_request_is_decoded_without_compiling_again(model, monkeypatch) -> None:
    """The service checks (and compiles) a request before queueing it; its schemas may leave
    the bounded compile cache before it is decoded, which compiled them again in the worker."""
    from decision.joint import request as joint_request
    from decision.joint.engine import EngineConfig, check_request

    request = {"document": DOC, "questions": QUESTIONS, "threshold": 0.8}
    checked = check_request(model, request)
    compiled: list[str] = []
    real = joint_request.compile_question

    def counting(question, ctx, field):
        compiled.append(field)
        return real(question, ctx, field)

    monkeypatch.setattr(joint_request, "compile_question", counting)
    got = decide_many(model, [checked])
    assert compiled == []
    assert _values(got[0]) == _values(decide(model, **request))
    assert compiled  # the plain request was compiled
    compiled.clear()
    other = EngineConfig(reuse_document_cache=False)  # another config: checked anew
    assert _values(decide_many(model, [checked], config=other)[0]) == _values(got[0])
    assert len(compiled) == len(QUESTIONS)


def test_check_request_refuses_a_model_without_tokenizer() -> None:
    """check_request runs decide_many's model checks too (it raised AttributeError)."""
    from decision.joint.engine import check_request

    bare = toy_model()
    bare.tokenizer = None
    for call in (lambda: check_request(bare, {"document": DOC, "questions": QUESTIONS}),
                 lambda: decide(bare, DOC, QUESTIONS)):
        with pytest.raises(DecisionInputError) as err:
            call()
        assert err.value.field == "model"


@pytest.mark.parametrize("requests", [
    iter([{"document": DOC, "questions": QUESTIONS}]),  # TypeError: no len()
    {"document": DOC, "questions": QUESTIONS},  # its keys taken for requests
    "requests",  # its characters taken for requests
    None,  # silently no answers
])
def test_requests_must_be_a_list(model, requests) -> None:
    with pytest.raises(DecisionInputError) as err:
        decide_many(model, requests)
    assert err.value.field == "requests" and "list" in err.value.message


def test_max_steps_beyond_int64_is_no_limit(model) -> None:
    """A huge max_steps overflowed building the step-limit tensor (ValueError)."""
    unlimited = decide(model, DOC, QUESTIONS, threshold=0.5)
    huge = decide(model, DOC, QUESTIONS, threshold=0.5, max_steps=2**64)
    assert _values(huge) == _values(unlimited) and huge.steps == unlimited.steps


def test_unknown_request_field_named(model) -> None:
    with pytest.raises(DecisionInputError) as err:
        decide_many(model, [{"document": DOC, "questions": QUESTIONS, "treshold": 0.5}])
    assert err.value.field == "treshold"


def test_request_key_that_is_not_a_string_named(model) -> None:
    """A request dict with a key that is no string was unpacked as keywords: TypeError
    ("keywords must be strings") instead of the DecisionInputError every other bad field gets."""
    with pytest.raises(DecisionInputError) as err:
        decide_many(model, [{"document": DOC, "questions": QUESTIONS, 1: 0.5}])
    assert err.value.field == "1"


def test_request_of_another_type_named(model) -> None:
    request = {"document": DOC, "questions": QUESTIONS}
    with pytest.raises(DecisionInputError) as err:
        decide_many(model, [request, "not a request"])
    assert err.value.field == "requests.1" and "str" in err.value.message


def test_pattern_matching_the_empty_string_decodes(model) -> None:
    # outlines-core refuses an end-anchored regex whose start state matches; an empty answer
    # is a slot of [EOS] padding
    questions = [
        {"id": "opt", "text": "Which, if any?",
         "answer": {"type": "pattern", "regex": "(yes|no)?", "max_tokens": 2}},
        {"id": "none", "text": "Nothing?", "answer": {"type": "pattern", "regex": "()"}},
        {"id": "word", "text": "Word?",
         "answer": {"type": "pattern", "regex": "[a-z]*", "max_tokens": 3}},
    ]
    for commit in ("answer", "token"):
        d = decide(model, DOC, questions, threshold=1.0, commit=commit)
        opt, none, word = d.answers
        assert opt.value in {"", "yes", "no"} and none.value == ""
        assert word.value == "" or word.value.isalpha()


def test_document_too_long() -> None:
    small = toy_model(max_positions=64)
    with pytest.raises(DecisionInputError) as err:
        decide(small, lease_document(10), QUESTIONS[:1])
    assert err.value.field == "document"
    assert "64" in err.value.message and "tokens" in err.value.message


def test_document_too_long_in_a_batch_names_its_request() -> None:
    """decide_many names every other field of a batch's request ``requests.i.``; the pass
    length check, made later, named a too-long document ``document``, whichever request it was."""
    small = toy_model(max_positions=64)
    requests = [{"document": "Short.", "questions": QUESTIONS[1:2]},
                {"document": lease_document(10), "questions": QUESTIONS[1:2]}]
    with pytest.raises(DecisionInputError) as err:
        decide_many(small, requests)
    assert err.value.field == "requests.1.document"
    with pytest.raises(DecisionInputError) as err:
        decide_many(small, requests[1:])  # one request: no prefix, as for its other fields
    assert err.value.field == "document"


class LeftToRight:
    """A different policy through the same contract: fix each row's leftmost masked token."""

    def step(self, state, logits, force=None):
        from decision.joint.sampler import StepReport

        active = state.active()
        positions = active.positions
        tokens, _ = active.decode(state.slot_logp(logits, positions))
        real = positions >= 0
        grid = state.ids.reshape(-1).clone()
        grid[positions[real]] = tokens[real]
        first = state.masked & (state.masked.cumsum(-1) == 1)
        state.ids = torch.where(first, grid.view_as(state.ids), state.ids)
        state.masked = state.masked & ~first
        return StepReport(first.sum(-1), 0.0)


def test_custom_sampler_plugs_in(model) -> None:
    d = decide(model, DOC, QUESTIONS, sampler=LeftToRight())
    assert d.steps == _slot_tokens(model, QUESTIONS)
    assert d.answers[0].value in {"tenant", "landlord", "not stated"}
    assert 0 <= d.answers[2].value <= 120


def test_a_sampler_that_ignores_force_is_named(model) -> None:
    # a step must end the rows in ``force``; one that did not (a policy that fixes nothing, or
    # LeftToRight's one token a step) ran past max_steps, or forever when it fixed nothing
    with pytest.raises(RuntimeError, match="forced row"):
        decide(model, DOC, QUESTIONS, sampler=LeftToRight(), max_steps=1)


def test_options_spelling_special_tokens(model) -> None:
    # option texts such as "[EOS]" or "<a1>" are text: their slot holds their bytes' tokens
    questions = [{"id": "tag", "text": "Which tag?",
                  "answer": {"type": "choice", "options": ["[EOS]", "<a1>", "none"]}}]
    for score in (False, True):
        d = decide(model, DOC, questions, return_probabilities=True, score_options=score)
        answer = d.answers[0]
        assert answer.value in {"[EOS]", "<a1>", "none"} and answer.text == answer.value
        assert sum(answer.option_probabilities.values()) == pytest.approx(1.0, abs=1e-5)


def test_document_and_question_spelling_special_tokens_are_text(model, monkeypatch) -> None:
    # a document or question that spells "[MASK]", "<a1>", "<q2>" or "<doc>" is text: the model
    # reads the layout's own markers as special tokens and nothing else
    from decision.schemas.compile import tokenizer_context

    special = tokenizer_context(model.tokenizer).special
    seen: list[list[int]] = []
    for name in ("prefill", "commit"):
        original = getattr(model, name)

        def record(ids, *args, _original=original, **kwargs):
            seen.extend(ids.tolist())
            return _original(ids, *args, **kwargs)

        monkeypatch.setattr(model, name, record)
    spelled = "[MASK] [PAD] [EOS] <doc> <q2> <a1>"
    question = {**QUESTIONS[1], "text": f"Is {spelled} the notice timely?"}
    decide(model, f"{DOC} {spelled}", [question])
    document, history = seen  # <doc> document; then <q1> question (right-padded)
    assert [t for t in document if t in special.all] == [special.doc]
    assert [t for t in history if t in special.all] == [special.questions[0]]


def test_auto_splits_passes_to_fit_the_model_positions() -> None:
    """A document that fits with each question but not with all of them: ``auto`` was refused
    ("a pass needs N positions") while ``standalone`` answered; it takes smaller passes now."""
    from decision.joint.layout import build_layout
    from decision.schemas.compile import compile_answer, tokenizer_context

    document = lease_document(1, seed=5)
    probe = toy_model()
    ctx = tokenizer_context(probe.tokenizer)
    doc_ids = ctx.canonical_ids(document)

    def pass_length(questions: list[dict]) -> int:
        parsed = [Question.model_validate(q) for q in questions]
        return len(build_layout(ctx.special, doc_ids, [ctx.canonical_ids(q.text) for q in parsed],
                                [compile_answer(q.answer, ctx).budget for q in parsed]).input_ids)

    limit = max(pass_length(QUESTIONS[:1]), pass_length(QUESTIONS[1:]))  # 1 pass, then 2
    assert pass_length(QUESTIONS[:2]) > limit >= pass_length(QUESTIONS[:1])
    small = toy_model(max_positions=limit)
    with pytest.raises(DecisionInputError, match="positions"):
        decide(small, document, QUESTIONS, mode="joint")
    auto = decide(small, document, QUESTIONS, mode="auto")
    assert auto.mode == "joint" and [a.mode for a in auto.answers] == ["joint"] * 3
    first = decide(small, document, QUESTIONS[:1], mode="joint")
    rest = decide(small, document, QUESTIONS[1:], mode="joint")
    assert _values(auto) == _values(first) + _values(rest)
    roomy = decide(toy_model(max_positions=pass_length(QUESTIONS)), document, QUESTIONS,
                   mode="auto")
    assert roomy.mode == "joint"


@pytest.mark.parametrize("kwargs", [
    {"min_tokens": 0, "threshold": 1.0},  # fixed nothing a step: the decode loop never ended
    {"min_tokens": -1}, {"min_tokens": 1.5}, {"min_tokens": True},
    {"threshold": float("nan")}, {"threshold": 0.0}, {"threshold": -0.5}, {"threshold": 1.5},
    {"threshold": True}, {"threshold": "0.9"},
    {"min_scope": "request"}, {"commit": "slot"},  # silently decoded as "row" and "token"
])
def test_sampler_config_refuses_bad_values(kwargs) -> None:
    from decision.joint.sampler import ThresholdSamplerConfig

    field = next(iter(kwargs))
    with pytest.raises(ValueError, match=f"ThresholdSamplerConfig.{field}"):
        ThresholdSamplerConfig(**kwargs)


def test_sampler_config_accepts_the_edges() -> None:
    from decision.joint.sampler import ThresholdSamplerConfig

    for config in (ThresholdSamplerConfig(threshold=1.0), ThresholdSamplerConfig(threshold=1e-9),
                   ThresholdSamplerConfig(threshold=1, min_tokens=3, min_scope="slot",
                                          commit="token")):
        assert 0.0 < config.threshold <= 1.0


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"max_block_tokens": 0}, "max_block_tokens"),  # auto silently ran every question alone
    ({"max_block_tokens": 2.5}, "max_block_tokens"),
    ({"reuse_document_cache": "no"}, "reuse_document_cache"),
    ({"min_scope": "request"}, "min_scope"),  # silently decoded as "row"
    ({"commit": "slot"}, "commit"),  # was blamed on each request's "commit" field
    ({"scoring_orders": ()}, "scoring_orders"),  # failed only after denoising the open answers
    ({"scoring_orders": "left_to_right"}, "scoring_orders"),  # read as the orders "l", "e", ...
    ({"scoring_orders": ("left_to_right", "sideways")}, "sideways"),
    ({"scoring_orders": ("positions:1,1",)}, "positions:1,1"),
])
def test_engine_config_refuses_bad_values(kwargs, field) -> None:
    with pytest.raises(ValueError, match=field):
        EngineConfig(**kwargs)


def test_engine_config_orders_as_a_list_equal_the_tuple() -> None:
    listed = EngineConfig(scoring_orders=["right_to_left", "positions:1,0"])  # type: ignore[arg-type]
    assert listed == EngineConfig(scoring_orders=("right_to_left", "positions:1,0"))
    hash(listed)


def test_numpy_scalars_are_numbers(model) -> None:
    """np.float32 is no float subclass and np.int64 no int: they were refused as "must be a
    number in (0, 1], got np.float32(0.5)" and "must be a positive integer, got np.int64(2)"."""
    import numpy as np

    plain = decide(model, DOC, QUESTIONS, threshold=0.5, max_steps=2)
    numpy = decide(model, DOC, QUESTIONS, threshold=np.float32(0.5), max_steps=np.int64(2))
    assert _values(numpy) == _values(plain) and numpy.steps == plain.steps <= 2
    for bad in (np.float32("nan"), np.float64(1.5)):
        with pytest.raises(DecisionInputError):
            decide(model, DOC, QUESTIONS, threshold=bad)
    with pytest.raises(DecisionInputError):
        decide(model, DOC, QUESTIONS, max_steps=np.int64(0))
    from decision.joint.sampler import ThresholdSamplerConfig

    assert ThresholdSamplerConfig(threshold=np.float32(0.5), min_tokens=np.int64(2)).min_tokens == 2


def test_a_model_with_fewer_segments_takes_fewer_questions_a_pass() -> None:
    """A checkpoint whose num_segments cannot number 8 questions failed inside the backbone
    ("segment_ids must lie in [0, 3)") for a joint request of 3 questions, and auto mode packed
    8 a pass; the engine now names the limit and auto mode packs what the model numbers."""
    small = toy_model(num_segments=3)
    questions = [{"id": f"q{i}", "text": f"Is rent due on day {i}?",
                  "answer": {"type": "boolean"}} for i in range(3)]
    with pytest.raises(DecisionInputError, match="at most 2 questions with this model") as err:
        decide(small, DOC, questions, mode="joint")
    assert err.value.field == "questions"
    d = decide(small, DOC, questions, mode="auto")
    assert [a.value in (True, False) for a in d.answers] == [True] * 3
    assert decide(small, DOC, questions[:2], mode="joint").mode == "joint"
    with pytest.raises(DecisionInputError, match="num_segments must be >= 2"):
        decide(toy_model(num_segments=1), DOC, questions[:1], mode="standalone")


def test_toy_model_leaves_the_callers_random_state() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    toy_model(seed=5)
    assert torch.equal(torch.rand(3), expected)


def _free_state(logits_rows: list[list[float]]) -> tuple[Any, torch.Tensor]:
    """One row of four masked tokens in two slots of two over a 3-token vocabulary, each slot's
    automaton accepting every sequence (so a token's confidence is its softmax probability)."""
    from decision.joint.sampler import BlockState
    from decision.schemas.compile import TokenAutomaton

    free = TokenAutomaton(1, torch.zeros(3, dtype=torch.long), torch.arange(3),
                          torch.zeros(3, dtype=torch.long), torch.tensor([True]), budget=2)
    state = BlockState(
        ids=torch.zeros(1, 4, dtype=torch.long), masked=torch.ones(1, 4, dtype=torch.bool),
        confidence=torch.ones(1, 4), positions=torch.tensor([[0, 1], [2, 3]]),
        slot_automata=[free, free], eos_id=2,
    )
    return state, torch.tensor([logits_rows])


def test_a_row_with_a_token_above_the_threshold_gets_no_extra_answer() -> None:
    """The minimum applies to a row that fixed fewer than ``min_tokens``: one token above the
    threshold is enough, and its answer is not committed whole with it (``<=`` did)."""
    from decision.joint.sampler import ConstrainedThresholdSampler, ThresholdSamplerConfig

    state, logits = _free_state([[9.0, 0.0, 0.0], [0.2, 0.0, 0.0], [0.3, 0.0, 0.0],
                                 [0.1, 0.0, 0.0]])
    sampler = ConstrainedThresholdSampler(ThresholdSamplerConfig(threshold=0.9, commit="answer"))
    report = sampler.step(state, logits)
    assert report.fixed.tolist() == [1]
    assert state.masked.tolist() == [[False, True, True, True]]
    assert state.confidence[0, 0] > 0.9


def test_the_minimum_takes_the_lowest_column_of_equally_confident_tokens() -> None:
    from decision.joint.sampler import ConstrainedThresholdSampler, ThresholdSamplerConfig

    # positions 1 and 2 are certain (confidence 1.0, not above threshold 1.0), 0 and 3 are not
    state, logits = _free_state([[1.0, 0.0, 0.0], [200.0, 0.0, 0.0], [200.0, 0.0, 0.0],
                                 [1.0, 0.0, 0.0]])
    sampler = ConstrainedThresholdSampler(ThresholdSamplerConfig(threshold=1.0, commit="token"))
    sampler.step(state, logits)
    assert state.masked.tolist() == [[True, False, True, True]]


def test_one_forward_for_every_token_reports_them_all_per_forward(model) -> None:
    certain = [
        {"id": "n", "text": "Fixed?", "answer": {"type": "integer", "minimum": 2026,
                                                 "maximum": 2026}},
        {"id": "c", "text": "Which clause?", "answer": {"type": "choice", "options": [
            "the tenant shall give notice"]}},
    ]
    d = decide(model, DOC, certain, threshold=0.5)
    assert d.steps == 1
    assert d.tokens_per_forward == pytest.approx(_slot_tokens(model, certain))
