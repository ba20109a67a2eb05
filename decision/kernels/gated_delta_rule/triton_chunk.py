"""Triton kernels of the chunkwise gated delta rule and their autograd.Function.

Same maths as ``naive.py`` (the WY / UT-transform chunk form of Gated DeltaNet, arXiv 2412.06464),
split the way flash-linear-attention splits ``chunk.py``:

forward
  1. ``_wy_fwd_kernel``     one program per (chunk, value head): L2-normalise k, sigmoid beta,
                            cumulative gates G, A = strictly_lower(beta K K^T * Gamma),
                            T = (I + A)^-1 (blocked forward substitution), W = T (beta K e^G),
                            U = T (beta V).
  2. ``_state_fwd_kernel``  one program per (sequence, value head, Dv tile), sequential over chunks:
                            stores the state entering each chunk, V' = U - W S, and the final state.
  3. ``_output_fwd_kernel`` one program per (chunk, value head, Dv tile):
                            O = (Q e^G) S + (Q K^T * Gamma)_{j<=i} V'.
backward (recompute, no activations kept besides the inputs)
  4. kernels 1-2 again for the per-chunk states, then ``_state_bwd_kernel`` runs the reverse state
     recurrence (the sequential part) on the GPU:
        dV' = P^T dO + (K e^{G_C - G}) dS',   dS = e^{G_C} dS' + (Q e^G)^T dO - W^T dV'.
  5. ``_chunk_bwd_kernel``   one program per (chunk, value head): the chunk-local gradients
     (dq, dk, dv, dg, dbeta; given each chunk's entering state S and the gradient dS' of its
     leaving state, a chunk's inputs reach the loss only through O and S'), through the UT
     transform (dA = -T^T dT T^T), the L2 norm and the sigmoid. Where that kernel does not fit
     the GPU's shared memory (head dim 128 on sm_90 needs 264 KiB), the same gradients come from
     one batched PyTorch autograd call of ``naive.chunk_local`` over all chunks.

Sequences are always handled as packed ``[T_total, H, D]`` rows with ``cu_seqlens`` (a fixed-length
batch is B packed sequences of length T), so lengths that are not multiples of the chunk and
variable-length batches share one code path; rows past a sequence's end are masked on load/store.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton import knobs
from triton.runtime.errors import OutOfResources

from decision.errors import DecisionInputError
from decision.kernels._common import L2NORM_EPS, expand_heads, l2norm
from decision.kernels._triton_common import l2_normalise_rows
from decision.kernels.gated_delta_rule.naive import G_FLOOR, chunk_local

INTERPRETED: bool = bool(knobs.runtime.interpret)
BT = 64  # chunk size, as in the reference and fla
# Widest Dv tile, and warps per kernel: chosen from `python -m decision.kernels.compile_check`
# (sm_90, bf16, head dim 128) as the settings with the fewest register spills, not from GPU timings
# (none were available). The tests lower MAX_BV to exercise several tiles with small head dims.
MAX_BV = 32
NUM_WARPS = {"_wy_fwd_kernel": 8, "_state_fwd_kernel": 8, "_output_fwd_kernel": 8,
             "_state_bwd_kernel": 8}
NUM_WARPS["_chunk_bwd_kernel"] = 8
# chunk-local gradients: the Triton kernel, or batched PyTorch autograd of naive.chunk_local
# where it does not fit (same result; the tests run both)
LOCAL_BACKWARD = "triton"
_NO_FIT: set[tuple[object, ...]] = set()  # shapes whose chunk-local kernel did not fit the GPU
# 2 pipeline stages for the state backward: 153 KiB of shared memory (fits an A100) instead of
# 186 KiB, and fewer spills; the others keep Triton's default of 3
NUM_STAGES = {"_state_bwd_kernel": 2}
_G_FLOOR = tl.constexpr(G_FLOOR)  # gates are clamped here, as in naive._prepare
# The state forward's row offsets within a sequence are int32 (64-bit ones spill registers in
# its sequential loop): inputs whose rows x value heads x head dim reach this are refused.
MAX_OFFSET = 2**31


def _empty(*shape: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Every buffer a kernel writes is allocated here (tests poison them with NaN)."""
    return torch.empty(*shape, dtype=dtype, device=device)


@triton.jit
def _load_rows(ptr, pos, valid, head, NH: tl.constexpr, D: tl.constexpr, BD: tl.constexpr):
    """Load a [BT, BD] tile of a packed [T, NH, D] tensor as fp32 (zeros outside)."""
    cols = tl.arange(0, BD)
    mask = valid[:, None] & (cols[None, :] < D)
    x = tl.load(ptr + (pos[:, None] * NH + head) * D + cols[None, :], mask=mask, other=0.0)
    return x.to(tl.float32)


