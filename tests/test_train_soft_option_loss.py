"""The soft option loss (decision.train.option_loss): cross-entropy against a slot's soft targets
(distillation), read off the option scorer's own per-option probabilities."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_train_option_set_loss import (
    MASK,
    problems,
    row_denoiser,
    scored_batch,
    uncached_denoiser,
)

from decision.errors import DecisionInputError
from decision.joint.scoring import SlotOptions, score_options
from decision.model.testing import tiny_model
from decision.train.config import config_from_dict
from decision.train.option_loss import (
    option_member_log_probs,
    option_set_log_probs,
    soft_option_loss,
)
from decision.train.rows import Row
from decision.train.step_loss import batch_loss


@settings(max_examples=60, deadline=None)
@given(problems(), st.data())
def test_members_are_the_option_scorers_probabilities(problem, data) -> None:
    blocks, slots, sets, orders, seed = problem
    denoise, _ = row_denoiser(seed)
    masked = blocks.clone()
    for slot in slots:
        masked[slot.row, slot.start : slot.start + slot.length] = MASK
    scored = score_options(denoise, masked, slots, orders)
    got = option_member_log_probs(denoise, blocks, slots, sets, MASK, orders)
    for k, members in enumerate(sets):
        want = scored.probabilities[k][list(members)].double()
        assert torch.allclose(got[k].exp().double(), want, atol=1e-5)
    # the soft loss is the weighted cross-entropy of those, the weights normalised
    weights = [data.draw(st.lists(st.floats(0.01, 5.0), min_size=len(m), max_size=len(m)))
               for m in sets]
    targets = [list(zip(members, w, strict=True)) for members, w in zip(sets, weights,
                                                                        strict=True)]
    loss = soft_option_loss(denoise, blocks, slots, targets, MASK, orders)
    want_loss = sum(-sum(q / sum(w) * float(lp) for q, lp in zip(w, got[k], strict=True))
                    for k, w in enumerate(weights)) / len(slots)
    assert abs(float(loss) - want_loss) < 1e-5


def test_a_set_is_the_sum_of_its_members() -> None:
    options = ((1, 2, 3), (1, 3, 2), (4, 2, 3), (4, 3, 1))
    blocks = torch.full((1, 5), 5, dtype=torch.long)
    blocks[0, 1:4] = torch.tensor(options[0])
    slots = [SlotOptions(0, 1, options)]
    denoise, _ = row_denoiser(7)
    members = option_member_log_probs(denoise, blocks, slots, [(3, 0, 2)], MASK)[0]
    whole = option_set_log_probs(denoise, blocks, slots, [(3, 0, 2)], MASK)[0]
    assert abs(float(torch.logsumexp(members, 0)) - float(whole)) < 1e-6


def test_one_hot_targets_are_the_option_loss_and_the_minimum_is_the_target() -> None:
    options = ((1, 2), (2, 1), (3, 3))
    blocks = torch.full((1, 4), 5, dtype=torch.long)
    blocks[0, 1:3] = torch.tensor(options[0])
    slots = [SlotOptions(0, 1, options)]
    denoise, _ = row_denoiser(2)
    one_hot = soft_option_loss(denoise, blocks, slots, [[(1, 1.0)]], MASK)
    own = option_member_log_probs(denoise, blocks, slots, [(1,)], MASK)[0]
    assert abs(float(one_hot) + float(own[0])) < 1e-6
    # the cross-entropy against q is smallest at p = q: H(q) <= H(q, p), equal only there
    p = option_member_log_probs(denoise, blocks, slots, [(0, 1, 2)], MASK)[0].exp()
    ce_own = soft_option_loss(denoise, blocks, slots,
                              [[(m, float(p[m])) for m in range(3)]], MASK)
    entropy = -float((p * p.log()).sum())
    assert abs(float(ce_own) - entropy) < 1e-5
    other = soft_option_loss(denoise, blocks, slots, [[(0, 0.2), (1, 0.5), (2, 0.3)]], MASK)
    assert float(other) > -(0.2 * math.log(0.2) + 0.5 * math.log(0.5) + 0.3 * math.log(0.3))


def test_refuses_bad_targets() -> None:
    denoise, _ = row_denoiser(1)
    blocks = torch.full((1, 6), 5, dtype=torch.long)
    slots = [SlotOptions(0, 0, ((1, 2), (3, 4)))]
    for bad in [[], [(0, -0.5), (1, 1.0)], [(0, 0.0)]]:
        with pytest.raises(ValueError, match="soft targets"):
            soft_option_loss(denoise, blocks, slots, [bad], MASK)
    with pytest.raises(ValueError, match="distinct options"):
        soft_option_loss(denoise, blocks, slots, [[(2, 1.0)]], MASK)
    assert float(soft_option_loss(denoise, blocks, [], [], MASK)) == 0.0


def test_row_checks_its_soft_targets() -> None:
    base = dict(history_ids=[3, 4], history_segments=[0, 0], block_ids=[9, 1, 2],
                block_segments=[1, 1, 1], slot_of=[-1, 0, 0], roles=[0], kind="standalone")
    options = dict(options=((1, 2), (2, 1), (3, 3)), options_start=1)
    # the targets need not hold the block's answer (a teacher may rank it low)
    assert Row(**base, **options, soft_targets=((1, 0.7), (2, 0.3))).soft_targets
    with pytest.raises(ValueError, match="needs the row's options|need the row's options"):
        Row(**base, soft_targets=((0, 1.0),))
    for bad in [((0, 0.5), (0, 0.5)), ((3, 1.0),)]:
        with pytest.raises(ValueError, match="distinct options"):
            Row(**base, **options, soft_targets=bad)
    for bad in [((0, -1.0), (1, 2.0)), ((0, 0.0),)]:
        with pytest.raises(ValueError, match="non-negative"):
            Row(**base, **options, soft_targets=bad)


def test_config_refuses_a_negative_weight() -> None:
    with pytest.raises(DecisionInputError, match="soft_option_loss_weight"):
        config_from_dict({"data": {"soft_option_loss_weight": -1.0}})


def test_batch_loss_adds_the_weighted_soft_loss_of_the_model() -> None:
    model = tiny_model(seed=0, random_block=True)
    soft = [((0, 0.6), (3, 0.4)), (), ((2, 1.0),)]  # the middle row carries none
    batch = scored_batch("soft_targets", soft)
    assert batch.scored_soft == tuple(soft)

    def loss(weight: float) -> torch.Tensor:
        cfg = config_from_dict({"data": {"option_loss_weight": 1.0,
                                         "soft_option_loss_weight": weight},
                                "run": {"denoise_draws": 2}})
        return batch_loss(model, batch, cfg, MASK, torch.Generator().manual_seed(4))

    with torch.no_grad():
        kept = [0, 2]
        expected = soft_option_loss(uncached_denoiser(model, batch), batch.block_ids,
                                    [batch.scored_slots[k] for k in kept],
                                    [soft[k] for k in kept], MASK)
        assert float(expected) > 0
        assert abs(float(loss(1.5) - loss(0.0)) - 1.5 * float(expected)) < 1e-4
