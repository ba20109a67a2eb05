"""The option loss (decision.train.option_loss): the option scorer's own probability, trained."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from decision.errors import DecisionInputError
from decision.joint.scoring import ORDERS, SlotOptions, score_options
from decision.model.testing import tiny_model
from decision.train.config import config_from_dict
from decision.train.option_loss import gold_option_log_probs, option_loss
from decision.train.rows import Row, collate
from decision.train.step_loss import batch_loss

MASK, VOCAB = 0, 12


def context_denoiser(seed: int, weight: torch.Tensor | None = None):
    """Logits that depend on every token of the row and on the position, counting calls;
    ``weight`` (if given) scales them, so a gradient can flow to it."""
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(VOCAB, 8, generator=g, dtype=torch.float64)
    pos = torch.randn(16, 8, generator=g, dtype=torch.float64)
    out = torch.randn(8, VOCAB, generator=g, dtype=torch.float64)
    calls: list[int] = []

    def denoise(ids: torch.Tensor) -> torch.Tensor:
        calls.append(ids.shape[0])
        h = emb[ids] + pos[: ids.shape[1]]
        logits = torch.tanh(h + h.mean(1, keepdim=True)) @ out
        return logits * weight if weight is not None else logits

    return denoise, calls


@st.composite
def problems(draw):
    """Up to 3 rows, one slot each of 1 to 4 tokens, 1 to 7 distinct options, a gold among them
    written into the block."""
    rows = draw(st.integers(1, 3))
    width = 8
    blocks = torch.full((rows, width), 5, dtype=torch.long)
    slots = []
    for row in range(rows):
        length = draw(st.integers(1, 4))
        start = draw(st.integers(0, width - length))
        options = draw(st.lists(st.tuples(*[st.integers(1, VOCAB - 1)] * length),
                                min_size=1, max_size=7, unique=True))
        gold = draw(st.sampled_from(options))
        blocks[row, start : start + length] = torch.tensor(gold)
        slots.append(SlotOptions(row, start, tuple(options)))
    orders = draw(st.sampled_from([ORDERS, ("left_to_right",), ("right_to_left",)]))
    return blocks, slots, orders, draw(st.integers(0, 2**16))


@settings(max_examples=60, deadline=None)
@given(problems())
def test_is_the_option_scorers_probability_of_the_gold(problem) -> None:
    blocks, slots, orders, seed = problem
    denoise, _ = context_denoiser(seed)
    masked = blocks.clone()
    for slot in slots:
        masked[slot.row, slot.start : slot.start + slot.length] = MASK
    scored = score_options(lambda ids, rows: denoise(ids), masked, slots, orders)
    got = gold_option_log_probs(denoise, blocks, slots, MASK, orders).exp()
    for k, slot in enumerate(slots):
        gold = tuple(blocks[slot.row, slot.start : slot.start + slot.length].tolist())
        want = scored.probabilities[k][slot.sequences.index(gold)]
        assert abs(float(got[k]) - float(want)) < 1e-5
    loss = option_loss(denoise, blocks, slots, MASK, orders)
    assert abs(float(loss) + float(got.log().mean())) < 1e-5


@settings(max_examples=40, deadline=None)
@given(problems())
def test_each_order_is_the_mean_of_each_orders_own_loss(problem) -> None:
    # each order's own probability is the scorer's with that order alone; the per-order loss is
    # their mean -log, never below the mixture's (Jensen), equal with a single order
    blocks, slots, orders, seed = problem
    denoise, _ = context_denoiser(seed)
    own = torch.stack([gold_option_log_probs(denoise, blocks, slots, MASK, (order,))
                       for order in orders], dim=1)
    each = option_loss(denoise, blocks, slots, MASK, orders, each_order=True)
    mixed = option_loss(denoise, blocks, slots, MASK, orders)
    assert abs(float(each) + float(own.mean())) < 1e-6
    # float32 sums: equal orders (or one) may round either way by a few ulps
    tolerance = 1e-6 * max(1.0, abs(float(mixed)))
    assert float(each) >= float(mixed) - tolerance
    if len(orders) == 1:
        assert abs(float(each) - float(mixed)) < tolerance


def test_takes_two_l_minus_one_forwards_and_sends_a_gradient() -> None:
    weight = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    denoise, calls = context_denoiser(3, weight)
    blocks = torch.full((2, 6), 5, dtype=torch.long)
    options = ((1, 2, 3, 4), (1, 2, 4, 3), (2, 2, 3, 4))
    blocks[0, 1:5] = torch.tensor(options[1])
    blocks[1, 2:6] = torch.tensor(options[2])
    slots = [SlotOptions(0, 1, options), SlotOptions(1, 2, options)]
    loss = option_loss(denoise, blocks, slots, MASK)
    assert len(calls) == 2 * 4 - 1  # the fully masked level is shared by the two orders
    loss.backward()
    assert weight.grad is not None and math.isfinite(float(weight.grad)) and weight.grad != 0


def test_refuses_a_gold_outside_the_options_and_two_slots_in_a_row() -> None:
    denoise, _ = context_denoiser(1)
    blocks = torch.full((1, 6), 5, dtype=torch.long)
    blocks[0, 0:2] = torch.tensor([1, 2])
    with pytest.raises(ValueError, match="not among its options"):
        gold_option_log_probs(denoise, blocks, [SlotOptions(0, 0, ((3, 4), (1, 3)))], MASK)
    two = [SlotOptions(0, 0, ((1, 2), (3, 4))), SlotOptions(0, 3, ((5, 5), (1, 2)))]
    with pytest.raises(ValueError, match="one scored slot per row"):
        gold_option_log_probs(denoise, blocks, two, MASK)
    assert float(option_loss(denoise, blocks, [], MASK)) == 0.0


def test_row_checks_its_options() -> None:
    base = dict(history_ids=[3, 4], history_segments=[0, 0], block_ids=[9, 1, 2],
                block_segments=[1, 1, 1], slot_of=[-1, 0, 0], roles=[0], kind="standalone")
    Row(**base, options=((1, 2), (2, 1)), options_start=1)
    with pytest.raises(ValueError, match="not among the row's options"):
        Row(**base, options=((2, 2), (2, 1)), options_start=1)
    with pytest.raises(ValueError, match="options_start"):
        Row(**base, options=((1, 2), (2, 1)), options_start=2)


def test_config_refuses_a_negative_weight() -> None:
    with pytest.raises(DecisionInputError, match="option_loss_weight"):
        config_from_dict({"data": {"option_loss_weight": -0.5}})


@pytest.mark.parametrize("draws", [1, 3])
def test_batch_loss_adds_the_weighted_option_loss_of_the_model(draws: int) -> None:
    model = tiny_model(seed=0, random_block=True)
    options = ((1, 2, 3), (1, 3, 2), (4, 2, 3))
    rows = [Row(history_ids=[5, 6, 7, 8][: 2 + b], history_segments=[0] * (2 + b),
                block_ids=[9, *options[b]], block_segments=[1] * 4, slot_of=[-1, 0, 0, 0],
                roles=[0], kind="standalone", options=options, options_start=1)
            for b in range(2)]
    batch = collate(rows, pad_token_id=11)

    def cfg(weight: float, each_order: bool = False):
        return config_from_dict({"data": {"option_loss_weight": weight,
                                          "option_loss_each_order": each_order},
                                 "run": {"denoise_draws": draws}})

    def loss(weight: float, each_order: bool = False) -> torch.Tensor:
        return batch_loss(model, batch, cfg(weight, each_order), MASK,
                          torch.Generator().manual_seed(4))

    def full_forward(ids: torch.Tensor) -> torch.Tensor:  # no cache: the plain forward
        return model(batch.history_ids, ids, history_mask=batch.history_mask,
                     block_mask=batch.block_mask, history_segments=batch.history_segments,
                     block_segments=batch.block_segments)

    with torch.no_grad():
        expected = option_loss(full_forward, batch.block_ids, batch.scored_slots, MASK)
        assert float(expected) > 0
        assert abs(float(loss(2.0) - loss(0.0)) - 2.0 * float(expected)) < 1e-4
        each = option_loss(full_forward, batch.block_ids, batch.scored_slots, MASK,
                           each_order=True)
        assert float(each) > float(expected)  # the two orders differ on this model
        assert abs(float(loss(2.0, True) - loss(0.0)) - 2.0 * float(each)) < 1e-4