@triton.jit
def _normalise(x, L2: tl.constexpr, EPS: tl.constexpr):
    """Row-wise L2 normalisation x * rsqrt(sum x^2 + eps) (Qwen3.5 / fla ``l2norm``)."""
    if L2:
        x = x * (1.0 / tl.sqrt(tl.sum(x * x, 1) + EPS))[:, None]
    return x


@triton.jit
def _chunk_rows(cu_ptr, idx_ptr, i_c, BT: tl.constexpr):
    """Rows of chunk ``i_c``: (positions [BT], valid mask [BT], position of its first row)."""
    i_n = tl.load(idx_ptr + 2 * i_c)
    i_j = tl.load(idx_ptr + 2 * i_c + 1)
    bos = tl.load(cu_ptr + i_n)
    eos = tl.load(cu_ptr + i_n + 1)
    start = (bos + i_j * BT).to(tl.int64)  # int64: T * H * D can pass 2^31 in long batches
    pos = start + tl.arange(0, BT)
    return pos, pos < eos, start


@triton.jit
def _intra(q, k, gc, valid, PREC: tl.constexpr, BT: tl.constexpr):
    """P = (Q K^T * Gamma) on and below the diagonal, Gamma_ij = exp(G_i - G_j), real rows only."""
    rows = tl.arange(0, BT)
    lower = (rows[:, None] >= rows[None, :]) & valid[:, None]
    # exponent masked before exp: the upper triangle, and rows past the end (whose G is loaded as
    # 0), would be positive and can overflow (then 0 * inf = NaN in P^T dO)
    gamma = tl.where(lower, tl.exp(tl.where(lower, gc[:, None] - gc[None, :], 0.0)), 0.0)
    return tl.dot(q, tl.trans(k), input_precision=PREC) * gamma


