"""Triton chunked gated delta rule vs the float64 recurrence: forward and gradients.

On a CPU machine the kernels run under the Triton interpreter (tests/conftest.py sets
TRITON_INTERPRET=1 before anything imports triton); with TRITON_INTERPRET=0 and a GPU they run on
CUDA. Inputs are fresh random each run (the seed is printed, shown by pytest on failure); every
buffer the kernels write is poisoned with NaN first, so a row or tile a kernel forgets to write
shows up as NaN. Sizes are kept small because the interpreter runs each program in Python.
"""

from __future__ import annotations

import os
import random
import warnings

import pytest
import torch
from triton.runtime.errors import OutOfResources

from decision.errors import DecisionInputError
from decision.kernels import _dispatch, chunk_gated_delta_rule, recurrent_gated_delta_rule_torch
from decision.kernels.gated_delta_rule import triton_chunk
from decision.kernels.testing import gdn_inputs

INTERPRETED = _dispatch.triton_interpreting()
DEVICE = "cpu" if INTERPRETED or not torch.cuda.is_available() else "cuda"
NAMES = ("q", "k", "v", "g", "beta", "initial_state")

# fp32 kernels against a float64 reference: fp32 rounding over a 64-token chunk, the UT transform
# and the chunk-to-chunk state hand-over gives ~1e-6 relative; 2e-5 of the largest magnitude leaves
# margin without hiding a wrong term (any real bug is O(1e-1) or larger).
FP32_TOL = 2e-5
# bf16 inputs and output: the output is rounded to bf16 (8 bits of mantissa, 4e-3 relative), and
# tf32 products are allowed: 1e-2 relative.
BF16_TOL = 1e-2
# Relative error is taken against max(|reference|, FLOOR). With gates near 0, dL/dg is ~1e-8
# (every term carries a factor exp(g) ~ 1e-5) yet is assembled from O(1) products that cancel
# (e.g. Gamma_ii = exp(G_i - G_i) = 1 feeds +x into dG_i and -x into dG_i), so its fp32 error is
# set by those O(1) terms, not by its own size: the fp32 PyTorch reference itself is off by up to
# 2e-7 absolute there (measured: 3 seeds, B=2, T=100, near-0 gates), so dg gets a floor of 0.05
# (1e-6 absolute); everything else 1e-3. Both still flag any real error (O(1e-1) or more).
FLOOR = 1e-3
FLOOR_G = 0.05

# an overflow or 0 * inf inside an interpreted kernel shows up as a numpy RuntimeWarning: fail on it
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


@pytest.fixture
def seed() -> int:
    s = int(os.environ.get("KERNEL_TEST_SEED", random.randrange(2**31)))
    print(f"seed={s} (replay: KERNEL_TEST_SEED={s})")
    return s


