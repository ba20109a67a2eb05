"""The chunked gated delta rule the backbone calls agrees with a step-by-step recurrence (float64).

The recurrence below is the test oracle only (the model never uses it): per value head h,
reading key head h // (Hv / Hk), with q, k L2-normalised and beta = sigmoid(raw beta),
    S_t = exp(g_t) S_{t-1} + beta_t k_t (v_t - (exp(g_t) S_{t-1})^T k_t)^T,
    o_t = S_t^T (q_t / sqrt(Dk))
(Yang et al., "Gated Delta Networks", arXiv 2412.06464, eq. 10).
"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from decision.kernels import chunk_gated_delta_rule


def step_by_step(q, k, v, g, beta, state):  # type: ignore[no-untyped-def]
    """Plain per-token recurrence; returns (o [B, T, Hv, Dv], final state [B, Hv, Dk, Dv])."""
    b, t, hk, dk = q.shape
    hv = v.shape[2]
    rep = hv // hk
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    beta = torch.sigmoid(beta)
    s = state.clone()
    out = torch.zeros(b, t, hv, v.shape[3], dtype=v.dtype)
    for i in range(t):
        for h in range(hv):
            kh, qh = k[:, i, h // rep], q[:, i, h // rep] * dk**-0.5  # [B, Dk]
            decayed = s[:, h] * torch.exp(g[:, i, h])[:, None, None]
            pred = torch.einsum("bkv,bk->bv", decayed, kh)
            delta = beta[:, i, h, None] * (v[:, i, h] - pred)
            s[:, h] = decayed + torch.einsum("bk,bv->bkv", kh, delta)
            out[:, i, h] = torch.einsum("bkv,bk->bv", s[:, h], qh)
    return out, s


@settings(max_examples=25, deadline=None)
@given(
    b=st.integers(1, 2), t=st.integers(1, 70), hk=st.integers(1, 2), rep=st.sampled_from([1, 2]),
    dk=st.sampled_from([4, 8, 16]), dv=st.sampled_from([4, 8]),
    gate=st.sampled_from(["near0", "near1", "mixed"]), with_state=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_chunked_matches_step_by_step(
    b: int, t: int, hk: int, rep: int, dk: int, dv: int, gate: str, with_state: bool, seed: int
) -> None:
    gen = torch.Generator().manual_seed(seed)
    hv = hk * rep
    f64 = dict(dtype=torch.float64, generator=gen)
    q, k = torch.randn(b, t, hk, dk, **f64), torch.randn(b, t, hk, dk, **f64)
    v = torch.randn(b, t, hv, dv, **f64)
    if gate == "near0":  # decay exp(g) near 0, write strength sigmoid(beta) near 0
        g = -20.0 - 5 * torch.rand(b, t, hv, **f64)
        beta = -12.0 + torch.randn(b, t, hv, **f64)
    elif gate == "near1":  # decay near 1, write strength near 1
        g = -1e-3 * torch.rand(b, t, hv, **f64)
        beta = 12.0 + torch.randn(b, t, hv, **f64)
    else:
        g = -torch.rand(b, t, hv, **f64) * 3
        beta = torch.randn(b, t, hv, **f64) * 3
    state = torch.randn(b, hv, dk, dv, **f64) if with_state else torch.zeros(b, hv, dk, dv,
                                                                               dtype=torch.float64)
    o, final = chunk_gated_delta_rule(
        q, k, v, g, beta, initial_state=state if with_state else None, backend="torch"
    )
    o_ref, final_ref = step_by_step(q, k, v, g, beta, state)
    torch.testing.assert_close(o, o_ref, atol=1e-9, rtol=1e-7)
    assert final is not None
    torch.testing.assert_close(final.to(torch.float64), final_ref, atol=1e-9, rtol=1e-7)
