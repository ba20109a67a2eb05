"""Tiny random models for tests and benchmarks, here so that every engineer can use them."""

from __future__ import annotations

from typing import Any

import torch

from decision.model.backbone import DecisionModel
from decision.model.config import DecisionConfig
from decision.model.gdn import GatedDeltaNet


def tiny_config(**overrides: Any) -> DecisionConfig:
    """A small hybrid config ([GDN, GDN, GDN, attention], MoE) whose sizes test head grouping."""
    fields: dict[str, Any] = dict(
        vocab_size=97, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=8, linear_value_head_dim=8, num_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=16, shared_expert_intermediate_size=16, intermediate_size=48,
        mask_token_id=96, pad_token_id=0, eos_token_id=1,
    )
    fields.update(overrides)
    return DecisionConfig(**fields)


def randomize_block_params(model: DecisionModel, generator: torch.Generator | None = None,
                           std: float = 0.3) -> None:
    """Give the block-path parameters (and segment embedding) non-neutral random values."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, GatedDeltaNet):
                for p in (module.right_conv.weight, module.history_logit.weight,
                          module.history_logit.bias):
                    p.copy_(torch.randn(p.shape, generator=generator) * std)
                module.block_calibration.add_(torch.randn(module.hv, generator=generator) * std)
                module.block_log_scale.add_(torch.randn(module.hv, generator=generator) * std)
        w = model.model.segment_embed.weight
        w.copy_(torch.randn(w.shape, generator=generator) * std)


def tiny_model(seed: int = 0, random_block: bool = False, **overrides: Any) -> DecisionModel:
    """A float32 tiny model in eval mode, seeded; ``random_block`` randomises block params."""
    torch.manual_seed(seed)
    model = DecisionModel(tiny_config(**overrides)).eval()
    if random_block:
        randomize_block_params(model, torch.Generator().manual_seed(seed + 1))
    return model


def save_killed_midway(self: DecisionModel, path: Any, max_shard_size: object = None) -> None:
    """A stand-in for ``DecisionModel.save`` that is interrupted after a partial ``config.json``
    (monkeypatch it in to test that an export never leaves a broken model behind)."""
    from pathlib import Path

    Path(path).mkdir(parents=True, exist_ok=True)
    (Path(path) / "config.json").write_text("{")
    raise KeyboardInterrupt
