"""``decide`` / ``decide_many``: validate requests, lay out passes, run the denoising loop.

Every request becomes one or more *passes*: a joint pass holds up to 8 questions in one block, a
standalone pass one question. All passes of all requests run as rows of one batch: documents
are prefilled once per request, each row's cache is its document's cache with the row's
questions committed onto it, and every denoising step is one batched ``denoise`` forward
followed by one sampler step.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from pydantic import BaseModel, ValidationError

from decision.errors import DecisionInputError, DecodeAbandonedError
from decision.joint.layout import Layout, build_layout
from decision.joint.result import Answer, Decision, DecisionRequest
from decision.joint.sampler import (
    BlockState,
    ConstrainedThresholdSampler,
    Sampler,
    StepReport,
    ThresholdSamplerConfig,
    check_choice,
    check_threshold,
)
from decision.joint.scoring import ORDERS as SCORING_ORDERS
from decision.joint.scoring import ScoredOptions, SlotOptions, order_positions, score_options
from decision.schemas.compile import (
    TokenAutomaton,
    TokenizerContext,
    compile_question,
    literal_automaton,
    tokenizer_context,
)
from decision.schemas.models import Question, is_unicode_text
from decision.tokenizer import MAX_QUESTIONS

MODES = ("joint", "standalone", "auto")
COMMITS = ("answer", "token")
MAX_QUESTIONS_PER_REQUEST = 64
SCORING_MAX_ROWS = 512  # rows of one option-scoring forward at most
SCORING_LOGITS_BUDGET = 2**26  # and at most this many logits (256 MB in fp32)


@dataclass(frozen=True)
class EngineConfig:
    """Decoding options beyond the per-request ones.

    ``max_block_tokens``: the largest answer block ``auto`` puts in one joint pass (a question
    whose slot alone is larger runs standalone). ``reuse_document_cache``: prefill each document
    once and commit the questions onto it; off, every row prefills its whole history.
    ``min_scope``: the default sampler's "at least one token a step" applies per pass ("row")
    or per answer slot ("slot"); ``commit``: a token that rule picks is fixed with the rest of
    its answer ("answer", the default) or alone ("token"); see ``ThresholdSamplerConfig``.
    ``scoring_orders``: the decoding orders a request with ``score_options`` averages over
    (``decision.joint.scoring``).
    """

    max_block_tokens: int = 256
    reuse_document_cache: bool = True
    min_scope: Literal["row", "slot"] = "row"
    commit: Literal["token", "answer"] = "answer"
    scoring_orders: tuple[str, ...] = SCORING_ORDERS

    def __post_init__(self) -> None:
        # refused when built, not when a request meets them: an unknown scoring order used to
        # fail only after the open answers were denoised, a bad ``commit`` was blamed on the
        # request's field, and a bad ``min_scope`` or ``max_block_tokens`` decoded silently
        limit = self.max_block_tokens
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(
                f"EngineConfig.max_block_tokens must be an integer >= 1, got {limit!r}")
        if not isinstance(self.reuse_document_cache, bool):
            raise ValueError("EngineConfig.reuse_document_cache must be a bool, got "
                             f"{self.reuse_document_cache!r}")
        check_choice(self.min_scope, ("row", "slot"), "EngineConfig.min_scope")
        check_choice(self.commit, COMMITS, "EngineConfig.commit")
        orders = self.scoring_orders
        if isinstance(orders, str) or not isinstance(orders, list | tuple) or not orders:
            raise ValueError("EngineConfig.scoring_orders must be a non-empty tuple of orders, "
                             f"got {orders!r}")
        for order in orders:
            if not isinstance(order, str):
                raise ValueError(
                    f"EngineConfig.scoring_orders: an order is a string, got {order!r}")
            order_positions(order, 1)  # ValueError naming the order and the known ones
        object.__setattr__(self, "scoring_orders", tuple(orders))  # a list: hashable, comparable


@dataclass
class _Request:
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
    parsed: _Request


@dataclass
class _Row:
    """One pass of one request: a row of the batch."""

    request: int
    kind: str
    questions: list[int]
    layout: Layout


def decide(
    model: Any,
    document: Any,
    questions: Any,
    mode: Any = "joint",
    threshold: Any = 0.9,
    max_steps: Any = None,
    return_probabilities: bool = False,
    *,
    commit: Any = None,
    score_options: bool = False,
    sampler: Sampler | None = None,
    config: EngineConfig | None = None,
) -> Decision:
    """Answer ``questions`` about ``document`` with ``model`` (see docs/decoding.md).

    ``commit``: "answer" or "token" (``ThresholdSamplerConfig``); None takes ``config``'s.
    ``score_options``: answer ``choice``/``boolean`` questions by scoring every option
    (``decision.joint.scoring``) instead of denoising them; the other questions are denoised
    first, with those slots masked, and the options are scored given their answers, in rounds
    that fix the surest first (docs/decoding.md, "Option scoring").
    """
    # a dict, so that a malformed argument is a DecisionInputError naming it (see _validate)
    request = dict(
        document=document, questions=questions, mode=mode, threshold=threshold,
        max_steps=max_steps, return_probabilities=return_probabilities, commit=commit,
        score_options=score_options,
    )
    return decide_many(model, [request], sampler=sampler, config=config)[0]


def decide_many(
    model: Any,
    requests: Sequence[DecisionRequest | dict[str, Any] | CheckedRequest],
    *,
    sampler: Sampler | None = None,
    config: EngineConfig | None = None,
    abandoned: Callable[[int], bool] | None = None,
) -> list[Decision]:
    """Answer several requests in one batch: shared prefill and denoising forwards.

    Timings are those of the whole batch, reported on every request.

    ``abandoned(i)``, asked before every forward, says whether request ``i`` is no longer wanted
    (its caller gave up): its rows are then fixed at once (the rest of each answer in one step,
    as when ``max_steps`` runs out) so the others need not wait on it, and once every request
    is abandoned ``DecodeAbandonedError`` is raised instead of decoding on.
    """
    config = config or EngineConfig()
    ctx = _context(model)
    if not isinstance(requests, list | tuple):
        # a dict or a string would be iterated as keys or characters, an iterator has no len
        raise DecisionInputError(
            f"requests must be a list of requests, got {type(requests).__name__}", "requests"
        )
    if not requests:
        return []
    prefix = len(requests) > 1
    parsed = [
        r.parsed if isinstance(r, CheckedRequest) and r.model is model and r.config == config
        else _validate(r.request if isinstance(r, CheckedRequest) else r, ctx, config,
                       f"requests.{i}." if prefix else "", _limits(model))
        for i, r in enumerate(requests)
    ]
    with torch.inference_mode():
        return _run(model, ctx, parsed, config, sampler, abandoned)


# ---------------------------------------------------------------------- validation


def check_request(
    model: Any, request: DecisionRequest | dict[str, Any], config: EngineConfig | None = None
) -> CheckedRequest:
    """Run every check ``decide_many`` makes before decoding (schemas compiled, pass lengths
    against the model), raising ``DecisionInputError``; decodes nothing. The result, given to
    ``decide_many`` with the same model and config, is decoded without compiling again."""
    config = config or EngineConfig()
    ctx = _context(model)
    parsed = _validate(request, ctx, config, "", _limits(model))
    _rows(model, ctx, [parsed])
    return CheckedRequest(request, model, config, parsed)


def _context(model: Any) -> TokenizerContext:
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


def _max_positions(model: Any) -> int:
    return int(model.config.max_position_embeddings)


@dataclass(frozen=True)
class _Limits:
    """What the model's config allows a request: positions, and questions in one pass (a pass
    numbers its questions' segments 1..n after the document's 0, so n < ``num_segments``)."""

    positions: int
    pass_questions: int


def _limits(model: Any) -> _Limits:
    segments = int(getattr(model.config, "num_segments", MAX_QUESTIONS + 1))
    if segments < 2:
        raise DecisionInputError(
            f"the model has {segments} segment(s): it cannot number a question after the "
            "document (num_segments must be >= 2)", "model")
    return _Limits(_max_positions(model), min(MAX_QUESTIONS, segments - 1))


def _validate(
    raw: Any, ctx: TokenizerContext, config: EngineConfig, where: str, limits: _Limits
) -> _Request:
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
    return _Request(
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
        passes=_plan(mode, automata, config, limits.positions - 1 - len(document_ids),
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


def _plan(
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


# ---------------------------------------------------------------------- decoding


def _rows(model: Any, ctx: TokenizerContext, requests: list[_Request]) -> list[_Row]:
    limit = _max_positions(model)
    rows: list[_Row] = []
    for r, req in enumerate(requests):
        for kind, picked in req.passes:
            layout = build_layout(
                ctx.special,
                req.document_ids,
                [req.question_ids[i] for i in picked],
                [req.automata[i].budget for i in picked],
            )
            if len(layout.input_ids) > limit:
                raise DecisionInputError(
                    f"document has {len(req.document_ids)} tokens; with the questions and answer "
                    f"slots a pass needs {len(layout.input_ids)} positions but the model accepts "
                    f"at most {limit}",
                    req.where + "document",  # checked after _validate: name its request
                )
            rows.append(_Row(r, kind, picked, layout))
    return rows


def _pad(seqs: list[list[int]], value: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad ``seqs`` into ``[B, T]`` ids and a bool mask."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), value, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.bool)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = True
    return ids, mask


def _prefill(
    model: Any, ctx: TokenizerContext, requests: list[_Request], rows: list[_Row], reuse: bool
) -> Any:
    """The history cache of every row (document prefilled once per request when ``reuse``)."""
    device = model.device
    pad = ctx.special.pad
    if not reuse:
        ids, mask = _pad([row.layout.history_ids for row in rows], pad)
        seg, _ = _pad([row.layout.history_segments for row in rows], 0)
        return model.prefill(ids.to(device), mask.to(device), seg.to(device))
    docs = [[ctx.special.doc, *req.document_ids] for req in requests]
    ids, mask = _pad(docs, pad)
    doc_cache = model.prefill(ids.to(device), mask.to(device), torch.zeros_like(ids).to(device))
    cache = doc_cache.index_select([row.request for row in rows])
    tails = [row.layout.history_ids[row.layout.document_length :] for row in rows]
    tail_seg = [row.layout.history_segments[row.layout.document_length :] for row in rows]
    ids, mask = _pad(tails, pad)
    seg, _ = _pad(tail_seg, 0)
    return model.commit(ids.to(device), cache, mask.to(device), seg.to(device))


def _block_state(
    ctx: TokenizerContext, requests: list[_Request], rows: list[_Row]
) -> tuple[BlockState, torch.Tensor, torch.Tensor, list[tuple[int, int]],
           dict[int, SlotOptions]]:
    """Initial block state, block mask and segments; ``slots[k] = (row, question)``; and the
    slots answered by scoring (``score_options``: closed questions) by slot index. Those stay
    ``[MASK]`` in the block but are not denoised."""
    ids, block_mask = _pad([row.layout.block for row in rows], ctx.special.pad)
    seg, _ = _pad([row.layout.block_segments for row in rows], 0)
    width = ids.shape[1]
    spans = [(b, span) for b, row in enumerate(rows) for span in row.layout.block_slots()]
    longest = max(span.length for _, span in spans)
    positions = torch.full((len(spans), longest), -1, dtype=torch.long)
    automata: list[TokenAutomaton] = []
    slots: list[tuple[int, int]] = []
    option_automata: list[list[TokenAutomaton] | None] = []
    masked = ids == ctx.special.mask
    scored: dict[int, SlotOptions] = {}
    for k, (b, span) in enumerate(spans):
        positions[k, : span.length] = b * width + span.start + torch.arange(span.length)
        row = rows[b]
        question = row.questions[span.question]
        slots.append((b, question))
        req = requests[row.request]
        automata.append(req.automata[question])
        options = req.questions[question].answer.options()
        if req.score_options and options is not None:
            scored[k] = SlotOptions(b, span.start, tuple(
                _canonical(ctx, option, span.length) for option in options))
            masked[b, span.start : span.start + span.length] = False  # scored, not denoised
            option_automata.append(None)
        elif req.return_probabilities and options is not None:
            option_automata.append([literal_automaton(o, ctx, span.length) for o in options])
        else:
            option_automata.append(None)
    state = BlockState(
        ids=ids,
        masked=masked,
        confidence=torch.ones(ids.shape),
        positions=positions,
        slot_automata=automata,
        eos_id=ctx.special.eos,
        option_automata=option_automata,
    )
    return state, block_mask, seg, slots, scored


def _prefilled(
    model: Any, ctx: TokenizerContext, requests: list[_Request], config: EngineConfig
) -> tuple[list[_Row], Any, float]:
    """The rows (passes) of ``requests``, their history cache and the seconds it took."""
    start = time.perf_counter()
    rows = _rows(model, ctx, requests)
    cache = _prefill(model, ctx, requests, rows, config.reuse_document_cache)
    _sync(model.device)
    return rows, cache, time.perf_counter() - start


def _timings(prefill_s: float, denoise_s: float, sampler_s: float, constraint_s: float,
             total_s: float) -> dict[str, float]:
    """A batch's timings in ms (docs/decoding.md, "Per-request report")."""
    return {"prefill": prefill_s * 1e3, "denoise": denoise_s * 1e3, "sampler": sampler_s * 1e3,
            "constraint": constraint_s * 1e3, "total": total_s * 1e3}


