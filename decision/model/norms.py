"""The two RMSNorms of Qwen3.5 (transformers' modeling_qwen3_5_moe.py, checked line by line)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ZeroCenteredRMSNorm(nn.Module):
    """``x / rms(x) * (1 + w)`` computed in fp32, weight initialised to 0 (Qwen3_5MoeRMSNorm).

    Qwen3.5 multiplies in fp32 and casts once at the end (not Llama's cast-then-scale).
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).type_as(x)


class GatedRMSNorm(nn.Module):
    """``w * (x / rms(x)) * silu(z)`` with w initialised to 1 (Qwen3_5MoeRMSNormGated).

    Norm before gate: the normalised x is cast back to the input dtype, scaled by w, and only
    then multiplied by the fp32 SiLU gate, exactly as the reference does.
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        out = self.weight * xf.to(dtype)
        out = out * F.silu(gate.float())
        return out.to(dtype)
