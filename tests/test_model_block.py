"""Block path: neutral initialisation, block-size calibration, gradients through ``forward``."""

from __future__ import annotations

import math

import torch

from decision.kernels import block_attention
from decision.model.gdn import GatedDeltaNet
from decision.model.testing import tiny_config, tiny_model


def _gdn(seed: int = 0) -> GatedDeltaNet:
    torch.manual_seed(seed)
    return GatedDeltaNet(tiny_config()).eval()


@torch.inference_mode()
def test_zero_right_conv_gives_the_causal_local_features() -> None:
    layer = _gdn()
    x = torch.randn(2, 30, 32)
    mask = torch.ones(2, 30, dtype=torch.bool)
    empty = layer.empty_cache(2, x.device, x.dtype)
    _, cache = layer.history(x[:, :21], mask[:, :21], empty)
    block = x[:, 21:]
    bmask = mask[:, 21:]
    bidir = layer.local_features(block, bmask, cache, bidirectional=True)
    causal = layer.local_features(block, bmask, cache, bidirectional=False)
    assert torch.equal(bidir, causal)
    # ... and these are the features of the same tokens in one causal pass over the whole row
    whole = layer.local_features(x, mask, empty, bidirectional=False)[:, 21:]
    torch.testing.assert_close(causal, whole)
    # a non-zero right conv makes every position but the last depend on later tokens
    layer.right_conv.weight.normal_()
    moved = layer.local_features(block, bmask, cache, bidirectional=True)
    diff = (moved - causal).abs().amax(-1)
    assert bool((diff[:, :-1] > 0).all()) and bool((diff[:, -1] == 0).all())


def _history_weight(layer: GatedDeltaNet, length: int) -> torch.Tensor:
    """Weight of the history unit when every in-block logit is equal (all keys identical).

    With v = 0 the output is w_hist * r_t; r_t is read from a state chosen so that r_t = 1.
    """
    dk, dv = layer.dk, layer.dv
    q = torch.zeros(1, length, layer.hk, dk)
    q[..., 0] = 1.0
    k = q.clone()  # identical keys: s_tj is the same for every j
    v = torch.zeros(1, length, layer.hv, dv)
    state = torch.zeros(1, layer.hv, dk, dv)
    state[:, :, 0, :] = dk**0.5  # r = S^T q̂ / sqrt(dk) = 1 in every channel
    x = torch.randn(1, length, 32)
    o = block_attention(
        q, k, v, state, layer.history_logit(x), scale=layer.block_log_scale.exp(),
        calibration=layer.block_calibration,
    )
    return o[0, :, :, 0]  # [L, Hv]


@torch.inference_mode()
def test_calibration_keeps_history_weight_independent_of_block_length() -> None:
    layer = _gdn()
    layer.history_logit.bias.fill_(0.7)  # any b_h: the weight is e^b / (e^s + e^b) for every L
    weights = [_history_weight(layer, n) for n in (1, 2, 8, 40)]
    s = layer.block_log_scale.exp()[0].item()  # q̂ . k̂ = 1 for identical unit keys
    expected = math.exp(0.7) / (math.exp(s) + math.exp(0.7))
    for w in weights:
        torch.testing.assert_close(w, torch.full_like(w, expected), atol=1e-6, rtol=1e-5)
    # without calibration the history weight dilutes as the block grows
    layer.block_calibration.zero_()
    assert _history_weight(layer, 40).mean() < 0.5 * _history_weight(layer, 2).mean()


def test_gradients_reach_every_block_path_parameter() -> None:
    model = tiny_model(seed=3)
    model.train()
    gen = torch.Generator().manual_seed(0)
    history = torch.randint(2, 96, (2, 12), generator=gen)
    block = torch.randint(2, 96, (2, 6), generator=gen)
    hmask = torch.tensor([[1] * 12, [1] * 7 + [0] * 5])
    seg_h = torch.randint(0, 9, (2, 12), generator=gen)
    seg_b = torch.randint(1, 9, (2, 6), generator=gen)
    logits = model(history, block, history_mask=hmask, history_segments=seg_h,
                   block_segments=seg_b)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             block.reshape(-1))
    loss.backward()
    names = ["model.segment_embed.weight"]
    for i, layer in enumerate(model.model.layers):
        if layer.is_linear:
            names += [f"model.layers.{i}.linear_attn.{n}" for n in (
                "right_conv.weight", "history_logit.weight", "history_logit.bias",
                "block_calibration", "block_log_scale")]
    params = dict(model.named_parameters())
    for name in names:
        grad = params[name].grad
        assert grad is not None and bool(grad.abs().sum() > 0), name
    # the history path is differentiable too (the prefill inside forward)
    assert params["model.layers.0.linear_attn.A_log"].grad.abs().sum() > 0


def test_bf16_autocast_training_step_shares_one_prefill() -> None:
    """The training loop's pattern: one prefill, several denoise draws, bf16 autocast."""
    model = tiny_model(seed=4, random_block=True).train()
    gen = torch.Generator().manual_seed(1)
    history = torch.randint(2, 96, (2, 20), generator=gen)
    block = torch.randint(2, 96, (2, 6), generator=gen)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cache = model.prefill(history, torch.tensor([[1] * 20, [1] * 9 + [0] * 11]))
        loss = sum(
            torch.nn.functional.cross_entropy(model.denoise(block, cache).float().flatten(0, 1),
                                              block.flatten())
            for _ in range(2)
        )
    loss.backward()
    for name, p in model.named_parameters():
        if p.grad is not None:
            assert bool(torch.isfinite(p.grad).all()), name
    assert model.model.layers[0].linear_attn.in_proj_a.weight.grad.abs().sum() > 0
