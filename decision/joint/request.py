"""Checking a request before it is decoded: its fields, its questions (schemas compiled to
automata), the model's limits, and the plan of its passes (joint and standalone).

Every refusal is a ``DecisionInputError`` naming the request's field. What ``decide_many``
decodes is a ``ParsedRequest``; ``check_request`` (``decision.joint.engine``) hands one out
ahead of time as a ``CheckedRequest``. That each pass fits the model's positions is checked
when its row is laid out (``decision.joint.batch.build_rows``).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from decision.errors import DecisionInputError
from decision.joint.config import COMMITS, EngineConfig
from decision.joint.result import DecisionRequest
from decision.joint.sampler import check_threshold
from decision.schemas.compile import (
    TokenAutomaton,
    TokenizerContext,
    compile_question,
    tokenizer_context,
)
from decision.schemas.models import Question, is_unicode_text
from decision.tokenizer import MAX_QUESTIONS

MODES = ("joint", "standalone", "auto")
MAX_QUESTIONS_PER_REQUEST = 64


@dataclass
class ParsedRequest:
    """A validated request."""

    document_ids: list[int]
    questions: list[Question]
    question_ids: list[list[int]]
    automata: list[TokenAutomaton]
    mode: str
    threshold: float
    max_steps: int | None
    return_probabilities: bool
    commit: str  # what the sampler's minimum fixes with a token (ThresholdSamplerConfig)
    score_options: bool  # closed questions scored option by option, open ones denoised
    passes: list[tuple[str, list[int]]]  # (kind, question indices)
    where: str = ""  # its fields' prefix in errors ("requests.1." in a batch of several)


@dataclass(frozen=True, eq=False)
class CheckedRequest:
    """A request ``check_request`` passed, with its compiled automata and planned passes, so
    ``decide_many`` decodes it without compiling again: the compile cache is bounded, and by
    the time a queued request is decoded its schemas may have been evicted (recompiling them
    would stall the batch, and a compile starved of CPU would fail it). Valid for the model and
    config it was checked with; given another, ``decide_many`` checks the request anew."""

    request: DecisionRequest | dict[str, Any]
    model: Any
    config: EngineConfig
    parsed: ParsedRequest


def model_context(model: Any) -> TokenizerContext:
    """The model's tokenizer context, refusing a model without a tokenizer or whose tokenizer
    has more tokens than its vocabulary."""
    if model.tokenizer is None:
        raise DecisionInputError("the model has no tokenizer", "model")
    ctx = tokenizer_context(model.tokenizer)
    if ctx.vocab_size > model.config.vocab_size:
        raise DecisionInputError(
            f"tokenizer has {ctx.vocab_size} tokens, the model only {model.config.vocab_size}",
            "model",
        )
    return ctx


def max_positions(model: Any) -> int:
    return int(model.config.max_position_embeddings)


@dataclass(frozen=True)
class Limits:
    """What the model's config allows a request: positions, and questions in one pass (a pass
    numbers its questions' segments 1..n after the document's 0, so n < ``num_segments``)."""

    positions: int
    pass_questions: int


def model_limits(model: Any) -> Limits:
    segments = int(getattr(model.config, "num_segments", MAX_QUESTIONS + 1))
    if segments < 2:
        raise DecisionInputError(
            f"the model has {segments} segment(s): it cannot number a question after the "
            "document (num_segments must be >= 2)", "model")
    return Limits(max_positions(model), min(MAX_QUESTIONS, segments - 1))


def validate(
    raw: Any, ctx: TokenizerContext, config: EngineConfig, where: str, limits: Limits
) -> ParsedRequest:
    """``raw`` (a ``DecisionRequest`` or a dict) checked, its schemas compiled and its passes
    planned; ``where`` prefixes its fields in errors."""
    if isinstance(raw, dict):
        try:
            # validated, not unpacked as keywords: a key that is no string is a field error
            raw = DecisionRequest.model_validate(raw)
        except ValidationError as exc:
            error = exc.errors()[0]
            loc = ".".join(str(p) for p in error["loc"])
            raise DecisionInputError(f"invalid request: {error['msg']}", where + loc) from None
    if not isinstance(raw, DecisionRequest):
        raise DecisionInputError(
            f"a request must be a DecisionRequest or a dict, got {type(raw).__name__}",
            where.rstrip(".") or "requests",
        )
    mode = raw.mode
    if mode not in MODES:
        raise DecisionInputError(f"mode must be one of {list(MODES)}, got {mode!r}", where + "mode")
    threshold = raw.threshold
    try:  # numbers.Real: NumPy's scalars too (np.float32 is no float subclass)
        check_threshold(threshold, "threshold")
    except ValueError as exc:
        raise DecisionInputError(str(exc), where + "threshold") from None
    commit = config.commit if raw.commit is None else raw.commit
    if commit not in COMMITS:
        raise DecisionInputError(
            f"commit must be one of {list(COMMITS)} or None, got {commit!r}", where + "commit"
        )
    max_steps = raw.max_steps
    if max_steps is not None and (
        isinstance(max_steps, bool) or not isinstance(max_steps, numbers.Integral) or max_steps < 1
    ):
        raise DecisionInputError(
            f"max_steps must be a positive integer or None, got {max_steps!r}", where + "max_steps"
        )
    max_steps = None if max_steps is None else int(max_steps)
    document = raw.document
    if not isinstance(document, str) or not document.strip():
        raise DecisionInputError("document must be a non-empty string", where + "document")
    if not is_unicode_text(document):
        raise DecisionInputError("document must be Unicode text (it holds a lone surrogate)",
                                 where + "document")
    questions = _questions(raw.questions, mode, where, limits.pass_questions)
    automata = [compile_question(q, ctx, f"{where}questions.{i}") for i, q in enumerate(questions)]
    score_options = bool(raw.score_options)
    # as text: a document or question spelling "[MASK]", "<a1>" or "<doc>" must not put the
    # layout's special tokens where the layout has none
    encode = ctx.canonical_ids
    document_ids = encode(document)
    question_ids = [encode(q.text) for q in questions]
    return ParsedRequest(
        document_ids=document_ids,
        questions=questions,
        question_ids=question_ids,
        automata=automata,
        mode=mode,
        threshold=float(threshold),
        max_steps=max_steps,
        return_probabilities=bool(raw.return_probabilities),
        commit=commit,
        score_options=score_options,
        # the room after <doc> and the document (decision.joint.layout.build_layout)
        passes=plan_passes(mode, automata, config, limits.positions - 1 - len(document_ids),
                     [len(q) for q in question_ids], limits.pass_questions),
        where=where,
    )


def _questions(raw: Any, mode: str, where: str, pass_questions: int) -> list[Question]:
    field = where + "questions"
    if not isinstance(raw, list | tuple) or not raw:
        raise DecisionInputError("questions must be a non-empty list", field)
    if mode == "joint" and len(raw) > pass_questions:
        limit = ("" if pass_questions == MAX_QUESTIONS
                 else f" with this model (num_segments {pass_questions + 1})")
        raise DecisionInputError(
            f"joint mode takes at most {pass_questions} questions{limit}, got {len(raw)}; "
            "use mode='auto' to split them into several passes",
            field,
        )
    if len(raw) > MAX_QUESTIONS_PER_REQUEST:
        raise DecisionInputError(
            f"at most {MAX_QUESTIONS_PER_REQUEST} questions per request, got {len(raw)}", field
        )
    out: list[Question] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(raw):
        try:
            if isinstance(item, BaseModel) and not isinstance(item, Question):
                item = item.model_dump(by_alias=True)  # another layer's question model
            question = item if isinstance(item, Question) else Question.model_validate(item)
        except ValidationError as exc:
            error = exc.errors()[0]
            loc = [str(p) for p in error["loc"]]
            # drop the union tag pydantic inserts after "answer" (answer.choice.options, and
            # answer.integer for a check of the whole answer)
            if len(loc) > 1 and loc[0] == "answer":
                loc = [loc[0], *loc[2:]]
            raise DecisionInputError(
                f"question {i}: {error['msg']}", ".".join([f"{field}.{i}", *loc])
            ) from None
        if question.id in seen:
            raise DecisionInputError(
                f"duplicate question id {question.id!r} (also question {seen[question.id]})",
                f"{field}.{i}.id",
            )
        seen[question.id] = i
        out.append(question)
    return out


def plan_passes(
    mode: str, automata: list[TokenAutomaton], config: EngineConfig, room: int,
    question_lengths: list[int],
    pass_questions: int = MAX_QUESTIONS,
) -> list[tuple[str, list[int]]]:
    """Split a request's questions into joint and standalone passes.

    ``auto`` fills a joint pass while its slots fit ``max_block_tokens`` and its questions and
    slots fit ``room``, the model's positions left after the document (so a long document
    with many questions takes more, smaller passes instead of being refused), and it holds at
    most ``pass_questions`` questions (the model's segments)."""
    indices = list(range(len(automata)))
    if mode == "joint":
        return [("joint", indices)]
    if mode == "standalone":
        return [("standalone", [i]) for i in indices]
    passes: list[tuple[str, list[int]]] = []
    group: list[int] = []
    used = positions = 0
    for i, automaton in enumerate(automata):
        size = automaton.budget + 1  # the <ai> marker and the slot
        if size > config.max_block_tokens:
            passes.append(("standalone", [i]))
            continue
        needs = size + question_lengths[i] + 1  # and the <qi> marker and the question
        if group and (len(group) == pass_questions or used + size > config.max_block_tokens
                      or positions + needs > room):
            passes.append(("joint", group))
            group, used, positions = [], 0, 0
        group.append(i)
        used += size
        positions += needs
    if group:
        passes.append(("joint", group))
    return sorted(passes, key=lambda p: p[1][0])