def _run(
    model: Any,
    ctx: TokenizerContext,
    requests: list[_Request],
    config: EngineConfig,
    sampler: Sampler | None,
    abandoned: Callable[[int], bool] | None = None,
) -> list[Decision]:
    start = time.perf_counter()
    device = model.device
    rows, cache, prefill_s = _prefilled(model, ctx, requests, config)
    state, block_mask, seg, slots, scored = _block_state(ctx, requests, rows)
    samplers = _samplers(requests, sampler, config)
    row_request = torch.tensor([row.request for row in rows])

    def gone() -> torch.Tensor:
        """Rows of abandoned requests; raises once every request is abandoned."""
        if abandoned is None:
            return torch.zeros(len(rows), dtype=torch.bool)
        flags = torch.tensor([bool(abandoned(i)) for i in range(len(requests))])
        if bool(flags.all()):
            raise DecodeAbandonedError("every request of the batch was abandoned")
        return flags[row_request]

    row_steps = torch.zeros(len(rows), dtype=torch.long)
    # a request's forwards: those any of its rows took part in (its standalone passes share
    # the denoising forwards, but a scored pass's levels come after the other passes' steps)
    request_steps = torch.zeros(len(requests), dtype=torch.long)

    def took_part(row_flags: torch.Tensor) -> None:
        request_steps[row_request[row_flags].unique()] += 1

    # a row takes at most one step per slot token, so a larger max_steps is no limit: capped to
    # fit an int64 (max_steps=2**63 would overflow the tensor)
    max_steps = torch.tensor([min(requests[row.request].max_steps or 0, 2**62) for row in rows])
    decoded = state.masked.sum(-1)
    denoise_s = sampler_s = constraint_s = 0.0
    block_mask_d, seg_d = block_mask.to(device), seg.to(device)
    while bool(state.masked.any()):
        given_up = gone()
        t0 = time.perf_counter()
        logits = model.denoise(state.ids.to(device), cache, block_mask_d, seg_d)
        _sync(device)  # the sampler gathers the slot rows on the device; the DP runs on the CPU
        denoise_s += time.perf_counter() - t0
        active = state.masked.any(-1)
        row_steps += active.long()
        took_part(active)
        force = active & (((max_steps > 0) & (row_steps >= max_steps)) | given_up)
        for group, policy in samplers:
            rows_here = torch.isin(row_request, group) if len(samplers) > 1 else None
            report = _step(policy, state, logits, force, rows_here)
            sampler_s += report.seconds
            constraint_s += report.constraint_seconds
        unfinished = force & state.masked.any(-1)
        if bool(unfinished.any()):  # the step contract: forced rows end this step
            raise RuntimeError(
                f"the sampler left {int(unfinished.sum())} forced row(s) masked; a sampler's "
                "step must fix every masked token of the rows in force (docs/decoding.md), "
                "otherwise max_steps and abandoned requests cannot end the loop")
    probabilities: dict[int, torch.Tensor] = {}
    remaining = dict(scored)
    thresholds = [requests[row.request].threshold for row in rows]
    def fix(k: int, probs: torch.Tensor) -> None:
        """Fix scored slot ``k`` to its most probable option (the first of equals)."""
        slot = remaining.pop(k)
        probabilities[k] = probs
        best = slot.sequences[int(torch.argmax(probs))]
        state.ids[slot.row, slot.start : slot.start + slot.length] = torch.tensor(best)
        decoded[slot.row] += slot.length

    while remaining:  # rounds: score the slots left given the block, fix the surest of each row
        given_up = gone()
        if bool(given_up.any()):
            # nobody reads an abandoned request's answer: fixed at once to its first option
            # (uniform probabilities), so it costs the rest of the batch no more forwards
            for k in [k for k, slot in remaining.items() if bool(given_up[slot.row])]:
                size = len(remaining[k].sequences)
                fix(k, torch.full((size,), 1.0 / size))
        if not remaining:
            break
        t0 = time.perf_counter()
        result, forwards_s = _score(model, cache, state.ids, block_mask_d, seg_d,
                                    list(remaining.values()), config, gone)
        denoise_s += forwards_s
        for level in result.level_rows:
            took_part(level)
        this_round = dict(zip(remaining, result.probabilities, strict=True))
        for k in _surest(remaining, this_round, thresholds):
            fix(k, this_round[k])
        sampler_s += time.perf_counter() - t0 - forwards_s  # the chain rule's bookkeeping
    timings = _timings(prefill_s, denoise_s, sampler_s, constraint_s,
                       time.perf_counter() - start)
    return _decisions(ctx, requests, rows, state, slots, request_steps, decoded, timings,
                      probabilities)


