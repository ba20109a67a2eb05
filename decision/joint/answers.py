"""A decoded batch read back as answers: each slot's ``Answer`` (denoised tokens, or the
most probable of its scored options), each request's ``Decision``, and the batch's timings."""

from __future__ import annotations

import torch

from decision.joint.batch import Row
from decision.joint.request import ParsedRequest
from decision.joint.result import Answer, Decision
from decision.joint.sampler import BlockState
from decision.schemas.compile import TokenizerContext
from decision.schemas.models import Question


def batch_timings(prefill_s: float, denoise_s: float, sampler_s: float, constraint_s: float,
                  total_s: float) -> dict[str, float]:
    """A batch's timings in ms (docs/decoding.md, "Per-request report")."""
    return {"prefill": prefill_s * 1e3, "denoise": denoise_s * 1e3, "sampler": sampler_s * 1e3,
            "constraint": constraint_s * 1e3, "total": total_s * 1e3}


def decisions(
    ctx: TokenizerContext,
    requests: list[ParsedRequest],
    rows: list[Row],
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
    requests: list[ParsedRequest],
    rows: list[Row],
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
