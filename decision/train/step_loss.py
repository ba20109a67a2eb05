"""The loss of one training step's batch: noise the blocks (masking.py), run the model (the
history once, the block under each noise draw), and add the option losses (option_loss.py) on
the rows that carry options.

Apart from the loop so that the objective can be tested, benchmarked and swapped on its own;
the loop only calls :func:`batch_loss` and steps the optimiser on its result.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import torch

from decision.joint.scoring import Denoiser, SlotOptions
from decision.train.config import TrainConfig
from decision.train.masking import apply_mask, diffusion_loss, sample_t, slot_rates
from decision.train.option_loss import (
    BlockDenoiser,
    option_loss,
    option_set_loss,
    soft_option_loss,
)
from decision.train.rows import Batch
from decision.train.trainable import TrainableModel


def batch_loss(
    model: TrainableModel,
    batch: Batch,
    cfg: TrainConfig,
    mask_token_id: int,
    gen: torch.Generator,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Noise the batch's blocks (masking.py) and return the weighted diffusion loss.

    ``batch`` lives on the CPU, where ``gen`` draws the noise; the model's inputs go to ``device``
    (default: the CPU).

    With ``run.denoise_draws = K > 1`` and a model that has ``prefill``/``denoise``, the history is
    encoded once and the block is denoised under K independent noise draws (t and masks), the
    loss being their mean: K Monte-Carlo samples of the same objective for about the cost of one
    history pass plus K block passes (the block is ~10x shorter than the history), i.e. several
    times more supervised tokens per second. Gradients flow into the shared cache.

    With ``data.option_loss_weight = w > 0``, rows that carry their options (``Row.options``)
    add ``w`` times the option loss (option_loss.py), its block forwards on the same cache;
    with ``data.option_set_loss_weight = w > 0``, rows that also carry an option set
    (``Row.option_set``) add ``w`` times the option-set loss, likewise; with
    ``data.soft_option_loss_weight = w > 0``, rows that carry soft targets
    (``Row.soft_targets``) add ``w`` times the soft option loss, likewise.
    """
    draws = cfg.run.denoise_draws
    device = device or torch.device("cpu")
    ctx = (
        torch.autocast(device.type, dtype=torch.bfloat16) if cfg.run.autocast_bf16
        else nullcontext()
    )
    scored = cfg.data.option_loss_weight > 0 and bool(batch.scored_slots)
    sets = batch.scored_sets or tuple(() for _ in batch.scored_slots)
    with_sets = [(slot, members) for slot, members in zip(batch.scored_slots, sets, strict=True)
                 if members] if cfg.data.option_set_loss_weight > 0 else []
    soft = batch.scored_soft or tuple(() for _ in batch.scored_slots)
    with_soft = [(slot, target) for slot, target in zip(batch.scored_slots, soft, strict=True)
                 if target] if cfg.data.soft_option_loss_weight > 0 else []
    shared = (draws > 1 or scored or bool(with_sets) or bool(with_soft)) \
        and hasattr(model, "prefill") \
        and hasattr(model, "denoise")
    on = batch.to(device)
    total = torch.zeros((), device=device)
    with ctx:
        cache = (
            model.prefill(on.history_ids, on.history_mask, on.history_segments)  # type: ignore[attr-defined]
            if shared
            else None
        )
        for _ in range(draws if shared else 1):
            t = sample_t(batch.block_ids.shape[0], cfg.data.t_min, gen)
            rates = slot_rates(
                batch.roles, t, gen, cfg.data.p_extraction_visible, cfg.data.extraction_rate_scale
            )
            mb = apply_mask(batch.block_ids, batch.slot_of, rates, mask_token_id, gen).to(device)
            if cache is not None:
                logits = model.denoise(  # type: ignore[attr-defined]
                    mb.noised, cache, on.block_mask, on.block_segments
                )
            else:
                logits = model(
                    on.history_ids,
                    mb.noised,
                    history_mask=on.history_mask,
                    block_mask=on.block_mask,
                    history_segments=on.history_segments,
                    block_segments=on.block_segments,
                )
            loss = diffusion_loss(logits, on.block_ids, mb, cfg.data.loss_weighting)
            total = total + loss
        total = total / (draws if shared else 1)
        if scored or with_sets or with_soft:
            read = only_scored_slots(batch.block_ids, batch.slot_of, batch.scored_slots,
                                     mask_token_id).to(device)
        if scored:
            total = total + cfg.data.option_loss_weight * option_loss(
                _block_denoiser(model, on, cache), read, batch.scored_slots,
                mask_token_id, each_order=cfg.data.option_loss_each_order,
            )
        if with_sets:
            total = total + cfg.data.option_set_loss_weight * option_set_loss(
                _row_denoiser(model, on, cache), read, [slot for slot, _ in with_sets],
                [members for _, members in with_sets], mask_token_id,
            )
        if with_soft:
            total = total + cfg.data.soft_option_loss_weight * soft_option_loss(
                _row_denoiser(model, on, cache), read, [slot for slot, _ in with_soft],
                [target for _, target in with_soft], mask_token_id,
            )
    return total


def only_scored_slots(block_ids: torch.Tensor, slot_of: torch.Tensor,
                      slots: Sequence[SlotOptions], mask_token_id: int) -> torch.Tensor:
    """The blocks the option losses read: in each scored row, every answer slot but the scored
    one masked, as a pass that asks only that question would see it (a row's other answers,
    e.g. an auxiliary question's, must not give the scored choice away)."""
    if slot_of.numel() == 0 or int(slot_of.max()) < 1:  # one slot a row: nothing to hide
        return block_ids
    read = block_ids.clone()
    for slot in slots:
        slots_of_row = slot_of[slot.row]
        own = slots_of_row[slot.start]
        other = (slots_of_row >= 0) & (slots_of_row != own)
        read[slot.row, other] = mask_token_id
    return read


def _row_denoiser(model: TrainableModel, on: Batch, cache: Any) -> Denoiser:
    """(block ids, the batch row of each) -> logits: rows of ``on`` repeated as needed, on the
    shared history cache when there is one."""
    def denoise(ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        mask = on.block_mask.index_select(0, rows)
        segments = on.block_segments.index_select(0, rows)
        if cache is not None:
            return model.denoise(ids, cache.index_select(rows), mask, segments)  # type: ignore[attr-defined]
        return model(on.history_ids.index_select(0, rows), ids,
                     history_mask=on.history_mask.index_select(0, rows), block_mask=mask,
                     history_segments=on.history_segments.index_select(0, rows),
                     block_segments=segments)
    return denoise


def _block_denoiser(model: TrainableModel, on: Batch, cache: Any) -> BlockDenoiser:
    """Block ids -> logits for ``on``'s rows: on the shared history cache when there is one."""
    def denoise(ids: torch.Tensor) -> torch.Tensor:
        if cache is not None:
            return model.denoise(ids, cache, on.block_mask, on.block_segments)  # type: ignore[attr-defined]
        return model(on.history_ids, ids, history_mask=on.history_mask,
                     block_mask=on.block_mask, history_segments=on.history_segments,
                     block_segments=on.block_segments)
    return denoise
