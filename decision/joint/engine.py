"""``decide`` / ``decide_many``: check requests, lay out their passes, run the denoising loop.

Every request becomes one or more *passes*: a joint pass holds up to 8 questions in one block, a
standalone pass one question. All passes of all requests run as rows of one batch: documents
are prefilled once per request, each row's cache is its document's cache with the row's
questions committed onto it, and every denoising step is one batched ``denoise`` forward
followed by one sampler step.

The steps live beside this module, data flowing one way: ``request`` checks a request and plans
its passes, ``batch`` lays out the rows, prefills them and builds the initial block state, the
loop here denoises, ``scoring_rounds`` answers the slots scored option by option, and
``answers`` reads the block back as ``Decision``s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from decision.errors import DecisionInputError, DecodeAbandonedError
from decision.joint.answers import batch_timings, decisions
from decision.joint.batch import block_state, build_rows, prefilled, sync
from decision.joint.config import COMMITS, EngineConfig
from decision.joint.request import (
    MAX_QUESTIONS_PER_REQUEST,
    MODES,
    CheckedRequest,
    ParsedRequest,
    model_context,
    model_limits,
    validate,
)
from decision.joint.result import Decision, DecisionRequest
from decision.joint.sampler import (
    BlockState,
    ConstrainedThresholdSampler,
    Sampler,
    StepReport,
    ThresholdSamplerConfig,
)
from decision.joint.scoring_rounds import score_rounds
from decision.schemas.compile import TokenizerContext

__all__ = [
    "COMMITS",
    "MAX_QUESTIONS_PER_REQUEST",
    "MODES",
    "CheckedRequest",
    "EngineConfig",
    "check_request",
    "decide",
    "decide_many",
]


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
    # a dict, so that a malformed argument is a DecisionInputError naming it (see validate)
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
    ctx = model_context(model)
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
        else validate(r.request if isinstance(r, CheckedRequest) else r, ctx, config,
                      f"requests.{i}." if prefix else "", model_limits(model))
        for i, r in enumerate(requests)
    ]
    with torch.inference_mode():
        return _run(model, ctx, parsed, config, sampler, abandoned)


def check_request(
    model: Any, request: DecisionRequest | dict[str, Any], config: EngineConfig | None = None
) -> CheckedRequest:
    """Run every check ``decide_many`` makes before decoding (schemas compiled, pass lengths
    against the model), raising ``DecisionInputError``; decodes nothing. The result, given to
    ``decide_many`` with the same model and config, is decoded without compiling again."""
    config = config or EngineConfig()
    ctx = model_context(model)
    parsed = validate(request, ctx, config, "", model_limits(model))
    build_rows(model, ctx, [parsed])
    return CheckedRequest(request, model, config, parsed)


def _run(
    model: Any,
    ctx: TokenizerContext,
    requests: list[ParsedRequest],
    config: EngineConfig,
    sampler: Sampler | None,
    abandoned: Callable[[int], bool] | None = None,
) -> list[Decision]:
    start = time.perf_counter()
    device = model.device
    rows, cache, prefill_s = prefilled(model, ctx, requests, config)
    state, block_mask, seg, slots, scored = block_state(ctx, requests, rows)
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
        sync(device)  # the sampler gathers the slot rows on the device; the DP runs on the CPU
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
    thresholds = [requests[row.request].threshold for row in rows]
    probabilities, forwards_s, scoring_s = score_rounds(
        model, cache, state, block_mask_d, seg_d, scored, thresholds, config.scoring_orders,
        decoded, gone, took_part)
    denoise_s += forwards_s
    sampler_s += scoring_s  # the chain rule's bookkeeping
    timings = batch_timings(prefill_s, denoise_s, sampler_s, constraint_s,
                            time.perf_counter() - start)
    return decisions(ctx, requests, rows, state, slots, request_steps, decoded, timings,
                     probabilities)


def _samplers(
    requests: list[ParsedRequest], sampler: Sampler | None, config: EngineConfig
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
