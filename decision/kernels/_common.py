"""Small tensor helpers shared by the references and the Triton wrappers."""

from __future__ import annotations

import torch

L2NORM_EPS = 1e-6  # same eps as transformers' Qwen3.5 / fla `l2norm`: x * rsqrt(sum x^2 + eps)


def l2norm(x: torch.Tensor, eps: float = L2NORM_EPS) -> torch.Tensor:
    """L2-normalise the last dimension the way Qwen3.5's gated delta rule does."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """fp64 when any input is fp64 (test references), else fp32 (the kernels' precision)."""
    if any(t is not None and t.dtype == torch.float64 for t in tensors):
        return torch.float64
    return torch.float32


def expand_heads(x: torch.Tensor, hv: int, dim: int) -> torch.Tensor:
    """Repeat key heads so that value head ``h`` reads key head ``h // (hv // hk)``."""
    rep = hv // x.shape[dim]
    return x if rep == 1 else x.repeat_interleave(rep, dim=dim)


def pack_to_padded(
    x: torch.Tensor, cu_seqlens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed ``[1, T, ...]`` -> right-padded ``[N, Tmax, ...]`` (zeros) and valid mask [N, Tmax].

    Zero-padding is exact for the delta rule as long as padded steps get g = 0 and beta = 0:
    they then leave the state unchanged, so the final state is the one after the last real token.
    """
    cu = cu_seqlens.to(device=x.device, dtype=torch.long)
    lengths = cu[1:] - cu[:-1]
    t_max = max(int(lengths.max().item()), 1) if lengths.numel() else 1
    pos = torch.arange(t_max, device=x.device)
    valid = pos[None, :] < lengths[:, None]
    idx = (cu[:-1, None] + pos[None, :]).clamp(max=max(x.shape[1] - 1, 0))
    out = x[0][idx]
    # where, not a product: a padded slot reads another sequence's token (0 * inf = NaN would
    # pass through the padded steps into this sequence's final state)
    out = torch.where(valid.view(*valid.shape, *([1] * (out.dim() - 2))), out, 0.0)
    return out, valid


def padded_to_packed(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_to_padded`: ``[N, Tmax, ...]`` -> ``[1, T, ...]``."""
    return x[valid].unsqueeze(0)
