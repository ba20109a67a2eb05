"""Triton kernels of the block path's fused attention (in-block softmax + history unit).

Flash-attention style (Dao et al. 2022): one program per (query tile, batch row, value head) keeps
the softmax running max m, sum l and accumulator over key tiles. The history unit enters as the
first "key": m starts at its logit u_t, l at 1 and the accumulator at its value r_t = S^T q_t, so
the denominator is never zero and a block with no valid key returns the readout. The forward stores
the log-sum-exp per query row for the backward.

Backward (with P_tj = exp(s_tj - lse_t), p_t = exp(u_t - lse_t), D_t = dO_t . O_t):
    dv_j = sum_t P_tj dO_t                 ds_tj = P_tj (dO_t . v_j - D_t)
    dr_t = p_t dO_t                         du_t  = p_t (dO_t . r_t - D_t)
    dq^_t = scale_h sum_j ds_tj k^_j + rs S dr_t        dk^_j = scale_h sum_t ds_tj q^_t
    dS = rs sum_t q^_t dr_t^T   dscale_h = sum ds_tj (q^_t . k^_j)   dc_h = sum_t du_t log L_eff
and through the L2 norm q^ = q r, r = (|q|^2 + eps)^-1/2:  dq = r (dq^ - q^ (q^ . dq^)).
``_bwd_q_kernel`` works per query tile (dq, du, dS and dscale partial sums), ``_bwd_kv_kernel`` per
key tile (dk, dv); per-tile partial sums and the grouped-head sums are reduced in PyTorch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from decision.errors import DecisionInputError
from decision.kernels._common import L2NORM_EPS
from decision.kernels._triton_common import l2_normalise_rows
from decision.kernels.block_attention.naive import effective_length

# warps per kernel, from `python -m decision.kernels.compile_check` (fewest register spills at
# sm_90, bf16, head dim 128), not from GPU timings (none were available)
NUM_WARPS = {"_fwd_kernel": 8, "_bwd_q_kernel": 8, "_bwd_kv_kernel": 8}
# fp32 tiles at head dim 128 need 192-240 KiB of shared memory with Triton's default 3 pipeline
# stages, over an H200's 227 KiB (seen on the GPU: _bwd_q_kernel asked for 245,760 B); 2 stages
# take 128-176 KiB. bf16 keeps the default (128 KiB at 3 stages).
NUM_STAGES_FP32 = {"_fwd_kernel": 2, "_bwd_q_kernel": 2, "_bwd_kv_kernel": 2}
DEFAULT_STAGES = 3


def _empty(*shape: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Every buffer a kernel writes is allocated here (tests poison them with NaN)."""
    return torch.empty(*shape, dtype=dtype, device=device)


@triton.jit
def _rows(ptr, r, rmask, head, NH: tl.constexpr, D: tl.constexpr, BD: tl.constexpr, b, L):
    """[BR, BD] fp32 tile of a [B, L, NH, D] tensor at rows r of batch row b (zeros outside)."""
    cols = tl.arange(0, BD)
    x = tl.load(ptr + ((b * L + r[:, None]) * NH + head) * D + cols[None, :],
                mask=rmask[:, None] & (cols[None, :] < D), other=0.0)
    return x.to(tl.float32)


