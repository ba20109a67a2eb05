"""PyTorch references of the gated delta rule: the chunkwise-parallel form and the recurrence.

The chunk form is the CPU path for training and inference (vectorised over batch, heads and, for
everything but the state hand-over, over chunks) and the reference the Triton kernels are tested
against. It follows Gated DeltaNet (Yang, Kautz, Hatamizadeh 2024, arXiv 2412.06464, sec. 3.3) and
flash-linear-attention's ``naive.py``, with the UT transform done by a batched triangular solve.

Per value head, with q, k L2-normalised and q scaled, the recurrence (fp32) is

    S_t = a_t S_{t-1} + beta_t k_t (v_t - a_t S_{t-1}^T k_t)^T,   a_t = exp(g_t)
    o_t = S_t^T q_t.

Within a chunk of C tokens starting from state S, with G_i = sum_{j<=i} g_j (cumulative log-decay)
and Gamma_ij = exp(G_i - G_j) for j <= i, the WY representation (paper eq. 8-9) gives

    A     = strictly_lower(diag(beta) (K K^T) * Gamma)
    T     = (I + A)^{-1}                       (UT transform; unit lower triangular)
    W     = T diag(beta) (K * exp(G))          U = T diag(beta) V
    V'    = U - W S                            (the "new values" each token writes)
    O     = (Q * exp(G)) S + (Q K^T * Gamma)_{j<=i} V'
    S_new = exp(G_C) S + (K * exp(G_C - G))^T V'.

Only exp of non-positive numbers is ever taken (G_i - G_j <= 0 for j <= i), so gates near 0 do not
overflow.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from decision.kernels._common import (
    compute_dtype,
    expand_heads,
    l2norm,
    pack_to_padded,
    padded_to_packed,
)

CHUNK_SIZE = 64
# Inputs of at most this many steps run the recurrence step by step (batched over sequences and
# heads): a few small products a step, where the chunk form pads to a whole 64-step chunk. On one
# CPU core at 4 heads of 32 the two cost the same at about this length.
RECURRENT_MAX_STEPS = 8
# Gates are clamped at this log-decay in both backends: exp(-1000) is 0 in fp32 and fp64 alike, so
# no step changes, but g = -inf (alpha = 0, a full reset) no longer makes the chunk form's
# G_i - G_j = -inf - -inf = NaN. The gradient below the floor is 0, as exp(g) is there.
G_FLOOR = -1000.0


def _prepare(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None,
    use_qk_l2norm: bool,
) -> tuple[torch.Tensor, ...]:
    """Cast, normalise, expand heads, sigmoid beta; return ``[B, H, T, D]`` / ``[B, H, T]``."""
    cd = compute_dtype(q, k, v, g, beta)
    hv = v.shape[2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    q, k = q.to(cd), k.to(cd)
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    q = expand_heads(q, hv, 2).transpose(1, 2) * scale
    k = expand_heads(k, hv, 2).transpose(1, 2)
    v = v.to(cd).transpose(1, 2)
    g = g.to(cd).clamp_min(G_FLOOR).transpose(1, 2)
    beta = torch.sigmoid(beta.to(cd)).transpose(1, 2)
    return q, k, v, g, beta


def chunk_local(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """Chunk-local quantities for chunked ``[..., NC, C, D]`` inputs (beta after sigmoid).

    Returns ``(qg, kd, w, u, p, decay_last)``: ``q*exp(G)``, ``k*exp(G_C - G)``, W, U, the masked
    intra-chunk matrix ``(Q K^T * Gamma)_{j<=i}`` and ``exp(G_C)``. Everything here is parallel over
    chunks; only the state hand-over in :func:`chunk_recurrence` is sequential.
    """
    c = q.shape[-2]
    gc = g.cumsum(-1)
    lower = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()
    # Gamma_ij = exp(G_i - G_j) on and below the diagonal; the mask is applied before exp so the
    # upper triangle (positive exponents) never overflows.
    gamma = torch.exp((gc[..., :, None] - gc[..., None, :]).masked_fill(~lower, float("-inf")))
    kb = k * beta[..., None]
    a = ((kb @ k.transpose(-1, -2)) * gamma).tril(-1)
    eye = torch.eye(c, dtype=q.dtype, device=q.device)
    # UT transform: T = (I + A)^-1 by one unit-triangular solve against I (C columns, cheaper
    # than solving for the Dk + Dv right-hand sides), then W and U by matmuls.
    t_inv = torch.linalg.solve_triangular(a + eye, eye.expand_as(a), upper=False,
                                          unitriangular=True)
    u = t_inv @ (v * beta[..., None])
    w = t_inv @ (kb * gc.exp()[..., None])
    p = (q @ k.transpose(-1, -2)) * gamma
    qg = q * gc.exp()[..., None]
    kd = k * torch.exp(gc[..., -1:] - gc)[..., None]
    return qg, kd, w, u, p, gc[..., -1].exp()


def chunk_recurrence(
    qg: torch.Tensor,
    kd: torch.Tensor,
    w: torch.Tensor,
    u: torch.Tensor,
    p: torch.Tensor,
    decay_last: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hand the state from chunk to chunk (the only sequential part); return (o, final state)."""
    outs = []
    for c in range(qg.shape[2]):
        v_new = u[:, :, c] - w[:, :, c] @ state
        outs.append(qg[:, :, c] @ state + p[:, :, c] @ v_new)
        state = state * decay_last[:, :, c, None, None] + kd[:, :, c].transpose(-1, -2) @ v_new
    return torch.stack(outs, dim=2), state


