"""The option-set loss (decision.train.option_loss): the scorer's probability of a set, trained."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from decision.errors import DecisionInputError
from decision.joint.scoring import ORDERS, SlotOptions, score_options
from decision.model.testing import tiny_model
from decision.train.config import config_from_dict
from decision.train.option_loss import (
    gold_option_log_probs,
    option_set_log_probs,
    option_set_loss,
)
from decision.train.rows import Batch, Row, collate
from decision.train.step_loss import batch_loss

MASK, VOCAB, ROWS = 0, 12, 3


def row_denoiser(seed: int, weight: torch.Tensor | None = None):
    """Logits that depend on every token of the block, the position and the batch row (so a
    forward read for the wrong row gives other numbers), counting the rows of each call."""
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(VOCAB, 8, generator=g, dtype=torch.float64)
    pos = torch.randn(16, 8, generator=g, dtype=torch.float64)
    per_row = torch.randn(ROWS, 8, generator=g, dtype=torch.float64)
    out = torch.randn(8, VOCAB, generator=g, dtype=torch.float64)
    calls: list[int] = []

    def denoise(ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        calls.append(ids.shape[0])
        h = emb[ids] + pos[: ids.shape[1]] + per_row[rows][:, None]
        logits = torch.tanh(h + h.mean(1, keepdim=True)) @ out
        return logits * weight if weight is not None else logits

    return denoise, calls


@st.composite
def problems(draw):
    """Up to 3 rows, one slot each of 1 to 4 tokens, 1 to 7 distinct options, a gold among them
    written into the block and a set of options per slot."""
    rows = draw(st.integers(1, ROWS))
    width = 8
    blocks = torch.full((rows, width), 5, dtype=torch.long)
    slots, sets = [], []
    for row in range(rows):
        length = draw(st.integers(1, 4))
        start = draw(st.integers(0, width - length))
        options = draw(st.lists(st.tuples(*[st.integers(1, VOCAB - 1)] * length),
                                min_size=1, max_size=7, unique=True))
        gold = draw(st.sampled_from(options))
        blocks[row, start : start + length] = torch.tensor(gold)
        slots.append(SlotOptions(row, start, tuple(options)))
        sets.append(tuple(draw(st.lists(st.integers(0, len(options) - 1), min_size=1,
                                        unique=True))))
    orders = draw(st.sampled_from([ORDERS, ("left_to_right",), ("right_to_left",)]))
    return blocks, slots, sets, orders, draw(st.integers(0, 2**16))


@settings(max_examples=60, deadline=None)
@given(problems())
def test_is_the_option_scorers_probability_of_the_set(problem) -> None:
    blocks, slots, sets, orders, seed = problem
    denoise, _ = row_denoiser(seed)
    masked = blocks.clone()
    for slot in slots:
        masked[slot.row, slot.start : slot.start + slot.length] = MASK
    scored = score_options(denoise, masked, slots, orders)
    got = option_set_log_probs(denoise, blocks, slots, sets, MASK, orders).exp()
    for k, members in enumerate(sets):
        want = float(scored.probabilities[k][list(members)].sum())
        assert abs(float(got[k]) - want) < 1e-5
    loss = option_set_loss(denoise, blocks, slots, sets, MASK, orders)
    assert abs(float(loss) + float(got.log().mean())) < 1e-5


@settings(max_examples=30, deadline=None)
@given(problems())
def test_a_set_of_the_gold_alone_is_the_option_loss(problem) -> None:
    blocks, slots, _, orders, seed = problem
    denoise, _ = row_denoiser(seed)
    golds = [(slot.sequences.index(tuple(
        blocks[slot.row, slot.start : slot.start + slot.length].tolist())),) for slot in slots]
    got = option_set_log_probs(denoise, blocks, slots, golds, MASK, orders)
    want = gold_option_log_probs(
        lambda ids: denoise(ids, torch.arange(ids.shape[0])), blocks, slots, MASK, orders)
    assert torch.allclose(got.double(), want.double(), atol=1e-6)


def test_every_option_is_certain_and_the_set_moves_the_gradient() -> None:
    options = ((1, 2, 3, 4), (1, 2, 4, 3), (2, 2, 3, 4), (3, 1, 1, 1))
    blocks = torch.full((2, 6), 5, dtype=torch.long)
    blocks[0, 1:5] = torch.tensor(options[1])
    blocks[1, 2:6] = torch.tensor(options[2])
    slots = [SlotOptions(0, 1, options), SlotOptions(1, 2, options)]
    denoise, calls = row_denoiser(3)
    every = [tuple(range(len(options)))] * 2
    assert float(option_set_loss(denoise, blocks, slots, every, MASK).abs()) < 1e-6
    weight = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    denoise, calls = row_denoiser(3, weight)
    loss = option_set_loss(denoise, blocks, slots, [(1, 3), (2,)], MASK)
    assert 1 <= len(calls) <= 4  # at most one batched forward a level: orders, slots in it
    loss.backward()
    assert weight.grad is not None and math.isfinite(float(weight.grad)) and weight.grad != 0


def test_refuses_sets_that_name_no_options_of_the_slot() -> None:
    denoise, _ = row_denoiser(1)
    blocks = torch.full((1, 6), 5, dtype=torch.long)
    slots = [SlotOptions(0, 0, ((1, 2), (3, 4)))]
    for bad in [(), (2,), (-1,), (0, 0)]:
        with pytest.raises(ValueError, match="distinct options"):
            option_set_log_probs(denoise, blocks, slots, [bad], MASK)
    with pytest.raises(ValueError, match="one set of options is needed per slot"):
        option_set_log_probs(denoise, blocks, slots, [], MASK)
    assert float(option_set_loss(denoise, blocks, [], [], MASK)) == 0.0


def test_row_checks_its_option_set() -> None:
    base = dict(history_ids=[3, 4], history_segments=[0, 0], block_ids=[9, 1, 2],
                block_segments=[1, 1, 1], slot_of=[-1, 0, 0], roles=[0], kind="standalone")
    options = dict(options=((1, 2), (2, 1), (3, 3)), options_start=1)
    assert Row(**base, **options, option_set=(0, 2)).option_set == (0, 2)
    with pytest.raises(ValueError, match="needs the row's options"):
        Row(**base, option_set=(0,))
    with pytest.raises(ValueError, match="distinct options"):
        Row(**base, **options, option_set=(0, 3))
    with pytest.raises(ValueError, match="distinct options"):
        Row(**base, **options, option_set=(0, 0))
    with pytest.raises(ValueError, match="hold the block's answer"):
        Row(**base, **options, option_set=(1, 2))


def test_config_refuses_a_negative_weight() -> None:
    with pytest.raises(DecisionInputError, match="option_set_loss_weight"):
        config_from_dict({"data": {"option_set_loss_weight": -0.5}})


SCORED_OPTIONS = ((1, 2, 3), (1, 3, 2), (4, 2, 3), (4, 3, 1))


def scored_batch(field: str, values: Sequence[Any]) -> Batch:
    """Three rows of histories 2 to 4 tokens, each with ``SCORED_OPTIONS`` and answer ``b`` in
    its slot, and its ``Row.<field>`` set to ``values[b]``."""
    rows = [Row(history_ids=[5, 6, 7, 8][: 2 + b], history_segments=[0] * (2 + b),
                block_ids=[9, *SCORED_OPTIONS[b]], block_segments=[1] * 4,
                slot_of=[-1, 0, 0, 0], roles=[0], kind="standalone", options=SCORED_OPTIONS,
                options_start=1, **{field: values[b]})
            for b in range(3)]
    return collate(rows, pad_token_id=11)


def uncached_denoiser(model: Any, batch: Batch) -> Any:
    """(block ids, batch rows) -> logits through the model's whole forward (no history cache)."""
    def forward(ids: torch.Tensor, which: torch.Tensor) -> torch.Tensor:
        return model(batch.history_ids[which], ids, history_mask=batch.history_mask[which],
                     block_mask=batch.block_mask[which],
                     history_segments=batch.history_segments[which],
                     block_segments=batch.block_segments[which])
    return forward


@pytest.mark.parametrize("draws", [1, 3])
def test_batch_loss_adds_the_weighted_set_loss_of_the_model(draws: int) -> None:
    model = tiny_model(seed=0, random_block=True)
    sets = [(0, 3), (), (1, 2)]  # the middle row carries no set
    batch = scored_batch("option_set", sets)
    assert batch.scored_sets == tuple(sets)

    def loss(weight: float) -> torch.Tensor:
        cfg = config_from_dict({"data": {"option_loss_weight": 1.0,
                                         "option_set_loss_weight": weight},
                                "run": {"denoise_draws": draws}})
        return batch_loss(model, batch, cfg, MASK, torch.Generator().manual_seed(4))

    with torch.no_grad():
        kept = [0, 2]
        expected = option_set_loss(uncached_denoiser(model, batch), batch.block_ids,
                                   [batch.scored_slots[k] for k in kept],
                                   [sets[k] for k in kept], MASK)
        assert float(expected) > 0
        assert abs(float(loss(2.0) - loss(0.0)) - 2.0 * float(expected)) < 1e-4
