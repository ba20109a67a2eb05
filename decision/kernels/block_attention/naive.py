"""PyTorch reference of the block path's attention: in-block bidirectional softmax + history unit.

Per value head h, with q̂, k̂ L2-normalised (DESIGN.md sec. 2, docs/interfaces.md):

    s_tj = scale_h q̂_t . k̂_j                          (in-block logits, every j with m_j = 1)
    u_t  = history_logit_t + c_h log(L_eff)            (history unit, block-size calibration)
    r_t  = S^T (readout_scale q̂_t)                     (readout of the history state)
    o_t  = (sum_j m_j e^{s_tj} v_j + e^{u_t} r_t) / (sum_j m_j e^{s_tj} + e^{u_t})

The history unit is always present, so the denominator is never zero, even for an empty block.
"""

from __future__ import annotations

import torch

from decision.kernels._common import compute_dtype, expand_heads, l2norm


def effective_length(block_mask: torch.Tensor | None, b: int, l_: int, device: torch.device,
                     dtype: torch.dtype) -> torch.Tensor:
    """L_eff per row ``[B]``: valid tokens, at least 1 so that log(L_eff) stays finite."""
    if block_mask is None:
        return torch.full((b,), float(max(l_, 1)), device=device, dtype=dtype)
    return block_mask.sum(-1).clamp(min=1).to(dtype)

def block_attention_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: torch.Tensor,
    history_logit: torch.Tensor,
    *,
    scale: torch.Tensor,
    calibration: torch.Tensor,
    block_mask: torch.Tensor | None = None,
    readout_scale: float | None = None,
    use_qk_l2norm: bool = True,
) -> torch.Tensor:
    """Reference of ``decision.kernels.block_attention`` (same contract); computes in fp32/fp64."""
    cd = compute_dtype(q, k, v, state, history_logit, scale, calibration)
    b, l_, _, dk = q.shape
    hv = v.shape[2]
    readout_scale = dk**-0.5 if readout_scale is None else readout_scale
    qf, kf, vf = q.to(cd), k.to(cd), v.to(cd)
    if block_mask is not None:
        # padded keys and values are zeroed, not only their logits masked: their probability 0
        # times a non-finite value (0 * inf = NaN) would reach real rows and gradients
        pad = ~block_mask[:, :, None, None]
        kf, vf = kf.masked_fill(pad, 0.0), vf.masked_fill(pad, 0.0)
    if use_qk_l2norm:
        qf, kf = l2norm(qf), l2norm(kf)
    qh = expand_heads(qf, hv, 2).transpose(1, 2)  # [B, Hv, L, Dk]
    kh = expand_heads(kf, hv, 2).transpose(1, 2)
    vh = vf.transpose(1, 2)  # [B, Hv, L, Dv]
    s = scale.to(cd)[None, :, None, None] * (qh @ kh.transpose(-1, -2))
    if block_mask is not None:
        s = s.masked_fill(~block_mask[:, None, None, :], float("-inf"))
    l_eff = effective_length(block_mask, b, l_, q.device, cd)
    u = history_logit.to(cd).transpose(1, 2) + calibration.to(cd)[None, :, None] * torch.log(
        l_eff
    )[:, None, None]
    r = (readout_scale * qh) @ state.to(cd)  # [B, Hv, L, Dv]
    p = torch.softmax(torch.cat([s, u[..., None]], dim=-1), dim=-1)
    o = p[..., :l_] @ vh + p[..., l_:] * r
    return o.transpose(1, 2).to(v.dtype)

__all__ = ["block_attention_torch", "effective_length"]
