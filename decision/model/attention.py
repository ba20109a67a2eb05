"""Gated softmax attention (Qwen3_5MoeAttention) with a K/V history cache and a block path.

``q_proj`` gives, per head, the query and an output gate laid out as [q_h (D), gate_h (D)];
q_norm/k_norm are zero-centred RMSNorms over the head dim; partial RoPE; output *
sigmoid(gate); o_proj. History queries attend causally; block queries attend to every valid
history key and every valid block key, at positions continuing from each row's history length.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from decision.model.cache import AttentionCache
from decision.model.config import DecisionConfig
from decision.model.norms import ZeroCenteredRMSNorm
from decision.model.rope import RotaryEmbedding, apply_rope

QUERY_CHUNK = 1024


class GatedAttention(nn.Module):
    """One gated attention token mixer; parameter names follow Qwen3.5-MoE's ``self_attn``."""

    def __init__(self, config: DecisionConfig, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.hq, self.hkv, self.d = (config.num_attention_heads, config.num_key_value_heads,
                                     config.head_dim)
        hidden, bias = config.hidden_size, config.attention_bias
        self.q_proj = nn.Linear(hidden, self.hq * self.d * 2, bias=bias)
        self.k_proj = nn.Linear(hidden, self.hkv * self.d, bias=bias)
        self.v_proj = nn.Linear(hidden, self.hkv * self.d, bias=bias)
        self.o_proj = nn.Linear(self.hq * self.d, hidden, bias=bias)
        self.q_norm = ZeroCenteredRMSNorm(self.d, eps=config.rms_norm_eps)
        self.k_norm = ZeroCenteredRMSNorm(self.d, eps=config.rms_norm_eps)
        self._rotary = [rotary]  # shared, not a submodule (keeps it out of state_dict twice)

    def empty_cache(self, batch: int, device: torch.device, dtype: torch.dtype) -> AttentionCache:
        empty = torch.zeros(batch, self.hkv, 0, self.d, device=device, dtype=dtype)
        return AttentionCache(empty, empty)

    def _project(
        self, x: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [B, Hq, L, D], k/v [B, Hkv, L, D] (normed, rotated), gate [B, L, Hq*D]."""
        b, n, _ = x.shape
        q, gate = self.q_proj(x).view(b, n, self.hq, 2 * self.d).chunk(2, dim=-1)
        q = self.q_norm(q)
        k = self.k_norm(self.k_proj(x).view(b, n, self.hkv, self.d))
        v = self.v_proj(x).view(b, n, self.hkv, self.d)
        cos, sin = self._rotary[0](positions, x.dtype)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return (q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                gate.reshape(b, n, self.hq * self.d))

    def _attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None,
        gate: torch.Tensor,
    ) -> torch.Tensor:
        """Softmax attention with a bool mask ``allowed`` [B, L, S] (None: plain causal, L == S),
        then gate and o_proj."""
        rep = self.hq // self.hkv
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if allowed is None:
            # no mask tensor: the fused kernels skip the masked-out upper triangle (about half
            # the work of a prefill) and keep memory bounded without query chunks
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.d**-0.5)
        else:
            # queries in chunks: the [L, S] score matrix of a long prefill stays bounded in memory
            o = torch.cat([
                F.scaled_dot_product_attention(
                    q[:, :, s : s + QUERY_CHUNK], k, v,
                    attn_mask=allowed[:, None, s : s + QUERY_CHUNK], scale=self.d**-0.5,
                )
                for s in range(0, max(q.shape[2], 1), QUERY_CHUNK)
            ], dim=2)
        b, _, n, _ = o.shape
        o = o.transpose(1, 2).reshape(b, n, self.hq * self.d)
        return self.o_proj(o * torch.sigmoid(gate))

    @staticmethod
    def _history_keys_allowed(lengths: torch.Tensor, t_cache: int, n: int) -> torch.Tensor:
        """[B, n, t_cache]: cached key s is visible to every new query iff s < lengths[b]."""
        s = torch.arange(t_cache, device=lengths.device)
        return (s[None, :] < lengths[:, None])[:, None, :].expand(-1, n, -1)

    def history(
        self, x: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor, cache: AttentionCache
    ) -> tuple[torch.Tensor, AttentionCache]:
        """Causal pass over new tokens (right-padded by ``mask``) after each row's history."""
        n = x.shape[1]
        positions = lengths[:, None] + torch.arange(n, device=x.device)[None, :]
        q, k, v, gate = self._project(x, positions)
        t_cache = cache.key.shape[2]
        if t_cache == 0:
            # A first pass (the usual prefill): right padding only follows a row's valid tokens,
            # so the plain causal mask gives every valid query exactly its allowed keys (a padded
            # query's output differs from the masked form but is never read).
            out = self._attend(q, k, v, None, gate)
            return out, self._compact(k, v, lengths, mask.sum(-1), t_cache)
        keys = torch.cat([cache.key, k], dim=2)
        values = torch.cat([cache.value, v], dim=2)
        j = torch.arange(n, device=x.device)
        causal = (j[None, :] <= j[:, None])[None] & mask[:, None, :]
        causal = causal | torch.eye(n, dtype=torch.bool, device=x.device)[None]  # no empty rows
        allowed = torch.cat([self._history_keys_allowed(lengths, t_cache, n), causal], dim=2)
        out = self._attend(q, keys, values, allowed, gate)
        return out, self._compact(keys, values, lengths, mask.sum(-1), t_cache)

    def block(
        self, x: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor, cache: AttentionCache
    ) -> torch.Tensor:
        """Bidirectional pass over the block: all valid history keys and all valid block keys."""
        n = x.shape[1]
        positions = lengths[:, None] + torch.arange(n, device=x.device)[None, :]
        q, k, v, gate = self._project(x, positions)
        keys = torch.cat([cache.key, k], dim=2)
        values = torch.cat([cache.value, v], dim=2)
        inner = mask[:, None, :].expand(-1, n, -1)
        inner = inner | torch.eye(n, dtype=torch.bool, device=x.device)[None]
        t_cache = cache.key.shape[2]
        allowed = torch.cat([self._history_keys_allowed(lengths, t_cache, n), inner], dim=2)
        return self._attend(q, keys, values, allowed, gate)

    @staticmethod
    def _compact(
        keys: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor, n_new: torch.Tensor,
        t_cache: int,
    ) -> AttentionCache:
        """Close the gap between each row's cached keys and its new keys (right-padded result)."""
        total = lengths + n_new
        t_out = int(total.max().item()) if total.numel() else 0
        p = torch.arange(t_out, device=keys.device)[None, :]
        src = torch.where(p < lengths[:, None], p, t_cache + p - lengths[:, None])
        valid = p < total[:, None]
        src = torch.where(valid, src, torch.zeros_like(src)).clamp(max=keys.shape[2] - 1)
        idx = src[:, None, :, None].expand(-1, keys.shape[1], -1, keys.shape[3])
        keep = valid[:, None, :, None].to(keys.dtype)
        return AttentionCache(keys.gather(2, idx) * keep, values.gather(2, idx) * keep)