def _stepwise(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence one step at a time on ``[N, H, T, D]`` inputs (short inputs)."""
    outs = []
    for t in range(q.shape[2]):
        kt = k[:, :, t]
        state = state * g[:, :, t].exp()[..., None, None]
        err = v[:, :, t] - (kt.unsqueeze(-2) @ state).squeeze(-2)  # v_t - (a_t S_{t-1})^T k_t
        state = state + (beta[:, :, t, None] * kt).unsqueeze(-1) * err.unsqueeze(-2)
        outs.append((q[:, :, t].unsqueeze(-2) @ state).squeeze(-2))
    if not outs:
        return v.new_zeros(*v.shape[:2], 0, v.shape[-1]), state
    return torch.stack(outs, dim=2), state


def _chunk_padded(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    chunk_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked delta rule on ``[N, H, T, D]`` inputs; pads T up to a multiple of the chunk."""
    n, h, t, dk = q.shape
    dv = v.shape[-1]
    pad = (-t) % chunk_size
    if pad:
        # Padded steps have k = 0, beta = 0 (no write) and g = 0 (no decay): the state is unchanged.
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    nc = (t + pad) // chunk_size
    if nc == 0:  # empty input: nothing written, the state passes through
        return v.new_zeros(n, h, 0, dv), state
    qc, kc = q.view(n, h, nc, chunk_size, dk), k.view(n, h, nc, chunk_size, dk)
    vc = v.view(n, h, nc, chunk_size, dv)
    gc, bc = g.view(n, h, nc, chunk_size), beta.view(n, h, nc, chunk_size)
    o, state = chunk_recurrence(*chunk_local(qc, kc, vc, gc, bc), state)
    return o.reshape(n, h, nc * chunk_size, dv)[:, :, :t], state


def chunk_gated_delta_rule_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = True,
    cu_seqlens: torch.Tensor | None = None,
    use_qk_l2norm: bool = True,
    chunk_size: int = CHUNK_SIZE,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Chunkwise-parallel reference of ``decision.kernels.chunk_gated_delta_rule`` (same contract).

    Packed sequences (``cu_seqlens``) are right-padded into one ``[N, Tmax]`` batch, which is exact
    (padded steps are no-ops) and keeps the computation vectorised over sequences.
    """
    out_dtype = v.dtype
    qh, kh, vh, gh, bh = _prepare(q, k, v, g, beta, scale, use_qk_l2norm)
    valid = None
    if cu_seqlens is not None:
        # [B=1, H, T, ...] -> [1, T, H, ...] -> padded [N, Tmax, H, ...] -> [N, H, Tmax, ...]
        packed = [x.transpose(1, 2) for x in (qh, kh, vh, gh, bh)]
        padded = []
        for x in packed:
            xp, valid = pack_to_padded(x, cu_seqlens)
            padded.append(xp.transpose(1, 2))
        qh, kh, vh, gh, bh = padded
    n, h, _, dk = qh.shape
    if initial_state is None:
        state = qh.new_zeros(n, h, dk, vh.shape[-1])
    else:
        state = initial_state.to(qh.dtype)
    if qh.shape[2] <= RECURRENT_MAX_STEPS:
        o, state = _stepwise(qh, kh, vh, gh, bh, state)
    else:
        o, state = _chunk_padded(qh, kh, vh, gh, bh, state, chunk_size)
    o = o.transpose(1, 2)
    if valid is not None:
        o = padded_to_packed(o, valid)
    return o.to(out_dtype), (state if output_final_state else None)


def recurrent_gated_delta_rule_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    *,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = True,
    cu_seqlens: torch.Tensor | None = None,
    use_qk_l2norm: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Token-by-token recurrence, the definition the chunk form must equal (slow; for tests)."""
    out_dtype = v.dtype
    qh, kh, vh, gh, bh = _prepare(q, k, v, g, beta, scale, use_qk_l2norm)
    t = qh.shape[2]
    bounds = (
        [(b, 0, t) for b in range(qh.shape[0])]
        if cu_seqlens is None
        else [(0, s, e) for s, e in zip(cu_seqlens.tolist(), cu_seqlens.tolist()[1:], strict=False)]
    )
    outs, finals = [], []
    for i, (b, s, e) in enumerate(bounds):
        if initial_state is None:
            state = qh.new_zeros(qh.shape[1], qh.shape[3], vh.shape[3])
        else:
            state = initial_state[i].to(qh.dtype)
        seq_out = []
        for j in range(s, e):
            qt, kt, vt = qh[b, :, j], kh[b, :, j], vh[b, :, j]
            state = state * gh[b, :, j].exp()[:, None, None]
            err = vt - (state * kt[:, :, None]).sum(1)  # v_t - (a_t S_{t-1})^T k_t
            state = state + bh[b, :, j, None, None] * kt[:, :, None] * err[:, None, :]
            seq_out.append((state * qt[:, :, None]).sum(1))
        empty = vh.new_zeros(vh.shape[1], 0, vh.shape[3])
        outs.append(torch.stack(seq_out, 1) if seq_out else empty)
        finals.append(state)
    o = torch.cat(outs, 1) if cu_seqlens is not None else torch.stack(outs, 0)
    if cu_seqlens is not None:
        o = o.unsqueeze(0)
    return o.transpose(1, 2).to(out_dtype), (torch.stack(finals) if output_final_state else None)
