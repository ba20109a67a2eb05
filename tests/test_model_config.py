"""DecisionConfig reads every form of the Qwen3.5 family config and round-trips its own."""

from __future__ import annotations

from typing import Any

import pytest

from decision.errors import CheckpointError
from decision.model import DecisionConfig
from decision.model.config import FULL, LINEAR

BASE: dict[str, Any] = {
    "model_type": "qwen3_5_moe_text", "vocab_size": 50, "hidden_size": 32,
    "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
    "linear_value_head_dim": 8, "num_experts": 4, "num_experts_per_tok": 2,
    "moe_intermediate_size": 16, "shared_expert_intermediate_size": 16,
}


def test_full_attention_interval_and_defaults() -> None:
    cfg = DecisionConfig.from_dict({**BASE, "full_attention_interval": 3})
    assert cfg.layer_types == [LINEAR, LINEAR, FULL] * 2
    assert cfg.partial_rotary_factor == 0.25 and cfg.rope_theta == 10000.0
    assert cfg.norm_topk_prob and cfg.num_segments == 9 and cfg.right_conv_kernel == 4


def test_rope_forms() -> None:
    new = DecisionConfig.from_dict({**BASE, "rope_parameters": {
        "rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.5,
        "mrope_section": [11, 11, 10], "mrope_interleaved": True}})
    old = DecisionConfig.from_dict({**BASE, "rope_scaling": {"type": "default"},
                                    "rope_theta": 1e6, "partial_rotary_factor": 0.5})
    assert (new.rope_theta, new.rotary_dim) == (old.rope_theta, old.rotary_dim) == (1e6, 4)
    with pytest.raises(CheckpointError, match="yarn"):
        DecisionConfig.from_dict({**BASE, "rope_parameters": {"rope_type": "yarn"}})


def test_nested_text_config_and_list_eos() -> None:
    top = {"model_type": "qwen3_5_moe", "architectures": ["Qwen3_5MoeForConditionalGeneration"],
           "tie_word_embeddings": True, "text_config": {**BASE, "eos_token_id": [7, 8]},
           "mask_token_id": 49}
    cfg = DecisionConfig.from_dict(top)
    assert cfg.tie_word_embeddings and cfg.eos_token_id == 7 and cfg.mask_token_id == 49
    assert cfg.source_model_type == "qwen3_5_moe_text"


def test_dense_qwen3_5_and_head_dim_fallback() -> None:
    raw = {**BASE, "model_type": "qwen3_5_text", "intermediate_size": 40}
    del raw["head_dim"]
    cfg = DecisionConfig.from_dict(raw)
    assert cfg.num_experts == 0 and cfg.head_dim == 8 and not cfg.layer_is_moe(0)


def test_round_trip_through_to_dict() -> None:
    cfg = DecisionConfig.from_dict({**BASE, "mask_token_id": 49, "block_calibration_init": 0.5})
    again = DecisionConfig.from_dict(cfg.to_dict())
    assert again == cfg


@pytest.mark.parametrize("edit,match", [
    ({"layer_types": ["linear_attention"] * 5}, "layer_types"),
    ({"layer_types": ["mamba"] * 6}, "unknown layer type"),
    ({"linear_num_value_heads": 3}, "multiple"),
    ({"model_type": "gpt2"}, "unknown model_type"),
    ({"architectures": ["MambaForCausalLM"]}, "unknown architecture"),
    ({"hidden_size": None}, "hidden_size"),
    ({"num_attention_heads": "four"}, "num_attention_heads"),
    ({"head_dim": 0}, "head_dim"),
    ({"partial_rotary_factor": 2.0}, "partial_rotary_factor"),
    ({"block_scale_init": -1.0}, "block_scale_init"),
    ({"block_scale_init": 0.0}, "block_scale_init"),
    ({"mask_token_id": 10**6}, "mask_token_id"),
])
def test_bad_configs(edit: dict[str, Any], match: str) -> None:
    with pytest.raises(CheckpointError, match=match):
        DecisionConfig.from_dict({**BASE, **edit})


