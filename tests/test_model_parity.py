"""history_logits reproduces transformers' Qwen3.5-MoE / Qwen3.5 / Qwen3-Next forward (float32)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import decision

transformers = pytest.importorskip("transformers")

SMALL = dict(
    vocab_size=61, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
    linear_value_head_dim=8,
)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
           shared_expert_intermediate_size=16)
PATTERNS = {
    "3to1": ["linear_attention"] * 3 + ["full_attention"],
    "full_first": ["full_attention", "linear_attention"],
}


def _perturb(model: torch.nn.Module) -> None:
    """Random init leaves norms at 0/1 and routers at 0; move them so a layout bug shows."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "A_log" in name or "dt_bias" in name or "mlp.gate." in name:
                p.add_(torch.randn_like(p) * 0.2)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def _check(ref_model: torch.nn.Module, path: Path, lengths: tuple[int, ...] = (1, 37, 70)) -> None:
    ours = decision.load_model(path, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    for t in lengths:
        ids = torch.randint(0, ref_model.config.vocab_size, (2, t), generator=gen)
        with torch.no_grad():
            ref = ref_model(ids).logits
            got = ours.history_logits(ids)
        assert _rel(got, ref) < 1e-4, (t, _rel(got, ref))


def _moe_model(layer_types: list[str], **extra: object) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.Qwen3_5MoeTextConfig(
        **SMALL, **MOE, num_hidden_layers=len(layer_types), layer_types=layer_types, **extra
    )
    model = transformers.Qwen3_5MoeForCausalLM(cfg).eval()
    _perturb(model)
    return model


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_moe_parity(pattern: str, tmp_path: Path) -> None:
    model = _moe_model(PATTERNS[pattern])
    model.save_pretrained(tmp_path)
    _check(model, tmp_path)


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_dense_parity(pattern: str, tmp_path: Path) -> None:
    torch.manual_seed(1)
    layer_types = PATTERNS[pattern]
    cfg = transformers.Qwen3_5TextConfig(
        **SMALL, intermediate_size=40, num_hidden_layers=len(layer_types), layer_types=layer_types
    )
    model = transformers.Qwen3_5ForCausalLM(cfg).eval()
    _perturb(model)
    model.save_pretrained(tmp_path)
    assert decision.load_model(tmp_path).config.num_experts == 0
    _check(model, tmp_path)


def test_right_padded_batch_matches_transformers(tmp_path: Path) -> None:
    model = _moe_model(PATTERNS["3to1"])
    model.save_pretrained(tmp_path)
    ours = decision.load_model(tmp_path)
    ids = torch.randint(0, 61, (3, 45), generator=torch.Generator().manual_seed(3))
    lengths = [45, 20, 1]
    mask = torch.arange(45)[None, :] < torch.tensor(lengths)[:, None]
    with torch.no_grad():
        got = ours.history_logits(ids, attention_mask=mask)
        for row, n in enumerate(lengths):
            ref = model(ids[row : row + 1, :n]).logits[0]
            assert _rel(got[row, :n], ref) < 1e-4


def _to_packed(path: Path) -> None:
    """Rewrite a per-expert checkpoint with transformers-5 packed experts and nested prefixes."""
    state = load_file(str(path / "model.safetensors"))
    cfg = json.loads((path / "config.json").read_text())
    out: dict[str, torch.Tensor] = {}
    layers = {k.split(".experts.")[0] for k in state if ".experts." in k}
    for prefix in layers:
        e_n = cfg["num_experts"]
        gate_up = [torch.cat([state.pop(f"{prefix}.experts.{e}.gate_proj.weight"),
                              state.pop(f"{prefix}.experts.{e}.up_proj.weight")])
                   for e in range(e_n)]
        down = [state.pop(f"{prefix}.experts.{e}.down_proj.weight") for e in range(e_n)]
        out[f"{prefix}.experts.gate_up_proj"] = torch.stack(gate_up)
        out[f"{prefix}.experts.down_proj"] = torch.stack(down)
    out.update(state)
    renamed = {k.replace("model.", "model.language_model.", 1) if k.startswith("model.") else k: v
               for k, v in out.items()}
    save_file(renamed, str(path / "model.safetensors"))
    nested = {"model_type": "qwen3_5_moe", "architectures": ["Qwen3_5MoeForConditionalGeneration"],
              "text_config": cfg, "tie_word_embeddings": False}
    (path / "config.json").write_text(json.dumps(nested))


def test_packed_experts_and_nested_config(tmp_path: Path) -> None:
    model = _moe_model(PATTERNS["3to1"])
    per_expert, packed = tmp_path / "per_expert", tmp_path / "packed"
    model.save_pretrained(per_expert)
    model.save_pretrained(packed)
    _to_packed(packed)
    names = load_file(str(packed / "model.safetensors")).keys()
    assert "model.language_model.layers.0.mlp.experts.gate_up_proj" in names
    _check(model, packed, lengths=(37,))
    a = decision.load_model(per_expert).state_dict()
    b = decision.load_model(packed).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_rope_parameters_and_old_rope_forms_agree(tmp_path: Path) -> None:
    """rope_theta/partial_rotary_factor at top level (older files) read like rope_parameters."""
    model = _moe_model(PATTERNS["full_first"], rope_parameters={
        "rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5})
    model.save_pretrained(tmp_path)
    _check(model, tmp_path, lengths=(37,))
    cfg = json.loads((tmp_path / "config.json").read_text())
    rope = cfg.pop("rope_parameters")
    cfg["rope_theta"], cfg["partial_rotary_factor"] = rope["rope_theta"], 0.5
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    loaded = decision.load_model(tmp_path).config
    assert (loaded.rope_theta, loaded.rotary_dim) == (500.0, 8)
    _check(model, tmp_path, lengths=(37,))


def test_qwen3_next_fused_projections(tmp_path: Path) -> None:
    torch.manual_seed(2)
    cfg = transformers.Qwen3NextConfig(
        **SMALL, **MOE, intermediate_size=24, num_hidden_layers=4,
        layer_types=PATTERNS["3to1"], decoder_sparse_step=2, mlp_only_layers=[3],
        norm_topk_prob=False,
    )
    model = transformers.Qwen3NextForCausalLM(cfg).eval()
    _perturb(model)
    model.save_pretrained(tmp_path)
    from safetensors import safe_open

    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        assert "model.layers.0.linear_attn.in_proj_qkvz.weight" in f.keys()
    ours = decision.load_model(tmp_path)
    assert not ours.config.norm_topk_prob
    assert [ours.config.layer_is_moe(i) for i in range(4)] == [False, True, False, False]
    _check(model, tmp_path)


def test_mrope_on_text_positions_is_1d_rope() -> None:
    """Qwen3.5's interleaved M-RoPE with t = h = w positions equals our plain partial RoPE."""
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import (
        Qwen3_5MoeTextRotaryEmbedding,
    )

    from decision.model.rope import RotaryEmbedding

    cfg = transformers.Qwen3_5MoeTextConfig(
        **{**SMALL, "head_dim": 64}, **MOE, num_hidden_layers=1,
        rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5,
                         "mrope_section": [6, 5, 5], "mrope_interleaved": True},
    )
    ref = Qwen3_5MoeTextRotaryEmbedding(cfg)
    positions = torch.arange(300)[None, :] + 5
    cos_ref, sin_ref = ref(torch.zeros(1, dtype=torch.float32), positions[None].expand(3, -1, -1))
    ours = RotaryEmbedding(32, 1e4)
    cos, sin = ours(positions, torch.float32)
    torch.testing.assert_close(cos, cos_ref)
    torch.testing.assert_close(sin, sin_ref)
    # the reduction is not vacuous: distinct h/w positions give other tables
    cos_hw, _ = ref(torch.zeros(1), torch.stack([positions, 2 * positions, 3 * positions]))
    assert not torch.allclose(cos_hw, cos_ref)
