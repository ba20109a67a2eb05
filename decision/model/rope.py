"""Partial rotary position embedding of the gated attention layers.

Qwen3.5 uses interleaved M-RoPE (three position streams t, h, w). For text every stream carries the
same position id, so ``recomposition_frequencies`` picks entries of identical tensors and the
result is plain 1-D RoPE over the first ``rotary_dim`` dimensions of each head (checked against
transformers in tests/test_model_parity.py), the same as Qwen3-Next's rotary embedding.
"""

from __future__ import annotations

import torch
from torch import nn


class RotaryEmbedding(nn.Module):
    """cos/sin tables for integer positions; rotate-half layout (RoFormer, arXiv 2104.09864)."""

    def __init__(self, rotary_dim: int, theta: float) -> None:
        super().__init__()
        exponent = torch.arange(0, rotary_dim, 2, dtype=torch.float) / max(rotary_dim, 1)
        # a plain attribute, not a buffer: model.to(bfloat16) must not round the frequencies
        self.inv_freq = 1.0 / (theta**exponent)
        self.rotary_dim = rotary_dim

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """``positions``: int [B, T]. Returns cos, sin: [B, T, rotary_dim] in ``dtype``."""
        if self.inv_freq.device != positions.device:
            self.inv_freq = self.inv_freq.to(positions.device)
        freqs = positions[..., None].float() * self.inv_freq
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``cos.shape[-1]`` dims of ``x`` [B, T, H, D]; the rest pass through."""
    rot = cos.shape[-1]
    if rot == 0:
        return x
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    return torch.cat([x_rot * cos + _rotate_half(x_rot) * sin, x_pass], dim=-1)
