"""Gated DeltaNet layer: the exact causal history path and the bidirectional block path.

History path = Qwen3_5MoeGatedDeltaNet (transformers): in_proj_qkv -> causal depthwise conv
(kernel K) + SiLU -> q, k, v heads; beta = sigmoid(in_proj_b x); g = -exp(A_log) *
softplus(in_proj_a x + dt_bias); gated delta rule with q/k L2-normalised (Yang et al., "Gated
Delta Networks", arXiv 2412.06464, eq. 10); gated RMSNorm with silu(in_proj_z x); out_proj.

Block path (DESIGN.md sec. 2), for the L tokens of a block given the history cache:

    f_t = silu(causal_conv([tail, P])_t + sum_{i=1..Kr} w^R_i P_{t+i})     P = in_proj_qkv(x) masked
    s_tj = a_h q̂_t . k̂_j,   u_t = w_h . x_t + b_h + c_h log L_eff,   r_t = S^T q̂_t / sqrt(Dk)
    o_t = (sum_j m_j e^{s_tj} v_j + e^{u_t} r_t) / (sum_j m_j e^{s_tj} + e^{u_t})

w^R (``right_conv``) starts at 0 so f equals the causal features; w_h (``history_logit``) starts
at 0 and c_h (``block_calibration``) at 1: with equal in-block logits s the history weight is then
e^{b_h} / (e^{s} + e^{b_h}) whatever L is. a_h = exp(``block_log_scale``) stays positive.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from decision.kernels import block_attention, chunk_gated_delta_rule
from decision.model.cache import GDNCache
from decision.model.config import DecisionConfig
from decision.model.norms import GatedRMSNorm

BLOCK_PARAM_NAMES = ("right_conv.weight", "history_logit.weight", "history_logit.bias",
                     "block_calibration", "block_log_scale")


class GatedDeltaNet(nn.Module):
    """One GDN token mixer; parameter names follow Qwen3.5-MoE's ``linear_attn``."""

    def __init__(self, config: DecisionConfig) -> None:
        super().__init__()
        # which implementation of the two ops runs (decision.kernels): "auto" = Triton on CUDA
        # tensors, the PyTorch reference on CPU; set model-wide by DecisionModel.set_kernel_backend
        self.kernel_backend = "auto"
        self.hk, self.hv = config.linear_num_key_heads, config.linear_num_value_heads
        self.dk, self.dv = config.linear_key_head_dim, config.linear_value_head_dim
        self.key_dim, self.value_dim = self.hk * self.dk, self.hv * self.dv
        self.conv_dim = 2 * self.key_dim + self.value_dim
        self.kernel = config.linear_conv_kernel_dim
        hidden = config.hidden_size

        self.in_proj_qkv = nn.Linear(hidden, self.conv_dim, bias=False)
        self.in_proj_z = nn.Linear(hidden, self.value_dim, bias=False)
        self.in_proj_b = nn.Linear(hidden, self.hv, bias=False)
        self.in_proj_a = nn.Linear(hidden, self.hv, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, self.kernel, groups=self.conv_dim,
                                bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.hv))
        self.A_log = nn.Parameter(torch.empty(self.hv).uniform_(0.01, 16).log())
        self.norm = GatedRMSNorm(self.dv, eps=config.rms_norm_eps)
        self.out_proj = nn.Linear(self.value_dim, hidden, bias=False)

        # block-path parameters (ours), neutral at initialisation
        self.right_conv = nn.Conv1d(self.conv_dim, self.conv_dim, config.right_conv_kernel,
                                    groups=self.conv_dim, bias=False)
        self.history_logit = nn.Linear(hidden, self.hv)
        self.block_calibration = nn.Parameter(torch.empty(self.hv))
        self.block_log_scale = nn.Parameter(torch.empty(self.hv))
        self._block_scale_init = (math.sqrt(self.dk) if config.block_scale_init is None
                                 else config.block_scale_init)
        self._calibration_init = config.block_calibration_init
        self._history_bias_init = config.block_history_bias_init
        self.reset_block_parameters()

    def reset_block_parameters(self) -> None:
        """Set the block-path parameters to their neutral initial values."""
        with torch.no_grad():
            self.right_conv.weight.zero_()
            self.history_logit.weight.zero_()
            self.history_logit.bias.fill_(self._history_bias_init)
            self.block_calibration.fill_(self._calibration_init)
            self.block_log_scale.fill_(math.log(self._block_scale_init))

    # ------------------------------------------------------------------ shared pieces
    def empty_cache(self, batch: int, device: torch.device, dtype: torch.dtype) -> GDNCache:
        """The state before any token: S = 0 and a zero convolution tail."""
        state = torch.zeros(batch, self.hv, self.dk, self.dv, device=device, dtype=torch.float32)
        tail = torch.zeros(batch, self.conv_dim, self.kernel - 1, device=device, dtype=dtype)
        return GDNCache(state, tail)

    def _projected(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """P = in_proj_qkv(x) as [B, C, L], zero at padded tokens (as transformers masks them)."""
        p = self.in_proj_qkv(x) * mask[..., None].to(x.dtype)
        return p.transpose(1, 2)

    def _causal_conv(
        self, p: torch.Tensor, tail: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Causal depthwise conv over [tail, P] (pre-activation) and the concatenation itself."""
        full = torch.cat([tail.to(p.dtype), p], dim=-1)
        w = self.conv1d.weight
        out = F.conv1d(full.to(w.dtype), w, groups=self.conv_dim)
        return out.to(p.dtype), full

    def _right_conv(self, p: torch.Tensor) -> torch.Tensor:
        """sum_{i=1..Kr} w^R_i P_{t+i}: the following tokens of the block (zeros past its end)."""
        w = self.right_conv.weight
        kr = w.shape[-1]
        shifted = F.pad(p[..., 1:], (0, kr))  # position t of `shifted` holds P_{t+1}
        return F.conv1d(shifted.to(w.dtype), w, groups=self.conv_dim).to(p.dtype)

    def local_features(
        self, x: torch.Tensor, mask: torch.Tensor, cache: GDNCache, bidirectional: bool
    ) -> torch.Tensor:
        """Post-SiLU q/k/v features [B, L, C]; ``bidirectional`` adds the right-context conv."""
        p = self._projected(x, mask)
        pre, _ = self._causal_conv(p, cache.conv_tail)
        if bidirectional:
            pre = pre + self._right_conv(p)
        return F.silu(pre).transpose(1, 2)

    def _split(self, feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, n, _ = feats.shape
        q, k, v = torch.split(feats, [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        return (q.reshape(b, n, self.hk, self.dk), k.reshape(b, n, self.hk, self.dk),
                v.reshape(b, n, self.hv, self.dv))

    def _output(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Gated RMSNorm with silu(z), then out_proj."""
        b, n = x.shape[:2]
        z = self.in_proj_z(x).reshape(b, n, self.hv, self.dv)
        y = self.norm(o.to(x.dtype), z)
        return self.out_proj(y.reshape(b, n, self.value_dim))

    # ------------------------------------------------------------------ history (causal) path
    def history(
        self, x: torch.Tensor, mask: torch.Tensor, cache: GDNCache
    ) -> tuple[torch.Tensor, GDNCache]:
        """Causal pass over new tokens ``x`` [B, T, H] (right-padded by ``mask``) after ``cache``.

        Padded steps get k = v = 0 and g = 0, so they leave the state unchanged: the final state
        is the one after each row's last real token.
        """
        p = self._projected(x, mask)
        pre, full = self._causal_conv(p, cache.conv_tail)
        q, k, v = self._split(F.silu(pre).transpose(1, 2))
        m = mask[..., None, None].to(k.dtype)
        k, v = k * m, v * m
        g = -self.A_log.float().exp() * F.softplus(self.in_proj_a(x).float() + self.dt_bias.float())
        # where, not a product: a head whose exp(A_log) overflows has g = -inf (a full reset,
        # which the kernels take), and -inf * 0 = NaN at a padded step would reach the row's state
        g = torch.where(mask[..., None].bool(), g, 0.0)
        beta = self.in_proj_b(x)  # raw logits: the op applies the sigmoid
        o, state = chunk_gated_delta_rule(
            q, k, v, g, beta, initial_state=cache.state, output_final_state=True,
            use_qk_l2norm=True, backend=self.kernel_backend,
        )
        # new tail: the last K-1 columns of [tail, P] that belong to real tokens of each row
        n_valid = mask.sum(-1)
        idx = n_valid[:, None] + torch.arange(self.kernel - 1, device=x.device)[None, :]
        tail = full.gather(2, idx[:, None, :].expand(-1, self.conv_dim, -1))
        assert state is not None
        return self._output(o, x), GDNCache(state.float(), tail)

    # ------------------------------------------------------------------ block (bidirectional) path
    def block(self, x: torch.Tensor, mask: torch.Tensor, cache: GDNCache) -> torch.Tensor:
        """Bidirectional denoising pass over the block ``x`` [B, L, H]; reads ``cache`` only."""
        feats = self.local_features(x, mask, cache, bidirectional=True)
        q, k, v = self._split(feats)
        o = block_attention(
            q, k, v, cache.state, self.history_logit(x),
            scale=self.block_log_scale.exp(), calibration=self.block_calibration,
            block_mask=mask, use_qk_l2norm=True, backend=self.kernel_backend,
        )
        return self._output(o, x)
