"""Feed-forward blocks: the dense SwiGLU MLP and Qwen3.5's sparse MoE with a gated shared expert."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from decision.model.config import DecisionConfig


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Router(nn.Module):
    """Softmax router (fp32), top-k, optional re-normalisation of the k weights."""

    def __init__(self, config: DecisionConfig) -> None:
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        self.weight = nn.Parameter(torch.zeros(config.num_experts, config.hidden_size))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` [N, H] -> (weights [N, k] in x's dtype, expert indices [N, k])."""
        logits = F.linear(x, self.weight)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        top, idx = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            top = top / top.sum(dim=-1, keepdim=True)
        return top.to(logits.dtype), idx


class Experts(nn.Module):
    """Experts stored packed as transformers 5 does.

    ``gate_up_proj``: [E, 2I, H] (gate rows first, then up rows); ``down_proj``: [E, H, I].
    """

    def __init__(self, config: DecisionConfig) -> None:
        super().__init__()
        e, i, h = config.num_experts, config.moe_intermediate_size, config.hidden_size
        self.num_experts = e
        self.gate_up_proj = nn.Parameter(torch.randn(e, 2 * i, h) * 0.02)
        self.down_proj = nn.Parameter(torch.randn(e, h, i) * 0.02)

    def forward(self, x: torch.Tensor, weights: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Sum over the chosen experts of weight * expert(x); loops over the experts hit only."""
        out = torch.zeros_like(x)
        flat = idx.reshape(-1)
        token_of = torch.arange(x.shape[0], device=x.device).repeat_interleave(idx.shape[1])
        w_flat = weights.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=self.num_experts).tolist()
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            sel = order[start : start + n]
            start += n
            tok = token_of[sel]
            gate, up = F.linear(x[tok], self.gate_up_proj[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.down_proj[e]) * w_flat[sel, None]
            out.index_add_(0, tok, y.to(out.dtype))
        return out


class SparseMoE(nn.Module):
    """Qwen3.5-MoE block: routed experts plus ``sigmoid(shared_expert_gate(x)) * shared(x)``."""

    def __init__(self, config: DecisionConfig) -> None:
        super().__init__()
        self.gate = Router(config)
        self.experts = Experts(config)
        self.shared_expert = MLP(config.hidden_size, config.shared_expert_intermediate_size)
        self.shared_expert_gate = nn.Linear(config.hidden_size, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        weights, idx = self.gate(flat)
        routed = self.experts(flat, weights, idx)
        shared = torch.sigmoid(self.shared_expert_gate(flat)) * self.shared_expert(flat)
        return (routed + shared).reshape(shape)