@triton.jit
def _fwd_kernel(
    q_ptr, k_ptr, v_ptr, s_ptr, hl_ptr, scale_ptr, cal_ptr, lle_ptr, m_ptr, o_ptr, lse_ptr,
    of_ptr, L, rs,
    HK: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BQ: tl.constexpr, BKV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    L2: tl.constexpr, EPS: tl.constexpr, PREC: tl.constexpr, STORE_F32: tl.constexpr,
):
    i_q = tl.program_id(0)
    i_bh = tl.program_id(1)
    b = (i_bh // HV).to(tl.int64)
    h = i_bh % HV
    kh = h // (HV // HK)
    rq = i_q * BQ + tl.arange(0, BQ)
    qm = rq < L
    ck = tl.arange(0, BK)
    cv = tl.arange(0, BV)
    q, _ = l2_normalise_rows(_rows(q_ptr, rq, qm, kh, HK, DK, BK, b, L), L2, EPS)
    sc = tl.load(scale_ptr + h).to(tl.float32)
    u = tl.load(hl_ptr + (b * L + rq) * HV + h, mask=qm, other=0.0).to(tl.float32)
    u += tl.load(cal_ptr + h).to(tl.float32) * tl.load(lle_ptr + b)
    st = tl.load(s_ptr + (b * HV + h) * DK * DV + ck[:, None] * DV + cv[None, :],
                 mask=(ck[:, None] < DK) & (cv[None, :] < DV), other=0.0).to(tl.float32)
    # the history unit: logit u, value r = S^T (rs q); softmax state starts from it
    acc = tl.dot(q * rs, st, input_precision=PREC)
    m_i = u
    l_i = tl.full([BQ], 1.0, tl.float32)
    for start in range(0, L, BKV):
        rk = start + tl.arange(0, BKV)
        km = (rk < L) & (tl.load(m_ptr + b * L + rk, mask=rk < L, other=0) != 0)
        k, _ = l2_normalise_rows(_rows(k_ptr, rk, km, kh, HK, DK, BK, b, L), L2, EPS)
        v = _rows(v_ptr, rk, km, h, HV, DV, BV, b, L)
        s = tl.where(km[None, :], sc * tl.dot(q, tl.trans(k), input_precision=PREC), float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PREC)
        m_i = m_new
    o = acc / l_i[:, None]
    o_off = ((b * L + rq[:, None]) * HV + h) * DV + cv[None, :]
    tl.store(o_ptr + o_off, o.to(o_ptr.dtype.element_ty), mask=qm[:, None] & (cv[None, :] < DV))
    if STORE_F32:  # fp32 copy of a bf16/fp16 output for D_t = dO_t . O_t in the backward
        tl.store(of_ptr + o_off, o, mask=qm[:, None] & (cv[None, :] < DV))
    tl.store(lse_ptr + (b * L + rq) * HV + h, m_i + tl.log(l_i), mask=qm)


@triton.jit
def _bwd_q_kernel(
    q_ptr, k_ptr, v_ptr, s_ptr, hl_ptr, scale_ptr, cal_ptr, lle_ptr, m_ptr, do_ptr, lse_ptr,
    delta_ptr, dq_ptr, du_ptr, ds_ptr, dsc_ptr, L, rs, NQ,
    HK: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BQ: tl.constexpr, BKV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    L2: tl.constexpr, EPS: tl.constexpr, PREC: tl.constexpr,
):
    i_q = tl.program_id(0)
    i_bh = tl.program_id(1)
    b = (i_bh // HV).to(tl.int64)
    h = i_bh % HV
    kh = h // (HV // HK)
    rq = i_q * BQ + tl.arange(0, BQ)
    qm = rq < L
    ck = tl.arange(0, BK)
    cv = tl.arange(0, BV)
    q, rstd = l2_normalise_rows(_rows(q_ptr, rq, qm, kh, HK, DK, BK, b, L), L2, EPS)
    sc = tl.load(scale_ptr + h).to(tl.float32)
    u = tl.load(hl_ptr + (b * L + rq) * HV + h, mask=qm, other=0.0).to(tl.float32)
    u += tl.load(cal_ptr + h).to(tl.float32) * tl.load(lle_ptr + b)
    smask = (ck[:, None] < DK) & (cv[None, :] < DV)
    st = tl.load(s_ptr + (b * HV + h) * DK * DV + ck[:, None] * DV + cv[None, :],
                 mask=smask, other=0.0).to(tl.float32)
    do = _rows(do_ptr, rq, qm, h, HV, DV, BV, b, L)
    lse = tl.load(lse_ptr + (b * L + rq) * HV + h, mask=qm, other=0.0)
    delta = tl.load(delta_ptr + (b * L + rq) * HV + h, mask=qm, other=0.0)
    r = tl.dot(q * rs, st, input_precision=PREC)
    pu = tl.where(qm, tl.exp(u - lse), 0.0)
    du = pu * (tl.sum(do * r, 1) - delta)
    tl.store(du_ptr + (b * L + rq) * HV + h, du, mask=qm)
    dr = pu[:, None] * do
    dq = rs * tl.dot(dr, tl.trans(st), input_precision=PREC)
    dst = rs * tl.dot(tl.trans(q), dr, input_precision=PREC)
    tl.store(ds_ptr + ((b * HV + h) * NQ + i_q) * DK * DV + ck[:, None] * DV + cv[None, :], dst,
             mask=smask)
    dsc = tl.zeros([BQ], dtype=tl.float32)
    for start in range(0, L, BKV):
        rk = start + tl.arange(0, BKV)
        km = (rk < L) & (tl.load(m_ptr + b * L + rk, mask=rk < L, other=0) != 0)
        k, _ = l2_normalise_rows(_rows(k_ptr, rk, km, kh, HK, DK, BK, b, L), L2, EPS)
        v = _rows(v_ptr, rk, km, h, HV, DV, BV, b, L)
        cos = tl.dot(q, tl.trans(k), input_precision=PREC)
        valid = qm[:, None] & km[None, :]
        p = tl.where(valid, tl.exp(tl.where(valid, sc * cos - lse[:, None], 0.0)), 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)
        ds = p * (dp - delta[:, None])
        dq += sc * tl.dot(ds, k, input_precision=PREC)
        dsc += tl.sum(ds * cos, 1)
    tl.store(dsc_ptr + (b * HV + h) * NQ + i_q, tl.sum(dsc, 0))
    # through the L2 norm: dq = r (dq^ - q^ (q^ . dq^))
    if L2:
        dq = rstd[:, None] * (dq - q * tl.sum(q * dq, 1)[:, None])
    tl.store(dq_ptr + ((b * L + rq[:, None]) * HV + h) * DK + ck[None, :], dq,
             mask=qm[:, None] & (ck[None, :] < DK))


@triton.jit
def _bwd_kv_kernel(
    q_ptr, k_ptr, v_ptr, scale_ptr, m_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, L,
    HK: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BQ: tl.constexpr, BKV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    L2: tl.constexpr, EPS: tl.constexpr, PREC: tl.constexpr,
):
    i_k = tl.program_id(0)
    i_bh = tl.program_id(1)
    b = (i_bh // HV).to(tl.int64)
    h = i_bh % HV
    kh = h // (HV // HK)
    rk = i_k * BKV + tl.arange(0, BKV)
    km = (rk < L) & (tl.load(m_ptr + b * L + rk, mask=rk < L, other=0) != 0)
    ck = tl.arange(0, BK)
    cv = tl.arange(0, BV)
    k, rstd = l2_normalise_rows(_rows(k_ptr, rk, km, kh, HK, DK, BK, b, L), L2, EPS)
    v = _rows(v_ptr, rk, km, h, HV, DV, BV, b, L)
    sc = tl.load(scale_ptr + h).to(tl.float32)
    dk = tl.zeros([BKV, BK], dtype=tl.float32)
    dv = tl.zeros([BKV, BV], dtype=tl.float32)
    for start in range(0, L, BQ):
        rq = start + tl.arange(0, BQ)
        qm = rq < L
        q, _ = l2_normalise_rows(_rows(q_ptr, rq, qm, kh, HK, DK, BK, b, L), L2, EPS)
        do = _rows(do_ptr, rq, qm, h, HV, DV, BV, b, L)
        lse = tl.load(lse_ptr + (b * L + rq) * HV + h, mask=qm, other=0.0)
        delta = tl.load(delta_ptr + (b * L + rq) * HV + h, mask=qm, other=0.0)
        valid = qm[:, None] & km[None, :]
        s = sc * tl.dot(q, tl.trans(k), input_precision=PREC)
        p = tl.where(valid, tl.exp(tl.where(valid, s - lse[:, None], 0.0)), 0.0)  # [BQ, BKV]
        dv += tl.dot(tl.trans(p), do, input_precision=PREC)
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)
        ds = p * (dp - delta[:, None])
        dk += sc * tl.dot(tl.trans(ds), q, input_precision=PREC)
    if L2:
        dk = rstd[:, None] * (dk - k * tl.sum(k * dk, 1)[:, None])
    rmask = rk < L  # masked-out keys get exact zeros (their p is 0)
    tl.store(dk_ptr + ((b * L + rk[:, None]) * HV + h) * DK + ck[None, :], dk,
             mask=rmask[:, None] & (ck[None, :] < DK))
    tl.store(dv_ptr + ((b * L + rk[:, None]) * HV + h) * DV + cv[None, :], dv,
             mask=rmask[:, None] & (cv[None, :] < DV))


def _pow2(n: int, lo: int = 16) -> int:
    return max(lo, triton.next_power_of_2(n))


class _Meta:
    """Static sizes and options of one call, shared by forward and backward."""

    def __init__(self, q: torch.Tensor, v: torch.Tensor, rs: float, l2: bool) -> None:
        self.b, self.l, self.hk, self.dk = q.shape
        self.hv, self.dv = v.shape[2], v.shape[3]
        self.bk, self.bv = _pow2(self.dk), _pow2(self.dv)
        self.bq = self.bkv = min(64, _pow2(self.l))
        self.nq = triton.cdiv(self.l, self.bq)
        self.rs, self.l2 = rs, l2
        # fp32 inputs: exact fp32 products (tests at ~1e-5); bf16/fp16: tf32 tensor cores
        self.prec = "ieee" if q.dtype == torch.float32 else "tf32"
        self.fp32 = q.dtype == torch.float32

    def launch(self, kernel: str) -> dict[str, int]:
        """Warps and pipeline stages of ``kernel`` for this call's dtype."""
        stages = NUM_STAGES_FP32[kernel] if self.fp32 else DEFAULT_STAGES
        return dict(num_warps=NUM_WARPS[kernel], num_stages=stages)

    def consts(self) -> dict[str, object]:
        return dict(HK=self.hk, HV=self.hv, DK=self.dk, DV=self.dv, BQ=self.bq, BKV=self.bkv,
                    BK=self.bk, BV=self.bv, L2=self.l2, EPS=L2NORM_EPS, PREC=self.prec)


class _BlockAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, state, hl, scale, cal, mask, lle, rs, l2):  # type: ignore[override]
        m = _Meta(q, v, rs, l2)
        o = _empty(m.b, m.l, m.hv, m.dv, dtype=v.dtype, device=v.device)
        lse = _empty(m.b, m.l, m.hv, dtype=torch.float32, device=v.device)
        # D_t = dO_t . O_t from a bf16-rounded O loses ~1e-2 in the summed dscale/dc: keep an fp32
        # O for the backward, only when a gradient will be taken and O is not fp32 already
        store_f32 = any(ctx.needs_input_grad) and o.dtype != torch.float32
        of = _empty(*o.shape, dtype=torch.float32, device=v.device) if store_f32 else o
        _fwd_kernel[(m.nq, m.b * m.hv)](q, k, v, state, hl, scale, cal, lle, mask, o, lse, of,
                                        m.l, m.rs, STORE_F32=store_f32, **m.consts(),
                                        **m.launch("_fwd_kernel"))
        ctx.save_for_backward(q, k, v, state, hl, scale, cal, mask, lle, of, lse)
        ctx.meta = m
        return o

    @staticmethod
    def backward(ctx, do):  # type: ignore[override]
        q, k, v, state, hl, scale, cal, mask, lle, o, lse = ctx.saved_tensors
        m: _Meta = ctx.meta
        dev, f32 = q.device, torch.float32
        do = do.contiguous()
        delta = (do.float() * o.float()).sum(-1).contiguous()  # D_t = dO_t . O_t, [B, L, Hv]
        dq = _empty(m.b, m.l, m.hv, m.dk, dtype=f32, device=dev)
        du = _empty(m.b, m.l, m.hv, dtype=f32, device=dev)
        dst = _empty(m.b, m.hv, m.nq, m.dk, m.dv, dtype=f32, device=dev)
        dsc = _empty(m.b, m.hv, m.nq, dtype=f32, device=dev)
        _bwd_q_kernel[(m.nq, m.b * m.hv)](
            q, k, v, state, hl, scale, cal, lle, mask, do, lse, delta, dq, du, dst, dsc, m.l,
            m.rs, m.nq, **m.consts(), **m.launch("_bwd_q_kernel"))
        dk = _empty(m.b, m.l, m.hv, m.dk, dtype=f32, device=dev)
        dv = _empty(m.b, m.l, m.hv, m.dv, dtype=f32, device=dev)
        _bwd_kv_kernel[(triton.cdiv(m.l, m.bkv), m.b * m.hv)](
            q, k, v, scale, mask, do, lse, delta, dk, dv, m.l, **m.consts(),
            **m.launch("_bwd_kv_kernel"))
        g = m.hv // m.hk  # value heads sharing a key head add their q/k gradients
        dq = dq.view(m.b, m.l, m.hk, g, m.dk).sum(3)
        dk = dk.view(m.b, m.l, m.hk, g, m.dk).sum(3)
        dcal = (du * lle[:, None, None]).sum((0, 1))
        return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dst.sum(2).to(state.dtype),
                du.to(hl.dtype), dsc.sum((0, 2)).to(scale.dtype), dcal.to(cal.dtype),
                None, None, None, None)


def block_attention_triton(
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
    """Triton implementation of ``decision.kernels.block_attention`` (same contract)."""
    b, l_, _, dk = q.shape
    if dk > 256 or v.shape[3] > 256:
        raise DecisionInputError("the Triton kernel supports head dims <= 256", "q")
    if q.dtype == torch.float64:
        raise DecisionInputError("the Triton kernel computes in fp32; use backend='torch' for "
                                 "float64", "q")
    rs = dk**-0.5 if readout_scale is None else float(readout_scale)
    mask = (
        torch.ones(b, l_, dtype=torch.int8, device=q.device)
        if block_mask is None
        else block_mask.to(torch.int8).contiguous()
    )
    lle = torch.log(effective_length(block_mask, b, l_, q.device, torch.float32)).contiguous()
    args = [x.contiguous() for x in (q, k, v, state, history_logit, scale, calibration)]
    return _BlockAttention.apply(*args, mask, lle, rs, use_qk_l2norm)
