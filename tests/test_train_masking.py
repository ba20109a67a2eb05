"""The block-diffusion objective: mask rates, dependency-aware schedule, loss weightings."""

from __future__ import annotations

import pytest
import torch

from decision.train.masking import (
    ROLE_ABSENT,
    ROLE_EXTRACTION,
    ROLE_PLAIN,
    MaskedBatch,
    apply_mask,
    diffusion_loss,
    sample_t,
    slot_rates,
)

MASK = 1


def test_sample_t_in_range() -> None:
    g = torch.Generator().manual_seed(0)
    t = sample_t(10_000, 0.05, g)
    assert float(t.min()) >= 0.05 and float(t.max()) <= 1.0
    assert abs(float(t.mean()) - 0.525) < 0.01


def test_slot_rates_dependency_aware() -> None:
    g = torch.Generator().manual_seed(0)
    n = 20_000
    roles = torch.tensor([[ROLE_EXTRACTION, ROLE_PLAIN, ROLE_ABSENT]]).repeat(n, 1)
    t = torch.full((n,), 0.8)
    rates = slot_rates(roles, t, g, p_visible=0.3, scale=0.5)
    assert torch.all(rates[:, 1] == 0.8)  # derived: rate t
    assert torch.all(rates[:, 2] == 0.0)  # absent
    ext = rates[:, 0]
    visible = (ext == 0).float().mean().item()
    assert abs(visible - 0.3) < 0.02
    assert torch.allclose(ext[ext > 0], torch.tensor(0.4))  # masked at scale * t otherwise


def test_mask_frequency_matches_rate_and_weights_are_unbiased() -> None:
    """E[1{masked} / rate] = 1 per token: the weighted loss estimates the plain per-token sum."""
    g = torch.Generator().manual_seed(1)
    n, length = 4000, 6
    targets = torch.randint(5, 50, (n, length))
    slot_of = torch.tensor([[-1, 0, 0, 1, 1, 1]]).repeat(n, 1)
    rates = torch.tensor([[0.2, 0.7]]).repeat(n, 1)
    mb = apply_mask(targets, slot_of, rates, MASK, g)
    assert not mb.masked[:, 0].any()  # the marker is never masked
    assert torch.all(mb.noised[mb.masked] == MASK)
    assert torch.all(mb.noised[~mb.masked] == targets[~mb.masked])
    freq0 = mb.masked[:, 1:3].float().mean().item()
    freq1 = mb.masked[:, 3:].float().mean().item()
    assert abs(freq1 - 0.7) < 0.02
    # slot 0 is also masked when a row would otherwise have no masked token, so slightly > 0.2
    assert 0.19 < freq0 < 0.25
    assert abs(mb.weights[:, 3:].sum().item() / (n * 3) - 1.0) < 0.03
    assert mb.n_loss_tokens == n * 5


def test_every_row_with_a_positive_rate_gets_a_masked_token() -> None:
    g = torch.Generator().manual_seed(2)
    targets = torch.randint(5, 50, (500, 4))
    slot_of = torch.tensor([[0, 0, 1, 1]]).repeat(500, 1)
    rates = torch.tensor([[0.0, 0.01]]).repeat(500, 1)  # slot 0 visible, slot 1 rarely masked
    mb = apply_mask(targets, slot_of, rates, MASK, g)
    assert torch.all(mb.masked.any(dim=1))
    assert not mb.masked[:, :2].any()  # a visible slot is never forced


def test_loss_is_weighted_cross_entropy() -> None:
    g = torch.Generator().manual_seed(3)
    targets = torch.tensor([[3, 4, 5]])
    slot_of = torch.tensor([[0, 0, 0]])
    mb = apply_mask(targets, slot_of, torch.tensor([[1.0]]), MASK, g)  # rate 1: all masked
    logits = torch.zeros(1, 3, 8)
    loss = diffusion_loss(logits, targets, mb)
    assert torch.isclose(loss, torch.log(torch.tensor(8.0)))
    half = apply_mask(targets, slot_of, torch.tensor([[0.5]]), MASK, torch.Generator())
    expected = half.masked.sum() * 2 * torch.log(torch.tensor(8.0)) / 3
    assert torch.isclose(diffusion_loss(logits, targets, half, "elbo"), expected)


def test_row_mean_weighting_averages_each_rows_masked_tokens_then_the_rows() -> None:
    """Rows count equally, whatever their length, mask rate or number of masked tokens."""
    targets = torch.tensor([[3, 4, 5, 6], [3, 4, 0, 0], [3, 4, 5, 6]])
    slot_of = torch.tensor([[0, 0, 0, 0], [0, 0, -1, -1], [0, 0, 0, 0]])
    masked = torch.tensor([[True, True, True, False], [False, True, False, False],
                           [False, False, False, False]])
    mb = MaskedBatch(torch.where(masked, MASK, targets), masked,
                     masked.float() * 50.0, int((slot_of >= 0).sum()))
    logits = torch.randn(3, 4, 8, generator=torch.Generator().manual_seed(4))
    ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    expected = (ce[0, :3].mean() + ce[1, 1]) / 2  # row 2 has no masked token: left out
    assert torch.isclose(diffusion_loss(logits, targets, mb, "row_mean"), expected)
    assert torch.isclose(diffusion_loss(logits, targets, mb), expected)  # the default
    with pytest.raises(ValueError, match="weighting"):
        diffusion_loss(logits, targets, mb, "sum")


def test_the_forced_token_is_drawn_across_the_slot_not_always_its_first() -> None:
    """A row's forced token is the eligible one with the smallest u / rate: with equal rates any
    token of the slot, each about equally often. Always forcing the first eligible token kept
    every-row-masked true while the model never trained on the others in sparse rows."""
    g = torch.Generator().manual_seed(5)
    n = 2000
    targets = torch.randint(5, 50, (n, 4))
    slot_of = torch.tensor([[-1, 0, 0, 0]]).repeat(n, 1)
    rates = torch.tensor([[1e-4]]).repeat(n, 1)  # (almost) every row needs a forced token
    mb = apply_mask(targets, slot_of, rates, MASK, g)
    assert torch.equal(mb.masked.sum(dim=1), torch.ones(n, dtype=torch.long))
    assert not mb.masked[:, 0].any()  # never the token outside every slot
    share = mb.masked[:, 1:].float().mean(dim=0)
    assert torch.all((share - 1 / 3).abs() < 0.05), share