@pytest.mark.parametrize("edit,match", [
    ({"num_attention_heads": 0, "head_dim": None}, "num_attention_heads must be >= 1"),
    ({"intermediate_size": -1}, "intermediate_size must be >= 0"),
    ({"moe_intermediate_size": -5}, "moe_intermediate_size must be >= 1"),
    ({"shared_expert_intermediate_size": 0}, "shared_expert_intermediate_size must be >= 1"),
    ({"model_type": "qwen3_5_text", "intermediate_size": 0}, "intermediate_size must be >= 1"),
    ({"hidden_size": float("inf")}, "'hidden_size' has invalid value inf"),
    ({"rope_parameters": {"rope_theta": "x"}}, "'rope_theta' has invalid value 'x'"),
    ({"rope_theta": float("inf")}, "'rope_theta' has invalid value inf"),
    ({"rope_theta": 0}, "rope_theta must be > 0"),
    ({"rms_norm_eps": -1.0}, "rms_norm_eps must be > 0"),
    ({"eos_token_id": ["a"]}, "'eos_token_id' has invalid value 'a'"),
    ({"pad_token_id": 50}, "pad_token_id 50 is outside the vocabulary"),
    ({"num_experts": -2}, "num_experts must be >= 0"),
    ({"num_experts_per_tok": 0}, "num_experts_per_tok must lie in"),
    ({"mlp_only_layers": "12"}, "'mlp_only_layers' has invalid value '12'"),
    ({"layer_types": [["linear_attention"]] * 6}, "'layer_types' has invalid value"),
    ({"full_attention_interval": 0}, "'full_attention_interval' has invalid value 0"),
    # loaded, then every Qwen3-Next layer MoE (transformers divides by it) / every request refused
    ({"decoder_sparse_step": 0}, "decoder_sparse_step must be >= 1, got 0"),
    ({"decoder_sparse_step": -2}, "decoder_sparse_step must be >= 1, got -2"),
    ({"max_position_embeddings": 0}, "max_position_embeddings must be >= 1, got 0"),
    # "unknown architecture 'D'" (the string's first letter), "unhashable type: 'list'"
    ({"architectures": "DecisionModel"}, "'architectures' has invalid value 'DecisionModel'"),
    ({"architectures": [["DecisionModel"]]}, "'architectures' has invalid value"),
    ({"model_type": ["qwen3_5_moe_text"]}, "'model_type' has invalid value"),
])
def test_config_fields_that_crashed_or_built_a_wrong_model(edit: dict[str, Any],
                                                           match: str) -> None:
    """Each gave a raw traceback (ZeroDivisionError, OverflowError, ValueError, a negative tensor
    dimension when the model was built) or a model that computes something else (no expert
    chosen, a negative norm epsilon, a pad id past the embedding, every layer full attention)."""
    with pytest.raises(CheckpointError, match=match):
        DecisionConfig.from_dict({**BASE, **edit})


def test_a_layer_count_past_any_model_is_refused_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """num_hidden_layers 10**8 took 90 s and gigabytes (a list of layer types, then a check per
    layer) before the weights could say that the config was wrong."""
    from decision.model import config as config_module

    built: list[int] = []  # the lengths of the layer-type lists built
    real = config_module.default_layer_types

    def counted(num_layers: int, interval: int) -> list[str]:
        built.append(num_layers)
        return real(num_layers, interval)

    monkeypatch.setattr(config_module, "default_layer_types", counted)
    with pytest.raises(CheckpointError, match="num_hidden_layers 1000000 is above 10,000"):
        DecisionConfig.from_dict({**BASE, "num_hidden_layers": 10**6})
    # refused before a list of that many layer types (and a check per layer) was built
    assert built == []


def test_a_nested_model_type_of_another_type_is_named() -> None:
    with pytest.raises(CheckpointError, match="'text_config.model_type' has invalid value 7"):
        DecisionConfig.from_dict({"model_type": "qwen3_5_moe",
                                  "text_config": {**BASE, "model_type": 7}})


@pytest.mark.parametrize(("model_type", "top_k"), [("qwen3_5_moe_text", 8), ("qwen3_next", 10)])
def test_a_missing_top_k_takes_the_family_default(model_type: str, top_k: int) -> None:
    """Without num_experts_per_tok a Qwen3.5-MoE config ran with our default of 2 experts per
    token where transformers runs it with 8 (Qwen3-Next: 10): the same weights, other outputs."""
    raw = {**BASE, "model_type": model_type, "num_experts": 16}
    del raw["num_experts_per_tok"]
    assert DecisionConfig.from_dict(raw).num_experts_per_tok == top_k
    assert DecisionConfig.from_dict({**raw, "num_experts_per_tok": 3}).num_experts_per_tok == 3


def test_rope_parameters_nested_per_layer_type() -> None:
    """transformers 5 accepts rope_parameters keyed by layer type; read as a flat dict, its
    rope_theta 1e6 and partial_rotary_factor 0.5 were replaced by the defaults silently."""
    nested = {"full_attention": {"rope_type": "default", "rope_theta": 1e6,
                                 "partial_rotary_factor": 0.5},
              "linear_attention": {"rope_type": "default"}}
    cfg = DecisionConfig.from_dict({**BASE, "rope_parameters": nested})
    assert (cfg.rope_theta, cfg.partial_rotary_factor) == (1e6, 0.5)
    with pytest.raises(CheckpointError, match="yarn"):
        DecisionConfig.from_dict({**BASE, "rope_parameters": {
            "full_attention": {"rope_type": "yarn"}}})