@pytest.fixture
def poison(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fill every buffer the Triton path allocates with NaN."""

    def nan_empty(*shape: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(triton_chunk, "_empty", nan_empty)


def test_triton_runs_interpreted_or_on_cuda() -> None:
    """Guards the set-up: on a machine without CUDA the interpreter must be on (conftest)."""
    assert INTERPRETED or torch.cuda.is_available()
    assert triton_chunk.INTERPRETED == INTERPRETED


def _rel_err(a: torch.Tensor, ref: torch.Tensor, floor: float = FLOOR) -> float:
    assert torch.isfinite(a).all(), "non-finite values (an unwritten or overflowed element)"
    a = a.detach().to(ref.device)  # the kernel's result may be on CUDA, the reference on the CPU
    return ((a.double() - ref.double()).abs().max() / ref.abs().max().clamp_min(floor)).item()


def _compare(x64: dict[str, torch.Tensor], dtype: torch.dtype, tol: float,
             cu: torch.Tensor | None, seed: int, grads: bool = True, **kw: object) -> None:
    gen = torch.Generator().manual_seed(seed + 1)
    leaves64 = {n: t.clone().requires_grad_(grads) for n, t in x64.items()}
    o_ref, s_ref = recurrent_gated_delta_rule_torch(**leaves64, cu_seqlens=cu, **kw)
    # the output gradient reaches the kernel in o's dtype: give the reference the same one
    w_o = torch.randn(o_ref.shape, generator=gen, dtype=torch.float64).to(dtype).double()
    w_s = torch.randn(s_ref.shape, generator=gen, dtype=torch.float64)
    leaves = {
        n: t.detach().to(DEVICE, torch.float32 if n == "initial_state" else dtype)
        .requires_grad_(grads)
        for n, t in x64.items()
    }
    cu_dev = None if cu is None else cu.to(DEVICE)
    o, s = chunk_gated_delta_rule(**leaves, cu_seqlens=cu_dev, backend="triton", **kw)
    assert o.dtype == dtype and s.dtype == torch.float32
    assert _rel_err(o, o_ref) < tol, _rel_err(o, o_ref)
    assert _rel_err(s, s_ref) < tol, _rel_err(s, s_ref)
    if not grads:
        return
    ref_grads = torch.autograd.grad((o_ref * w_o).sum() + (s_ref * w_s).sum(), leaves64.values())
    loss = (o.float() * w_o.to(DEVICE).float()).sum() + (s * w_s.to(DEVICE).float()).sum()
    got = torch.autograd.grad(loss, leaves.values())
    for name, a, b in zip(leaves, got, ref_grads, strict=True):
        floor = FLOOR_G if name == "g" else FLOOR
        assert _rel_err(a, b, floor) < tol, (name, _rel_err(a, b, floor))


def _as64(x: dict[str, torch.Tensor], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Round inputs to the kernel dtype first, so the reference sees exactly the same numbers."""
    return {n: t.to(torch.float32 if n == "initial_state" else dtype).double()
            for n, t in x.items()}


def test_varlen_all_lengths_grouped_heads(seed: int, poison: None) -> None:
    """Lengths 1, 7, 0, 63, 65, 200 packed in one batch, each from its own state; Hv = 2 Hk."""
    lengths = [1, 7, 0, 63, 65, 200]
    x = gdn_inputs(1, sum(lengths), 1, 2, 16, 16, n_states=len(lengths), seed=seed)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    _compare(_as64(x, torch.float32), torch.float32, FP32_TOL, cu, seed)


def test_several_key_heads_each_shared_by_a_group_of_value_heads(seed: int, poison: None) -> None:
    """Hk = 2, Hv = 4 (value heads 0, 1 on key head 0; 2, 3 on key head 1), two chunks: with one
    key head (or Hk = Hv) any head mapping agrees, and the backward kernels' went unchecked."""
    x = gdn_inputs(1, 20, 2, 4, 16, 16, n_states=1, seed=seed)
    cu = torch.tensor([0, 20])
    _compare(_as64(x, torch.float32), torch.float32, FP32_TOL, cu, seed)


def test_batch_gates_near_zero_unaligned_head_dim(seed: int, poison: None) -> None:
    """B = 2, T = 100, gates ~0 (state forgotten each step), Dk = 24.

    The last chunk holds 36 tokens whose cumulative log-decay reaches ~-1000: rows past the end
    must not meet exp(+1000) (overflow, then 0 * inf = NaN in the backward's P^T dO).
    """
    x = gdn_inputs(2, 100, 2, 2, 24, 16, gate="near0", n_states=2, seed=seed)
    _compare(_as64(x, torch.float32), torch.float32, FP32_TOL, None, seed)


def test_gates_near_one_several_value_tiles(seed: int, poison: None,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """T = 63 and 7, gates ~1 (long memory), Dv = 32 split in 16-wide tiles, no initial state."""
    monkeypatch.setattr(triton_chunk, "MAX_BV", 16)
    for t in (63, 7):
        x = gdn_inputs(1, t, 1, 2, 16, 32, gate="near1", seed=seed + t)
        _compare(_as64(x, torch.float32), torch.float32, FP32_TOL, None, seed)


def test_no_l2norm_custom_scale(seed: int, poison: None) -> None:
    """use_qk_l2norm=False and an explicit scale; |k| ~ 0.8 keeps the raw delta rule stable."""
    x = gdn_inputs(1, 70, 1, 2, 16, 16, n_states=1, seed=seed)
    x["q"], x["k"] = x["q"] * 0.2, x["k"] * 0.2
    _compare(_as64(x, torch.float32), torch.float32, FP32_TOL, None, seed, use_qk_l2norm=False,
             scale=0.7)


def test_pytorch_chunk_local_backward_fallback(seed: int, poison: None,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The batched-autograd chunk-local backward (the fallback) gives the same gradients."""
    monkeypatch.setattr(triton_chunk, "LOCAL_BACKWARD", "torch")
    x = gdn_inputs(1, 70, 1, 2, 16, 16, n_states=1, seed=seed)
    _compare(_as64(x, torch.float32), torch.float32, FP32_TOL, None, seed)


def test_bf16_inputs(seed: int, poison: None) -> None:
    x = gdn_inputs(1, 65, 1, 2, 16, 16, n_states=1, seed=seed)
    _compare(_as64(x, torch.bfloat16), torch.bfloat16, BF16_TOL, None, seed)


def test_broadcast_output_gradients(seed: int) -> None:
    """o.sum() + state.sum() hands the backward stride-0 (expanded) gradients."""
    x = gdn_inputs(1, 20, 1, 2, 16, 16, n_states=1, seed=seed)
    grads = []
    for backend in ("torch", "triton"):
        leaves = {n: t.clone().to(DEVICE).requires_grad_() for n, t in x.items()}
        o, s = chunk_gated_delta_rule(**leaves, backend=backend)
        grads.append(torch.autograd.grad(o.sum() + s.sum(), list(leaves.values())))
    for a, b in zip(*grads, strict=True):
        assert _rel_err(a, b) < FP32_TOL


def test_falls_back_when_the_local_kernel_does_not_fit(seed: int,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU without the shared memory for the chunk-local kernel gets the autograd path."""
    attempts = []

    def no_fit(*args: object, **kwargs: object) -> None:
        attempts.append(1)
        raise OutOfResources(573440, 232448, "shared memory")

    monkeypatch.setattr(triton_chunk, "_chunk_local_backward_triton", no_fit)
    monkeypatch.setattr(triton_chunk, "_NO_FIT", set())
    x = gdn_inputs(1, 20, 1, 2, 16, 16, n_states=1, seed=seed)
    ref = None
    for _ in range(2):
        leaves = {n: t.clone().to(DEVICE).requires_grad_() for n, t in x.items()}
        o, s = chunk_gated_delta_rule(**leaves, backend="triton")
        got = torch.autograd.grad(o.sum() + s.sum(), list(leaves.values()))
        ref = ref or got
        for a, b in zip(got, ref, strict=True):
            assert torch.isfinite(a).all() and torch.equal(a, b)
    assert len(attempts) == 1  # remembered: not tried again for the same shape


def test_no_final_state_and_dispatch(seed: int) -> None:
    x = {n: t.to(DEVICE) for n, t in gdn_inputs(1, 9, 1, 1, 16, 16, seed=seed).items()}
    o, s = chunk_gated_delta_rule(**x, output_final_state=False, backend="triton")
    o_ref, _ = chunk_gated_delta_rule(**x, backend="torch")
    assert s is None
    assert _rel_err(o, o_ref) < FP32_TOL


def _run_on_virtual_buffers(monkeypatch: pytest.MonkeyPatch, extent: dict[str, int],
                            real: list[torch.Tensor], pid_shift: tuple[int, int] = (0, 0)
                            ) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Stand-ins for buffers too large to allocate (``extent``: fp32 elements of each), for a
    kernel launched next with a grid of one program, and the list of bad accesses it will fill.

    The interpreter's loads and stores are intercepted: accesses to the small ``real`` tensors
    are performed, every other access must fall inside one stand-in's would-be extent (checked,
    not performed: loads give zeros). ``pid_shift`` is added to the program ids, so that the one
    program runs as the one that addresses the far end of the buffers.
    """
    import numpy as np
    from triton.runtime import interpreter as itp

    fake = {n: (torch.zeros(1), size * 4) for n, size in extent.items()}
    bad: list[str] = []

    def virtual(addr: np.ndarray) -> bool:
        if addr.size == 0 or any(
            ((addr >= r.data_ptr()) & (addr < r.data_ptr() + r.numel() * r.element_size())).all()
            for r in real
        ):
            return False
        if not any(((addr >= x.data_ptr()) & (addr < x.data_ptr() + size)).all()
                   for x, size in fake.values()):
            bad.append(f"{addr.min()}..{addr.max()}")
        return True

    builder = itp.InterpreterBuilder
    load, store = builder.create_masked_load, builder.create_masked_store
    pid = builder.create_get_program_id

    def masked_load(self, ptrs, mask, other, *args):  # type: ignore[no-untyped-def]
        if virtual(ptrs.data[mask.data]):
            ty = ptrs.get_element_ty()
            return itp.TensorHandle(np.zeros(ptrs.data.shape, itp._get_np_dtype(ty)), ty)
        return load(self, ptrs, mask, other, *args)

    def masked_store(self, ptrs, value, mask, *args):  # type: ignore[no-untyped-def]
        return None if virtual(ptrs.data[mask.data]) else store(self, ptrs, value, mask, *args)

    def program_id(self, axis):  # type: ignore[no-untyped-def]
        h = pid(self, axis)
        return itp.TensorHandle(h.data + np.int32(pid_shift[axis]), h.dtype)

    monkeypatch.setattr(builder, "create_masked_load", masked_load)
    monkeypatch.setattr(builder, "create_masked_store", masked_store)
    monkeypatch.setattr(builder, "create_get_program_id", program_id)
    return {n: x for n, (x, _) in fake.items()}, bad


# Hv = 2^14 value heads of 16 stand in for long inputs at small head dims: row * Hv * D = 2^31 at
# row 8192 (at 32 heads of 128: row 524,288), sequence * Hv * Dk * Dv = 2^31 at sequence 512
# (at 32 heads of 128: 4,096 sequences).
_BIG = dict(HK=1, HV=2**14, DK=16, DV=16, BT=triton_chunk.BT, BK=16, BV=16, L2=True, EPS=1e-6,
            PREC="ieee")


@pytest.mark.skipif(not INTERPRETED, reason="intercepts the interpreter's memory accesses")
def test_state_backward_offsets_pass_2_31(monkeypatch: pytest.MonkeyPatch) -> None:
    """Addresses stay inside the buffers when the 513th sequence's d(final state) / d(initial
    state) offsets pass 2^31 (int32 before; buffers of 8 GiB, checked, not allocated)."""
    c = _BIG
    hv, dk, dv = c["HV"], c["DK"], c["DV"]
    n = 2**31 // (hv * dk * dv) + 1  # empty sequences: only the state gradients are addressed
    cu, off = torch.zeros(n + 1, dtype=torch.int32), torch.zeros(n, dtype=torch.int32)
    state = n * hv * dk * dv
    b, bad = _run_on_virtual_buffers(
        monkeypatch,
        {"q": 1, "k": 1, "w": 1, "gc": 1, "do": 1, "dht": state, "dh": 1, "dh0": state},
        [cu, off], pid_shift=(0, (n - 1) * hv))
    triton_chunk._state_bwd_kernel[(1, 1)](b["q"], b["k"], b["w"], b["gc"], b["do"], b["dht"],
                                           b["dh"], b["dh0"], cu, off, 1.0, HAS_DHT=True, **c)
    assert not bad, f"backward: out-of-bounds addresses {bad[:3]}"


def test_rows_past_32_bit_offsets_are_refused() -> None:
    """The state forward addresses a sequence's rows with int32 offsets (64-bit ones spill in
    its sequential loop): an input whose rows x value heads x head dim reach 2^31 wrapped
    negative (on a GPU, reads 8 GiB before the buffer); it is refused before any launch."""
    hv, d = 2**14, 16
    t = triton_chunk.MAX_OFFSET // (hv * d)  # expanded views: nothing of this size is allocated
    q = torch.zeros(1, 1, 1, d).expand(1, t, 1, d)
    v = torch.zeros(1, 1, 1, d).expand(1, t, hv, d)
    g, beta = torch.zeros(1, 1, 1).expand(1, t, hv), torch.zeros(1, 1, 1).expand(1, t, hv)
    with pytest.raises(DecisionInputError, match="32-bit offsets") as err:
        triton_chunk.chunk_gated_delta_rule_triton(q, q, v, g, beta)
    assert err.value.field == "q"


@pytest.mark.parametrize("local", ["triton", "torch"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_packed_sequence_does_not_reach_gradients(
    local: str, bad: float, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A non-finite token of the second packed sequence leaves the first one's gradients as
    they are, on both chunk-local backwards: the first sequence's last chunk runs past its end
    into the second's rows (the autograd fallback gathers them and multiplied them by a 0 mask:
    0 * inf = NaN in every gradient of the first sequence; that fallback is the GPU's path at
    head dim 128)."""
    monkeypatch.setattr(triton_chunk, "LOCAL_BACKWARD", local)
    x = gdn_inputs(1, 20, 1, 2, 8, 4, n_states=2, seed=seed)
    cu = torch.tensor([0, 5, 20], device=DEVICE)
    grads = []
    for fill in (0.0, bad):
        y = {n: t.clone().to(DEVICE) for n, t in x.items()}
        for name in ("q", "k", "v", "g", "beta"):
            y[name][0, 8] = float("nan") if name == "g" and fill else fill  # +inf: not a gate
        leaves = {n: t.requires_grad_() for n, t in y.items()}
        # the interpreter's arithmetic on the second sequence's inf/NaN warns (the module-level
        # "error" filter takes precedence over a test's filterwarnings mark)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            o, s = chunk_gated_delta_rule(**leaves, cu_seqlens=cu, backend="triton")
            # squares: the second sequence's non-finite outputs hand the backward non-finite dO
            got = torch.autograd.grad(o.square().sum() + s.square().sum(), list(leaves.values()))
        grads.append([gr[0] if n == "initial_state" else gr[:, :5]
                      for n, gr in zip(leaves, got, strict=True)])
    for name, a, b in zip(NAMES, *grads, strict=True):
        assert torch.isfinite(b).all(), name
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6, msg=name)