def _surest(slots: dict[int, SlotOptions], probabilities: dict[int, torch.Tensor],
            thresholds: list[float]) -> list[int]:
    """The scored slots to fix this round: those whose best option reaches their row's
    threshold, and in every row at least its most confident one (the first of equals)."""
    confidence = {k: float(p.max()) for k, p in probabilities.items()}
    surest: dict[int, int] = {}  # row -> slot
    for k, slot in slots.items():
        if slot.row not in surest or confidence[k] > confidence[surest[slot.row]]:
            surest[slot.row] = k
    return [k for k, slot in slots.items()
            if confidence[k] >= thresholds[slot.row] or surest[slot.row] == k]


def _score(
    model: Any, cache: Any, blocks: torch.Tensor, block_mask_d: torch.Tensor,
    seg_d: torch.Tensor, slots: list[SlotOptions], config: EngineConfig,
    check: Callable[[], Any],
) -> tuple[ScoredOptions, float]:
    """Option probabilities of the scored slots (``decision.joint.scoring``), each slot with
    its own positions masked and the rest of its row's block as it stands; and the seconds
    its model forwards took. ``block_mask_d``/``seg_d`` are already on the model's device.
    ``check()`` runs before every forward: it raises once every request is abandoned, so a
    round of many forwards (256 options of several tokens: seconds) stops within one."""
    device = model.device
    forwards_s = 0.0

    def denoise(ids: torch.Tensor, which: torch.Tensor) -> torch.Tensor:
        nonlocal forwards_s
        check()
        t0 = time.perf_counter()
        which_d = which.to(device)
        logits = model.denoise(ids.to(device), cache.index_select(which_d),
                               block_mask_d.index_select(0, which_d),
                               seg_d.index_select(0, which_d))
        _sync(device)
        forwards_s += time.perf_counter() - t0
        return logits

    # each forward returns logits for every block position: bound them (rows x width x vocab)
    width_vocab = max(1, blocks.shape[1] * int(model.config.vocab_size))
    max_rows = max(1, min(SCORING_MAX_ROWS, SCORING_LOGITS_BUDGET // width_vocab))
    scored = score_options(denoise, blocks, slots, config.scoring_orders, max_rows)
    return scored, forwards_s


def _canonical(ctx: TokenizerContext, option: str, length: int) -> tuple[int, ...]:
    """``option`` in the tokenizer's own encoding, ``[EOS]``-padded to ``length`` tokens."""
    ids = ctx.canonical_ids(option)
    return (*ids, *[ctx.special.eos] * (length - len(ids)))


def _samplers(
    requests: list[_Request], sampler: Sampler | None, config: EngineConfig
) -> list[tuple[torch.Tensor, Sampler]]:
    """One sampler per distinct (threshold, commit) (requests in a batch may differ), or the
    given one."""
    if sampler is not None:
        return [(torch.arange(len(requests)), sampler)]
    by_policy: dict[tuple[float, str], list[int]] = {}
    for r, req in enumerate(requests):
        by_policy.setdefault((req.threshold, req.commit), []).append(r)
    return [
        (
            torch.tensor(members),
            ConstrainedThresholdSampler(
                ThresholdSamplerConfig(threshold, 1, config.min_scope, commit)  # type: ignore[arg-type]
            ),
        )
        for (threshold, commit), members in by_policy.items()
    ]


def _step(
    policy: Sampler,
    state: BlockState,
    logits: torch.Tensor,
    force: torch.Tensor,
    rows: torch.Tensor | None,
) -> StepReport:
    """One sampler step, restricted to ``rows`` when several policies share the batch."""
    state.selectable = rows
    try:
        return policy.step(state, logits, force if rows is None else force & rows)
    finally:
        state.selectable = None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _decisions(
    ctx: TokenizerContext,
    requests: list[_Request],
    rows: list[_Row],
    state: BlockState,
    slots: list[tuple[int, int]],
    request_steps: torch.Tensor,
    decoded: torch.Tensor,
    timings: dict[str, float],
    probabilities: dict[int, torch.Tensor],
) -> list[Decision]:
    """Each slot's answer: the tokens it was denoised to, or (slots in ``probabilities``) the
    most probable of its scored options, the first of equals in the options' order."""
    answers: list[dict[int, Answer]] = [{} for _ in requests]
    for k, (b, question_index) in enumerate(slots):
        row = rows[b]
        req = requests[row.request]
        question = req.questions[question_index]
        if k in probabilities:
            answers[row.request][question_index] = _scored_answer(
                question, probabilities[k], req.return_probabilities, row.kind)
            continue
        positions = state.positions[k][state.positions[k] >= 0]
        tokens = state.ids.reshape(-1)[positions].tolist()
        text = ctx.text(tokens)
        probs = state.option_probs[k]
        options = question.answer.options()
        answers[row.request][question_index] = Answer(
            id=question.id,
            value=question.answer.parse(text),
            text=text,
            confidence=_product(state.confidence.reshape(-1)[positions]),
            option_probabilities=(
                dict(zip(options, probs.tolist(), strict=True))
                if probs is not None and options is not None
                else None
            ),
            mode=row.kind,
        )
    return _per_request(requests, rows, answers, request_steps, decoded, timings)


def _product(confidences: torch.Tensor) -> float:
    """An answer's confidence: the product of its tokens' confidences, in float64 (in float32
    the product of 60 tokens of 0.1 each underflowed to 0)."""
    return float(confidences.double().prod().clamp(0.0, 1.0))


def _scored_answer(question: Question, probs: torch.Tensor, with_probabilities: bool,
                   kind: str) -> Answer:
    options = question.answer.options() or []
    best = int(torch.argmax(probs))  # the first of equals, in the options' order
    return Answer(
        id=question.id,
        value=question.answer.parse(options[best]),
        text=options[best],
        confidence=float(probs[best].clamp(0.0, 1.0)),
        option_probabilities=(dict(zip(options, probs.tolist(), strict=True))
                              if with_probabilities else None),
        mode=kind,  # type: ignore[arg-type]
    )


def _per_request(
    requests: list[_Request],
    rows: list[_Row],
    answers: list[dict[int, Answer]],
    request_steps: torch.Tensor,
    row_tokens: torch.Tensor,
    timings: dict[str, float],
) -> list[Decision]:
    """Each request's Decision from its rows: forwards (those any of its rows took part in)
    and the slot tokens they decided."""
    out: list[Decision] = []
    for r, req in enumerate(requests):
        mine = [b for b, row in enumerate(rows) if row.request == r]
        steps = int(request_steps[r])
        tokens = int(row_tokens[mine].sum())
        out.append(
            Decision(
                answers=[answers[r][i] for i in range(len(req.questions))],
                mode="+".join(sorted({rows[b].kind for b in mine})),
                steps=steps,
                tokens_per_forward=tokens / max(steps, 1),
                timings=dict(timings),
            )
        )
    return out
