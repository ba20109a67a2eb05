"""Triton fused block attention vs the float64 reference: forward and every gradient.

Runs under the Triton interpreter on a CPU machine (tests/conftest.py sets TRITON_INTERPRET=1 before
triton is imported). Fresh random inputs each run (seed printed, shown on failure); buffers the
kernels write are poisoned with NaN first.
"""

from __future__ import annotations

import os
import random

import pytest
import torch

from decision.kernels import _dispatch, block_attention
from decision.kernels.block_attention import triton_fused
from decision.kernels.testing import block_inputs

INTERPRETED = _dispatch.triton_interpreting()
DEVICE = "cpu" if INTERPRETED or not torch.cuda.is_available() else "cuda"
# fp32 kernel vs float64 reference: softmax over <= 200 units and fp32 dot products give ~1e-6
# relative; 2e-5 of the largest magnitude leaves margin and still catches any wrong term.
FP32_TOL = 2e-5
# bf16 inputs/output: output rounded to bf16 (4e-3 relative), tf32 products allowed.
BF16_TOL = 1e-2
FLOOR = 1e-3  # relative to max(|reference|, FLOOR): a gradient that is ~0 is compared absolutely
# dscale_h and dc_h are sums over every logit of the head of terms that cancel (a softmax gradient
# sums to zero over its row), so a small total carries the fp32 rounding of its O(1) summands:
# compare those two on the scale of the summands.
REDUCED_FLOOR = {"scale": 0.1, "calibration": 0.1}

# an overflow or 0 * inf inside an interpreted kernel shows up as a numpy RuntimeWarning: fail on it
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


@pytest.fixture
def seed() -> int:
    s = int(os.environ.get("KERNEL_TEST_SEED", random.randrange(2**31)))
    print(f"seed={s} (replay: KERNEL_TEST_SEED={s})")
    return s


@pytest.fixture
def poison(monkeypatch: pytest.MonkeyPatch) -> None:
    def nan_empty(*shape: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(triton_fused, "_empty", nan_empty)


def _rel_err(a: torch.Tensor, ref: torch.Tensor, floor: float = FLOOR) -> float:
    assert torch.isfinite(a).all(), "non-finite values (an unwritten or overflowed element)"
    a = a.detach().to(ref.device)  # the kernel's result may be on CUDA, the reference on the CPU
    return ((a.double() - ref.double()).abs().max() / ref.abs().max().clamp_min(floor)).item()


def _compare(x: dict[str, torch.Tensor], dtype: torch.dtype, tol: float, seed: int,
             **kw: object) -> None:
    gen = torch.Generator().manual_seed(seed + 1)
    params = ("state", "scale", "calibration")
    x = {n: (t.to(torch.float32 if n in params else dtype) if t.is_floating_point() else t)
         for n, t in x.items() if t is not None}
    ref_in = {n: (t.double().requires_grad_() if t.is_floating_point() else t)
              for n, t in x.items()}
    got_in = {n: (t.to(DEVICE).requires_grad_() if t.is_floating_point() else t.to(DEVICE))
              for n, t in x.items()}
    o_ref = block_attention(**ref_in, **kw, backend="torch")
    o = block_attention(**got_in, **kw, backend="triton")
    assert o.dtype == dtype and o.shape == o_ref.shape
    assert _rel_err(o, o_ref) < tol, _rel_err(o, o_ref)
    # the output gradient reaches the kernel in the output dtype: give the reference the same one
    w = torch.randn(o_ref.shape, generator=gen, dtype=torch.float64).to(dtype).double()
    names = [n for n, t in x.items() if t.is_floating_point()]
    ref_g = torch.autograd.grad((o_ref * w).sum(), [ref_in[n] for n in names])
    got_g = torch.autograd.grad((o.float() * w.to(DEVICE).float()).sum(),
                                [got_in[n] for n in names])
    for name, a, b in zip(names, got_g, ref_g, strict=True):
        floor = REDUCED_FLOOR.get(name, FLOOR)
        assert _rel_err(a, b, floor) < tol, (name, _rel_err(a, b, floor))


def test_triton_runs_interpreted_or_on_cuda() -> None:
    assert INTERPRETED or torch.cuda.is_available()


@pytest.mark.parametrize("l_", [1, 7, 65])
def test_ragged_grouped_heads(l_: int, seed: int, poison: None) -> None:
    """Rows of different valid lengths, Hv = 2 Hk; 65 crosses the 64-wide tile."""
    _compare(block_inputs(3, l_, 1, 2, 16, 16, seed=seed), torch.float32, FP32_TOL, seed)


def test_several_key_heads_each_shared_by_a_group_of_value_heads(seed: int, poison: None) -> None:
    """Hk = 2, Hv = 4: value heads 0, 1 read key head 0 and 2, 3 key head 1 (Qwen3.5's layout).
    With one key head (every other test) any head mapping reads head 0, and a backward that
    paired value head 1 with key head 1 went unnoticed."""
    _compare(block_inputs(2, 9, 2, 4, 16, 16, seed=seed), torch.float32, FP32_TOL, seed)


def test_long_block_no_mask_unaligned_dims(seed: int, poison: None) -> None:
    """L = 200 (4 tiles), no block_mask, Dk = 24 and Dv = 8 (masked columns), Hk = Hv = 2."""
    x = block_inputs(1, 200, 2, 2, 24, 8, seed=seed)
    x["block_mask"] = None
    _compare(x, torch.float32, FP32_TOL, seed)


def test_empty_row_custom_readout_no_l2(seed: int, poison: None) -> None:
    """A row with no valid token (output = history readout), readout_scale and no L2 norm."""
    x = block_inputs(2, 9, 1, 1, 16, 16, seed=seed)
    x["block_mask"][1] = False
    x["q"], x["k"] = x["q"] * 0.3, x["k"] * 0.3  # raw dot products stay moderate without the norm
    _compare(x, torch.float32, FP32_TOL, seed, readout_scale=0.5, use_qk_l2norm=False)


def test_broadcast_output_gradient(seed: int) -> None:
    """o.sum() hands the backward a stride-0 (expanded) gradient."""
    x = block_inputs(2, 9, 1, 2, 16, 16, seed=seed)
    grads = []
    for backend in ("torch", "triton"):
        leaves = {n: (t.clone().to(DEVICE).requires_grad_() if t.is_floating_point()
                      else t.to(DEVICE)) for n, t in x.items()}
        names = [n for n, t in leaves.items() if t.is_floating_point()]
        o = block_attention(**leaves, backend=backend)
        grads.append(torch.autograd.grad(o.sum(), [leaves[n] for n in names]))
    for name, a, b in zip(names, *grads, strict=True):
        assert _rel_err(a, b, REDUCED_FLOOR.get(name, FLOOR)) < FP32_TOL, name


def test_bf16_inputs(seed: int, poison: None) -> None:
    _compare(block_inputs(2, 33, 1, 2, 16, 16, seed=seed), torch.bfloat16, BF16_TOL, seed)
