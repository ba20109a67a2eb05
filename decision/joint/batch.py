"""The batch of a decode: one row per pass of every request, the rows' history caches
(documents prefilled once per request, each row's questions committed onto its document's
cache), and the initial block state the denoising loop starts from."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from decision.errors import DecisionInputError
from decision.joint.config import EngineConfig
from decision.joint.layout import Layout, build_layout
from decision.joint.request import ParsedRequest, max_positions
from decision.joint.sampler import BlockState
from decision.joint.scoring import SlotOptions
from decision.schemas.compile import TokenAutomaton, TokenizerContext, literal_automaton


@dataclass
class Row:
    """One pass of one request: a row of the batch."""

    request: int
    kind: str
    questions: list[int]
    layout: Layout


def build_rows(model: Any, ctx: TokenizerContext, requests: list[ParsedRequest]) -> list[Row]:
    """One row per pass of every request; a pass longer than the model's positions is
    refused, naming its request's document."""
    limit = max_positions(model)
    rows: list[Row] = []
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
                    req.where + "document",  # checked after validate: name its request
                )
            rows.append(Row(r, kind, picked, layout))
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
    model: Any, ctx: TokenizerContext, requests: list[ParsedRequest], rows: list[Row], reuse: bool
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


def block_state(
    ctx: TokenizerContext, requests: list[ParsedRequest], rows: list[Row]
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


def _canonical(ctx: TokenizerContext, option: str, length: int) -> tuple[int, ...]:
    """``option`` in the tokenizer's own encoding, ``[EOS]``-padded to ``length`` tokens."""
    ids = ctx.canonical_ids(option)
    return (*ids, *[ctx.special.eos] * (length - len(ids)))


def prefilled(
    model: Any, ctx: TokenizerContext, requests: list[ParsedRequest], config: EngineConfig
) -> tuple[list[Row], Any, float]:
    """The rows (passes) of ``requests``, their history cache and the seconds it took."""
    start = time.perf_counter()
    rows = build_rows(model, ctx, requests)
    cache = _prefill(model, ctx, requests, rows, config.reuse_document_cache)
    sync(model.device)
    return rows, cache, time.perf_counter() - start


def sync(device: torch.device) -> None:
    """Wait for the work queued on ``device`` (CUDA), so the seconds measured are its own."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
