"""Scored slots answered in rounds (``score_options``), once the block's open answers are
denoised: each round scores every slot left given the block as it stands
(``decision.joint.scoring``, in forwards of bounded size over the rows' history caches) and
fixes, in every row, the slots whose best option reaches the row's threshold and at least its
most confident one; a fixed slot's block positions then hold its option's canonical tokens,
which the next round's slots see (docs/decoding.md, "Option scoring")."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from decision.joint.batch import sync
from decision.joint.sampler import BlockState
from decision.joint.scoring import ScoredOptions, SlotOptions, score_options

SCORING_MAX_ROWS = 512  # rows of one option-scoring forward at most
SCORING_LOGITS_BUDGET = 2**26  # and at most this many logits (256 MB in fp32)


def score_rounds(
    model: Any,
    cache: Any,
    state: BlockState,
    block_mask_d: torch.Tensor,
    seg_d: torch.Tensor,
    scored: dict[int, SlotOptions],
    thresholds: list[float],
    orders: Sequence[str],
    decoded: torch.Tensor,
    gone: Callable[[], torch.Tensor],
    took_part: Callable[[torch.Tensor], None],
) -> tuple[dict[int, torch.Tensor], float, float]:
    """Answer the ``scored`` slots (by slot index) in rounds, fixing each in ``state.ids`` and
    adding its length to its row's ``decoded`` tokens.

    ``thresholds[row]``: the row's request's threshold. ``gone()``: the rows of abandoned
    requests (it raises once every request is abandoned), asked before every round and every
    forward. ``took_part(rows)``: called with the rows of each scoring level. Returns each
    slot's option probabilities by slot index, the seconds the model forwards took, and the
    seconds of the rest (the chain rule's bookkeeping)."""
    probabilities: dict[int, torch.Tensor] = {}
    remaining = dict(scored)
    forwards_total_s = bookkeeping_s = 0.0

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
                                    list(remaining.values()), orders, gone)
        forwards_total_s += forwards_s
        for level in result.level_rows:
            took_part(level)
        this_round = dict(zip(remaining, result.probabilities, strict=True))
        for k in surest_slots(remaining, this_round, thresholds):
            fix(k, this_round[k])
        bookkeeping_s += time.perf_counter() - t0 - forwards_s  # the chain rule's bookkeeping
    return probabilities, forwards_total_s, bookkeeping_s


def surest_slots(slots: dict[int, SlotOptions], probabilities: dict[int, torch.Tensor],
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
    seg_d: torch.Tensor, slots: list[SlotOptions], orders: Sequence[str],
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
        sync(device)
        forwards_s += time.perf_counter() - t0
        return logits

    # each forward returns logits for every block position: bound them (rows x width x vocab)
    width_vocab = max(1, blocks.shape[1] * int(model.config.vocab_size))
    max_rows = max(1, min(SCORING_MAX_ROWS, SCORING_LOGITS_BUDGET // width_vocab))
    scored = score_options(denoise, blocks, slots, orders, max_rows)
    return scored, forwards_s