@triton.jit
def _ut_inverse(a, PREC: tl.constexpr, BT: tl.constexpr, SUB: tl.constexpr):
    """T = (I + A)^-1 for a strictly lower triangular [BT, BT] tile A."""
    rows = tl.arange(0, BT)
    # UT transform T = (I + A)^-1 (A strictly lower). Split I + A = D + L0 into its 16x16
    # block diagonal D and strictly block-lower L0. D^-1 by forward substitution, the 4 diagonal
    # blocks at once (row i of each block: e_i - sum_{j<i} A_ij Dinv_j; rows finish in order).
    # Then I + A = D (I + N) with N = D^-1 L0 nilpotent (N^4 = 0 for 4 blocks), so
    # T = (I - N)(I + N^2) D^-1: the terms of block forward substitution, no extra cancellation.
    same_blk = (rows[:, None] // SUB) == (rows[None, :] // SUB)
    eye = tl.where(rows[:, None] == rows[None, :], 1.0, 0.0)
    a_d = tl.where(same_blk, a, 0.0)
    tm = eye
    for i in range(1, SUB):
        sel = (rows % SUB) == i
        upd = tl.dot(tl.where(sel[:, None], a_d, 0.0), tm, input_precision=PREC)
        tm = tl.where(sel[:, None], tm - upd, tm)
    n1 = tl.dot(tm, tl.where(same_blk, 0.0, a), input_precision=PREC)
    n2 = tl.dot(n1, n1, input_precision=PREC)
    return tl.dot(tl.dot(eye - n1, eye + n2, input_precision=PREC), tm, input_precision=PREC)


@triton.jit
def _wy_fwd_kernel(
    k_ptr, v_ptr, g_ptr, beta_ptr, w_ptr, u_ptr, gc_ptr, cu_ptr, idx_ptr,
    HK: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    L2: tl.constexpr, EPS: tl.constexpr, PREC: tl.constexpr, SUB: tl.constexpr = 16,
):
    i_c = tl.program_id(0)
    i_h = tl.program_id(1)
    pos, valid, _ = _chunk_rows(cu_ptr, idx_ptr, i_c, BT)
    rows = tl.arange(0, BT)
    k = _normalise(_load_rows(k_ptr, pos, valid, i_h // (HV // HK), HK, DK, BK), L2, EPS)
    g = tl.load(g_ptr + pos * HV + i_h, mask=valid, other=0.0).to(tl.float32)
    # clamped as in naive._prepare: -inf (a full reset) would make G_i - G_j NaN; the
    # derivative there is 0 without masking dg (every term carries exp(G) = 0)
    g = tl.maximum(g, _G_FLOOR)
    b = tl.load(beta_ptr + pos * HV + i_h, mask=valid, other=0.0).to(tl.float32)
    b = tl.where(valid, tl.sigmoid(b), 0.0)  # padded rows write nothing
    gc = tl.cumsum(g, 0)
    tl.store(gc_ptr + pos * HV + i_h, gc, mask=valid)
    kb = k * b[:, None]
    strict = rows[:, None] > rows[None, :]
    gamma = tl.where(strict, tl.exp(tl.where(strict, gc[:, None] - gc[None, :], 0.0)), 0.0)
    a = tl.dot(kb, tl.trans(k), input_precision=PREC) * gamma
    tm = _ut_inverse(a, PREC, BT, SUB)
    w = tl.dot(tm, kb * tl.exp(gc)[:, None], input_precision=PREC)
    ck = tl.arange(0, BK)
    tl.store(w_ptr + (pos[:, None] * HV + i_h) * DK + ck[None, :], w,
             mask=valid[:, None] & (ck[None, :] < DK))
    for i_v in range(0, tl.cdiv(DV, BV)):
        cv = i_v * BV + tl.arange(0, BV)
        vmask = valid[:, None] & (cv[None, :] < DV)
        v = tl.load(v_ptr + (pos[:, None] * HV + i_h) * DV + cv[None, :], mask=vmask, other=0.0)
        u = tl.dot(tm, v.to(tl.float32) * b[:, None], input_precision=PREC)
        tl.store(u_ptr + (pos[:, None] * HV + i_h) * DV + cv[None, :], u, mask=vmask)


@triton.jit
def _state_fwd_kernel(
    k_ptr, w_ptr, u_ptr, gc_ptr, h0_ptr, h_ptr, vn_ptr, ht_ptr, cu_ptr, off_ptr,
    HK: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    L2: tl.constexpr, EPS: tl.constexpr, PREC: tl.constexpr, HAS_H0: tl.constexpr,
):
    # Scalar int64 base pointers per sequence/state + int32 tile offsets: long batches pass 2^31
    # elements, but a tile's offsets from its base stay small (fewer 64-bit registers per element).
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1)
    i_n = i_nh // HV
    i_h = i_nh % HV
    bos = tl.load(cu_ptr + i_n).to(tl.int64)
    t_len = (tl.load(cu_ptr + i_n + 1).to(tl.int64) - bos).to(tl.int32)
    off = tl.load(off_ptr + i_n).to(tl.int64)
    ck = tl.arange(0, BK)
    cv = i_v * BV + tl.arange(0, BV)
    smask = (ck[:, None] < DK) & (cv[None, :] < DV)
    s_off = ck[:, None] * DV + cv[None, :]
    if HAS_H0:
        s = tl.load(h0_ptr + (i_n * HV + i_h).to(tl.int64) * DK * DV + s_off, mask=smask,
                    other=0.0)
        s = s.to(tl.float32)
    else:
        s = tl.zeros([BK, BV], dtype=tl.float32)
    k_base = k_ptr + (bos * HK + i_h // (HV // HK)) * DK
    w_base = w_ptr + (bos * HV + i_h) * DK
    u_base = u_ptr + (bos * HV + i_h) * DV
    vn_base = vn_ptr + (bos * HV + i_h) * DV
    g_base = gc_ptr + bos * HV + i_h
    # row offsets from the sequence's start are int32: row * HV * D < 2^31 is checked by
    # chunk_gated_delta_rule_triton (MAX_OFFSET), where 64-bit tile offsets would spill
    for j in range(0, tl.cdiv(t_len, BT)):
        tl.store(h_ptr + ((off + j) * HV + i_h) * DK * DV + s_off, s, mask=smask)
        rows = j * BT + tl.arange(0, BT)
        valid = rows < t_len
        kmask = valid[:, None] & (ck[None, :] < DK)
        k = tl.load(k_base + rows[:, None] * (HK * DK) + ck[None, :], mask=kmask, other=0.0)
        k = _normalise(k.to(tl.float32), L2, EPS)
        w = tl.load(w_base + rows[:, None] * (HV * DK) + ck[None, :], mask=kmask, other=0.0)
        vmask = valid[:, None] & (cv[None, :] < DV)
        v_off = rows[:, None] * (HV * DV) + cv[None, :]
        u = tl.load(u_base + v_off, mask=vmask, other=0.0)
        gc = tl.load(g_base + rows * HV, mask=valid, other=0.0)
        g_last = tl.load(g_base + (tl.minimum((j + 1) * BT, t_len) - 1) * HV)
        vn = u - tl.dot(w, s, input_precision=PREC)
        tl.store(vn_base + v_off, vn, mask=vmask)
        kd = k * tl.exp(g_last - gc)[:, None]  # padded rows: k = 0
        s = s * tl.exp(g_last) + tl.dot(tl.trans(kd), vn, input_precision=PREC)
    tl.store(ht_ptr + (i_n * HV + i_h).to(tl.int64) * DK * DV + s_off, s, mask=smask)


@triton.jit
def _output_fwd_kernel(
    q_ptr, k_ptr, gc_ptr, h_ptr, vn_ptr, o_ptr, cu_ptr, idx_ptr, scale,
    HK: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    L2: tl.constexpr, EPS: tl.constexpr, PREC: tl.constexpr,
):
    i_c = tl.program_id(0)
    i_h = tl.program_id(1)
    i_v = tl.program_id(2)
    pos, valid, _ = _chunk_rows(cu_ptr, idx_ptr, i_c, BT)
    i_kh = i_h // (HV // HK)
    q = _normalise(_load_rows(q_ptr, pos, valid, i_kh, HK, DK, BK), L2, EPS) * scale
    k = _normalise(_load_rows(k_ptr, pos, valid, i_kh, HK, DK, BK), L2, EPS)
    gc = tl.load(gc_ptr + pos * HV + i_h, mask=valid, other=0.0)
    ck = tl.arange(0, BK)
    cv = i_v * BV + tl.arange(0, BV)
    s = tl.load(h_ptr + (i_c.to(tl.int64) * HV + i_h) * DK * DV + ck[:, None] * DV + cv[None, :],
                mask=(ck[:, None] < DK) & (cv[None, :] < DV), other=0.0)
    vmask = valid[:, None] & (cv[None, :] < DV)
    vn = tl.load(vn_ptr + (pos[:, None] * HV + i_h) * DV + cv[None, :], mask=vmask, other=0.0)
    o = tl.dot(q * tl.exp(gc)[:, None], s, input_precision=PREC)
    o += tl.dot(_intra(q, k, gc, valid, PREC, BT), vn, input_precision=PREC)
    tl.store(o_ptr + (pos[:, None] * HV + i_h) * DV + cv[None, :],
             o.to(o_ptr.dtype.element_ty), mask=vmask)


@triton.jit
def _state_bwd_kernel(
    q_ptr, k_ptr, w_ptr, gc_ptr, do_ptr, dht_ptr, dh_ptr, dh0_ptr, cu_ptr, off_ptr, scale,
    HK: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    L2: tl.constexpr, EPS: tl.constexpr, PREC: tl.constexpr, HAS_DHT: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_nh = tl.program_id(1)
    i_n = i_nh // HV
    i_h = i_nh % HV
    i_kh = i_h // (HV // HK)
    bos = tl.load(cu_ptr + i_n).to(tl.int64)
    eos = tl.load(cu_ptr + i_n + 1).to(tl.int64)
    off = tl.load(off_ptr + i_n).to(tl.int64)
    nc = tl.cdiv(eos - bos, BT)
    ck = tl.arange(0, BK)
    cv = i_v * BV + tl.arange(0, BV)
    smask = (ck[:, None] < DK) & (cv[None, :] < DV)
    s_off = ck[:, None] * DV + cv[None, :]
    hs = (i_n * HV + i_h).to(tl.int64) * DK * DV  # int64: N * HV * DK * DV can pass 2^31
    if HAS_DHT:
        ds = tl.load(dht_ptr + hs + s_off, mask=smask, other=0.0)
        ds = ds.to(tl.float32)
    else:
        ds = tl.zeros([BK, BV], dtype=tl.float32)
    for jj in range(0, nc):
        j = nc - 1 - jj
        # gradient of the state leaving chunk j, consumed by the chunk-local backward
        tl.store(dh_ptr + ((off + j) * HV + i_h) * DK * DV + s_off, ds, mask=smask)
        start = bos + j * BT
        pos = start + tl.arange(0, BT)
        valid = pos < eos
        q = _normalise(_load_rows(q_ptr, pos, valid, i_kh, HK, DK, BK), L2, EPS) * scale
        k = _normalise(_load_rows(k_ptr, pos, valid, i_kh, HK, DK, BK), L2, EPS)
        w = _load_rows(w_ptr, pos, valid, i_h, HV, DK, BK)
        gc = tl.load(gc_ptr + pos * HV + i_h, mask=valid, other=0.0)
        g_last = tl.load(gc_ptr + (tl.minimum(start + BT, eos) - 1) * HV + i_h)
        vmask = valid[:, None] & (cv[None, :] < DV)
        do = tl.load(do_ptr + (pos[:, None] * HV + i_h) * DV + cv[None, :], mask=vmask, other=0.0)
        do = do.to(tl.float32)
        p = _intra(q, k, gc, valid, PREC, BT)
        kd = k * tl.exp(g_last - gc)[:, None]
        dvn = tl.dot(tl.trans(p), do, input_precision=PREC)
        dvn += tl.dot(kd, ds, input_precision=PREC)
        qg = q * tl.exp(gc)[:, None]
        ds = ds * tl.exp(g_last) + tl.dot(tl.trans(qg), do, input_precision=PREC)
        ds -= tl.dot(tl.trans(w), dvn, input_precision=PREC)
    tl.store(dh0_ptr + hs + s_off, ds, mask=smask)


@triton.jit
def _chunk_bwd_kernel(
    q_ptr, k_ptr, v_ptr, beta_ptr, gc_ptr, h_ptr, dh_ptr, do_ptr,
    dq_ptr, dk_ptr, dv_ptr, dg_ptr, db_ptr, cu_ptr, idx_ptr, scale,
    HK: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BT: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    L2: tl.constexpr, EPS: tl.constexpr, PREC: tl.constexpr, SUB: tl.constexpr = 16,
):
    """Chunk-local gradients of one (chunk, value head), given S entering and dS' leaving.

    Reverse mode of the chunk form (see the module docstring), with Gamma_ij = exp(G_i - G_j):
    every term X_ij * Gamma_ij adds (dX_ij X_ij Gamma_ij) to dG_i and subtracts it from dG_j;
    T = (I + A)^-1 gives dA = -T^T dT T^T; finally dg = reverse cumsum of dG in the chunk.
    Everything that involves values runs over Dv tiles, accumulating the sums over Dv (dP, dT,
    dW, ...), so only [BT, BV] value tiles are live. Gradients are per value head (the wrapper
    sums a key head's group).
    """
    i_c = tl.program_id(0)
    i_h = tl.program_id(1)
    pos, valid, start = _chunk_rows(cu_ptr, idx_ptr, i_c, BT)
    rows = tl.arange(0, BT)
    i_kh = i_h // (HV // HK)
    ck = tl.arange(0, BK)
    q, rq = l2_normalise_rows(_load_rows(q_ptr, pos, valid, i_kh, HK, DK, BK), L2, EPS)
    k, rk = l2_normalise_rows(_load_rows(k_ptr, pos, valid, i_kh, HK, DK, BK), L2, EPS)
    qs = q * scale
    b = tl.load(beta_ptr + pos * HV + i_h, mask=valid, other=0.0).to(tl.float32)
    b = tl.where(valid, tl.sigmoid(b), 0.0)
    gc = tl.load(gc_ptr + pos * HV + i_h, mask=valid, other=0.0)
    n_valid = tl.sum(valid.to(tl.int32), 0)
    g_last = tl.load(gc_ptr + (start + n_valid - 1) * HV + i_h)
    both = valid[:, None] & valid[None, :]
    lower = (rows[:, None] >= rows[None, :]) & both
    strict = (rows[:, None] > rows[None, :]) & both
    gam = tl.where(lower, tl.exp(tl.where(lower, gc[:, None] - gc[None, :], 0.0)), 0.0)
    eg = tl.where(valid, tl.exp(gc), 0.0)
    edl = tl.where(valid, tl.exp(g_last - gc), 0.0)
    # recompute the forward pieces of this chunk
    kk = tl.dot(k, tl.trans(k), input_precision=PREC)
    a = tl.where(strict, b[:, None] * kk * gam, 0.0)
    tm = _ut_inverse(a, PREC, BT, SUB)
    tmt = tl.trans(tm)
    kbg = k * (b * eg)[:, None]
    w = tl.dot(tm, kbg, input_precision=PREC)
    p = tl.dot(qs, tl.trans(k), input_precision=PREC) * gam
    kd = k * edl[:, None]
    # sums over Dv, accumulated tile by tile
    dp = tl.zeros([BT, BT], dtype=tl.float32)  # dO V'^T
    dtm = tl.zeros([BT, BT], dtype=tl.float32)  # dU (beta V)^T
    dqg = tl.zeros([BT, BK], dtype=tl.float32)  # dO S^T
    dkd = tl.zeros([BT, BK], dtype=tl.float32)  # V' dS'^T
    dw = tl.zeros([BT, BK], dtype=tl.float32)  # -dV' S^T
    db = tl.zeros([BT], dtype=tl.float32)
    dgl = 0.0
    s_base = (i_c.to(tl.int64) * HV + i_h) * DK * DV
    for i_v in range(0, tl.cdiv(DV, BV)):
        cv = i_v * BV + tl.arange(0, BV)
        smask = (ck[:, None] < DK) & (cv[None, :] < DV)
        s_off = s_base + ck[:, None] * DV + cv[None, :]
        st = tl.load(h_ptr + s_off, mask=smask, other=0.0)
        dst = tl.load(dh_ptr + s_off, mask=smask, other=0.0)
        vmask = valid[:, None] & (cv[None, :] < DV)
        v_off = (pos[:, None] * HV + i_h) * DV + cv[None, :]
        v = tl.load(v_ptr + v_off, mask=vmask, other=0.0).to(tl.float32)
        do = tl.load(do_ptr + v_off, mask=vmask, other=0.0).to(tl.float32)
        vb = v * b[:, None]
        vn = tl.dot(tm, vb, input_precision=PREC) - tl.dot(w, st, input_precision=PREC)
        # O = (Q e^G) S + P V'  and  S' = e^{G_C} S + Kd^T V'
        dvn = tl.dot(tl.trans(p), do, input_precision=PREC)
        dvn += tl.dot(kd, dst, input_precision=PREC)
        dqg += tl.dot(do, tl.trans(st), input_precision=PREC)
        dp += tl.dot(do, tl.trans(vn), input_precision=PREC)
        dkd += tl.dot(vn, tl.trans(dst), input_precision=PREC)
        dgl += tl.sum(tl.sum(st * dst, 1), 0)
        # V' = U - W S,  U = T (beta V)
        dw -= tl.dot(dvn, tl.trans(st), input_precision=PREC)
        dtm += tl.dot(dvn, tl.trans(vb), input_precision=PREC)
        dvb = tl.dot(tmt, dvn, input_precision=PREC)
        db += tl.sum(dvb * v, 1)
        tl.store(dv_ptr + v_off, dvb * b[:, None], mask=vmask)
    dgl = dgl * tl.exp(g_last)
    dq = dqg * eg[:, None]
    dgc = tl.sum(dqg * qs * eg[:, None], 1)
    dp = tl.where(lower, dp, 0.0)
    dpg = dp * gam
    dq += tl.dot(dpg, k, input_precision=PREC)
    dk = tl.dot(tl.trans(dpg), qs, input_precision=PREC)
    t1 = dp * p
    dgc += tl.sum(t1, 1) - tl.sum(t1, 0)
    dk += dkd * edl[:, None]
    t2 = tl.sum(dkd * kd, 1)
    dgl += tl.sum(t2, 0)
    dgc -= t2
    # W = T (beta K e^G)
    dkbg = tl.dot(tmt, dw, input_precision=PREC)
    dtm += tl.dot(dw, tl.trans(kbg), input_precision=PREC)
    da = -tl.dot(tl.dot(tmt, dtm, input_precision=PREC), tmt, input_precision=PREC)
    da = tl.where(strict, da, 0.0)
    dk += dkbg * (b * eg)[:, None]
    db += tl.sum(dkbg * k, 1) * eg
    dgc += tl.sum(dkbg * kbg, 1)
    # A = strictly_lower(beta_i (k_i . k_j) Gamma_ij)
    dag = da * gam
    db += tl.sum(dag * kk, 1)
    dkk = dag * b[:, None]
    dk += tl.dot(dkk, k, input_precision=PREC) + tl.dot(tl.trans(dkk), k, input_precision=PREC)
    t3 = da * a
    dgc += tl.sum(t3, 1) - tl.sum(t3, 0)
    dgc += tl.where(rows == n_valid - 1, dgl, 0.0)  # G_C is the last real row's G
    dg = tl.cumsum(dgc, 0, reverse=True)  # G_i = sum_{t<=i} g_t
    db = db * b * (1.0 - b)  # through the sigmoid
    dq = dq * scale
    if L2:  # through x^ = x r:  dx = r (dx^ - x^ (x^ . dx^))
        dq = rq[:, None] * (dq - q * tl.sum(q * dq, 1)[:, None])
        dk = rk[:, None] * (dk - k * tl.sum(k * dk, 1)[:, None])
    kmask = valid[:, None] & (ck[None, :] < DK)
    tl.store(dq_ptr + (pos[:, None] * HV + i_h) * DK + ck[None, :], dq, mask=kmask)
    tl.store(dk_ptr + (pos[:, None] * HV + i_h) * DK + ck[None, :], dk, mask=kmask)
    tl.store(dg_ptr + pos * HV + i_h, dg, mask=valid)
    tl.store(db_ptr + pos * HV + i_h, db, mask=valid)


def _pow2(n: int, lo: int = 16) -> int:
    return max(lo, triton.next_power_of_2(n))


def _layout(cu_seqlens: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, ...]:
    """(cu int32, chunk index pairs (sequence, chunk) int32 [NT, 2], first chunk per sequence)."""
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
    nchunks = [(n + BT - 1) // BT for n in lengths]
    pairs = [(i, j) for i, nc in enumerate(nchunks) for j in range(nc)]
    offsets = [0]
    for nc in nchunks[:-1]:
        offsets.append(offsets[-1] + nc)
    as_i32 = dict(dtype=torch.int32, device=device)
    idx = torch.tensor(pairs, **as_i32).reshape(-1, 2)
    return cu_seqlens.to(**as_i32), idx, torch.tensor(offsets, **as_i32)


class _Meta:
    """Static sizes and options of one call, shared by forward and backward."""

    def __init__(self, q: torch.Tensor, v: torch.Tensor, scale: float, l2: bool) -> None:
        self.t, self.hk, self.dk = q.shape  # packed [T, H, D]
        self.hv, self.dv = v.shape[1], v.shape[2]
        self.bk, self.bv = _pow2(self.dk), min(MAX_BV, _pow2(self.dv))
        self.scale, self.l2 = scale, l2
        # fp32 inputs: exact fp32 products (tests at ~1e-5); bf16/fp16: tf32 tensor cores
        self.prec = "ieee" if q.dtype == torch.float32 else "tf32"

    def consts(self) -> dict[str, object]:
        return dict(HK=self.hk, HV=self.hv, DK=self.dk, DV=self.dv, BT=BT, BK=self.bk, BV=self.bv,
                    L2=self.l2, EPS=L2NORM_EPS, PREC=self.prec)


def _states(
    m: _Meta, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
    h0: torch.Tensor | None, cu: torch.Tensor, idx: torch.Tensor, off: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """Kernels 1-2: (G, W, entering state per chunk, V', final state) for packed inputs."""
    t, nt, n = k.shape[0], idx.shape[0], cu.numel() - 1
    f32 = dict(dtype=torch.float32, device=k.device)
    gc = _empty(t, m.hv, **f32)
    w = _empty(t, m.hv, m.dk, **f32)
    u = _empty(t, m.hv, m.dv, **f32)
    _wy_fwd_kernel[(nt, m.hv)](k, v, g, beta, w, u, gc, cu, idx, **m.consts(),
                               num_warps=NUM_WARPS["_wy_fwd_kernel"])
    h = _empty(nt, m.hv, m.dk, m.dv, **f32)
    vn = _empty(t, m.hv, m.dv, **f32)
    ht = _empty(n, m.hv, m.dk, m.dv, **f32)
    grid = (triton.cdiv(m.dv, m.bv), n * m.hv)
    _state_fwd_kernel[grid](k, w, u, gc, h0 if h0 is not None else ht, h, vn, ht, cu, off,
                            HAS_H0=h0 is not None, **m.consts(),
                            num_warps=NUM_WARPS["_state_fwd_kernel"])
    return gc, w, h, vn, ht


def _chunk_local_backward(
    m: _Meta, x: tuple[torch.Tensor, ...], h: torch.Tensor, do: torch.Tensor, dh: torch.Tensor,
    cu: torch.Tensor, idx: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """Gradients of q, k, v, g, beta from each chunk's local function, all chunks in one batch.

    Chunk c maps (its inputs, entering state S_c) to (O_c, leaving state S_{c+1}); its inputs
    influence the loss only through those, so their gradient is the VJP with (dO_c, dS_{c+1}),
    with S_c held constant. dS_{c+1} comes from the sequential kernel ``_state_bwd_kernel``.
    """
    starts = cu.long()[idx[:, 0].long()] + idx[:, 1].long() * BT
    pos = starts[:, None] + torch.arange(BT, device=do.device)[None, :]
    valid = pos < cu.long()[idx[:, 0].long() + 1][:, None]
    pos = pos.clamp(max=m.t - 1)
    leaves = [t.detach().requires_grad_(True) for t in x]

    def rows(t: torch.Tensor) -> torch.Tensor:
        """``t``'s rows of each chunk as fp32 ``[NT, BT, H, ...]``, zeros past a sequence's end.

        A ``where``, not a product with a 0/1 mask: rows past the end are another sequence's,
        and 0 * inf = NaN there would reach every gradient of this chunk (as the kernels' masked
        loads do not)."""
        r = t[pos].float()
        return torch.where(valid.view(*valid.shape, *([1] * (r.dim() - 2))), r, 0.0)

    q, k, v, g, beta = (rows(t) for t in leaves)
    vm = valid[..., None].float()
    if m.l2:
        q, k = l2norm(q), l2norm(k)
    q = expand_heads(q, m.hv, 2).transpose(1, 2) * m.scale  # [NT, HV, BT, DK]
    k = expand_heads(k, m.hv, 2).transpose(1, 2)
    v = v.transpose(1, 2)
    g = g.clamp_min(G_FLOOR).transpose(1, 2)
    b = (torch.sigmoid(beta) * vm).transpose(1, 2)  # rows past the end write nothing
    qg, kd, w, u, p, decay_last = chunk_local(q, k, v, g, b)
    vn = u - w @ h
    o = qg @ h + p @ vn
    s_next = h * decay_last[..., None, None] + kd.transpose(-1, -2) @ vn
    do_c = rows(do).transpose(1, 2)
    grads = torch.autograd.grad((o, s_next), leaves, (do_c, dh))
    return tuple(gr.to(t.dtype) for gr, t in zip(grads, x, strict=True))


def _chunk_local_backward_triton(
    m: _Meta, x: tuple[torch.Tensor, ...], gc: torch.Tensor, h: torch.Tensor, do: torch.Tensor,
    dh: torch.Tensor, cu: torch.Tensor, idx: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """Same result as :func:`_chunk_local_backward`, by ``_chunk_bwd_kernel`` (one program per
    chunk and value head, looping over Dv tiles)."""
    q, k, v, _, beta = x
    f32 = dict(dtype=torch.float32, device=q.device)
    dq = _empty(m.t, m.hv, m.dk, **f32)
    dk = _empty(m.t, m.hv, m.dk, **f32)
    dv = _empty(m.t, m.hv, m.dv, **f32)
    dg = _empty(m.t, m.hv, **f32)
    db = _empty(m.t, m.hv, **f32)
    _chunk_bwd_kernel[(idx.shape[0], m.hv)](
        q, k, v, beta, gc, h, dh, do, dq, dk, dv, dg, db, cu, idx, m.scale, **m.consts(),
        num_warps=NUM_WARPS["_chunk_bwd_kernel"])
    grp = m.hv // m.hk  # value heads sharing a key head add their q/k gradients
    dq = dq.view(m.t, m.hk, grp, m.dk).sum(2)
    dk = dk.view(m.t, m.hk, grp, m.dk).sum(2)
    return tuple(gr.to(t.dtype) for gr, t in zip((dq, dk, dv, dg, db), x, strict=True))


class _ChunkGatedDeltaRule(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, g, beta, h0, cu_seqlens, scale, l2):  # type: ignore[override]
        m = _Meta(q, v, scale, l2)
        cu, idx, off = _layout(cu_seqlens, q.device)
        gc, _, h, vn, ht = _states(m, k, v, g, beta, h0, cu, idx, off)
        o = _empty(*v.shape, dtype=v.dtype, device=v.device)
        grid = (idx.shape[0], m.hv, triton.cdiv(m.dv, m.bv))
        _output_fwd_kernel[grid](q, k, gc, h, vn, o, cu, idx, m.scale, **m.consts(),
                                 num_warps=NUM_WARPS["_output_fwd_kernel"])
        ctx.save_for_backward(q, k, v, g, beta, h0, cu, idx, off)
        ctx.meta = m
        return o, ht

    @staticmethod
    def backward(ctx, do, dht):  # type: ignore[override]
        q, k, v, g, beta, h0, cu, idx, off = ctx.saved_tensors
        m: _Meta = ctx.meta
        gc, w, h, _, _ = _states(m, k, v, g, beta, h0, cu, idx, off)  # recompute, not stored
        do = do.contiguous()  # e.g. the stride-0 gradient of o.sum()
        dht = dht.contiguous() if dht is not None else None
        dh = _empty(*h.shape, dtype=h.dtype, device=h.device)
        dh0 = _empty(cu.numel() - 1, m.hv, m.dk, m.dv, dtype=torch.float32, device=q.device)
        grid = (triton.cdiv(m.dv, m.bv), (cu.numel() - 1) * m.hv)
        _state_bwd_kernel[grid](q, k, w, gc, do, dht if dht is not None else dh0, dh, dh0, cu,
                                off, m.scale, HAS_DHT=dht is not None, **m.consts(),
                                num_warps=NUM_WARPS["_state_bwd_kernel"],
                                num_stages=NUM_STAGES["_state_bwd_kernel"])
        grads = None
        key = (m.dk, m.dv, q.dtype, q.device)
        if LOCAL_BACKWARD == "triton" and key not in _NO_FIT:
            try:
                grads = _chunk_local_backward_triton(m, (q, k, v, g, beta), gc, h, do, dh, cu,
                                                     idx)
            except OutOfResources:
                # the kernel needs 264 KiB of shared memory at Dk = Dv = 128 (sm_90 has 227
                # KiB): use the batched-autograd path for this shape from now on
                _NO_FIT.add(key)
        if grads is None:
            with torch.enable_grad():
                grads = _chunk_local_backward(m, (q, k, v, g, beta), h, do, dh, cu, idx)
        dq, dk, dv, dg, dbeta = grads
        dh0 = dh0.to(h0.dtype) if h0 is not None else None
        return dq, dk, dv, dg, dbeta, dh0, None, None, None


def chunk_gated_delta_rule_triton(
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
    """Triton implementation of ``decision.kernels.chunk_gated_delta_rule`` (same contract)."""
    b, t, hk, dk = q.shape
    if dk > 256:
        raise DecisionInputError(f"the Triton kernel supports head dims <= 256, got {dk}", "q")
    if q.dtype == torch.float64:
        raise DecisionInputError("the Triton kernel computes in fp32; use backend='torch' for "
                                 "float64", "q")
    widest = t * v.shape[2] * max(dk, v.shape[3])  # a sequence is at most t tokens (no sync)
    if widest >= MAX_OFFSET:
        raise DecisionInputError(
            f"the Triton kernel addresses a sequence's rows with 32-bit offsets: tokens x value "
            f"heads x head dim must stay below 2^31, got {t} x {v.shape[2]} x "
            f"{max(dk, v.shape[3])}; split the input or use backend='torch'", "q")
    scale = dk**-0.5 if scale is None else float(scale)
    if cu_seqlens is None:
        cu_seqlens = torch.arange(b + 1, device=q.device, dtype=torch.int64) * t
    flat = [x.reshape(b * t, *x.shape[2:]).contiguous() for x in (q, k, v, g, beta)]
    h0 = initial_state.contiguous() if initial_state is not None else None
    o, ht = _ChunkGatedDeltaRule.apply(*flat, h0, cu_seqlens, scale, use_qk_l2norm)
    return o.view(b, t, *v.shape[2:]), (ht if output_final_state else None)
