"""The PyTorch references: chunk form == float64 recurrence; block attention == its formula.

Inputs are fresh random each run; the seed is printed so a failure can be replayed (pytest shows the
captured stdout of a failing test).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
import torch

from decision.errors import DecisionInputError
from decision.kernels import (
    _dispatch,
    block_attention,
    chunk_gated_delta_rule,
    recurrent_gated_delta_rule_torch,
)
from decision.kernels.testing import block_inputs, gdn_inputs

F64 = torch.float64
# Both sides compute in float64 and differ only in summation order: ~1e-13 relative is expected.
TOL64 = dict(rtol=1e-9, atol=1e-9)


@pytest.fixture
def seed() -> int:
    s = int(os.environ.get("KERNEL_TEST_SEED", random.randrange(2**31)))
    print(f"seed={s} (replay: KERNEL_TEST_SEED={s})")
    return s


@pytest.mark.parametrize("t", [1, 7, 8, 9, 63, 65, 200])  # 8 | 9: step by step | chunks
@pytest.mark.parametrize("hk,hv", [(1, 1), (2, 4)])
@pytest.mark.parametrize("gate", ["mixed", "near0", "near1"])
def test_chunk_equals_recurrence(t: int, hk: int, hv: int, gate: str, seed: int) -> None:
    x = gdn_inputs(2, t, hk, hv, 16, 8, gate=gate, n_states=2, dtype=F64, seed=seed)
    o, s = chunk_gated_delta_rule(**x, backend="torch")
    o_ref, s_ref = recurrent_gated_delta_rule_torch(**x)
    assert o.dtype == F64 and o.shape == (2, t, hv, 8)
    torch.testing.assert_close(o, o_ref, **TOL64)
    torch.testing.assert_close(s, s_ref, **TOL64)


@pytest.mark.parametrize("lengths", [[1, 7, 63, 65, 200], [64, 1], [130], [3, 0, 5]])
def test_chunk_varlen_equals_recurrence(lengths: list[int], seed: int) -> None:
    t = sum(lengths)
    x = gdn_inputs(1, t, 2, 4, 16, 8, n_states=len(lengths), dtype=F64, seed=seed)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    o, s = chunk_gated_delta_rule(**x, cu_seqlens=cu, backend="torch")
    o_ref, s_ref = recurrent_gated_delta_rule_torch(**x, cu_seqlens=cu)
    torch.testing.assert_close(o, o_ref, **TOL64)
    torch.testing.assert_close(s, s_ref, **TOL64)
    # Each packed sequence equals the same sequence run alone from its own initial state.
    for i, (a, b) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True)):
        xi = {n: v[:, a:b] for n, v in x.items() if n != "initial_state"}
        oi, si = chunk_gated_delta_rule(
            **xi, initial_state=x["initial_state"][i : i + 1], backend="torch"
        )
        torch.testing.assert_close(o[:, a:b], oi, **TOL64)
        torch.testing.assert_close(s[i : i + 1], si, **TOL64)


def test_chunk_fp32_close_to_fp64(seed: int) -> None:
    x64 = gdn_inputs(2, 150, 2, 4, 32, 16, n_states=2, dtype=F64, seed=seed)
    x32 = {n: v.float() for n, v in x64.items()}
    o, s = chunk_gated_delta_rule(**x32, backend="torch")
    o_ref, s_ref = recurrent_gated_delta_rule_torch(**x64)
    assert o.dtype == torch.float32 and s.dtype == torch.float32
    # fp32 accumulation over a 64-token chunk and a triangular solve: ~1e-5 relative.
    torch.testing.assert_close(o, o_ref.float(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(s, s_ref.float(), rtol=1e-4, atol=1e-4)


def test_chunk_gradients_equal_recurrence(seed: int) -> None:
    x = gdn_inputs(1, 70, 1, 2, 8, 4, n_states=1, dtype=F64, seed=seed)
    w_o = torch.randn(1, 70, 2, 4, dtype=F64)
    grads = []
    for fn in (
        lambda **a: chunk_gated_delta_rule(**a, backend="torch"),
        recurrent_gated_delta_rule_torch,
    ):
        leaves = {n: v.clone().requires_grad_(True) for n, v in x.items()}
        o, s = fn(**leaves)
        loss = (o * w_o).sum() + (s * s).sum()
        grads.append(torch.autograd.grad(loss, list(leaves.values())))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, **TOL64)


def test_output_final_state_false_returns_none(seed: int) -> None:
    x = gdn_inputs(1, 5, 1, 1, 4, 4, seed=seed)
    o, s = chunk_gated_delta_rule(**x, output_final_state=False, backend="torch")
    assert s is None and o.shape == (1, 5, 1, 4)


def test_output_dtype_follows_v(seed: int) -> None:
    x = gdn_inputs(1, 9, 1, 2, 8, 8, dtype=torch.bfloat16, seed=seed)
    o, s = chunk_gated_delta_rule(**x, backend="torch")
    assert o.dtype == torch.bfloat16 and s is not None and s.dtype == torch.float32


def _block_formula(x: dict[str, torch.Tensor], readout_scale: float) -> torch.Tensor:
    """docs/interfaces.md's formula, one query at a time (float64)."""
    q, k, v, st = x["q"], x["k"], x["v"], x["state"]
    b, l_, hk, dk = q.shape
    hv, dv = v.shape[2], v.shape[3]
    out = torch.zeros(b, l_, hv, dv, dtype=F64)
    for bi in range(b):
        m = x["block_mask"][bi]
        l_eff = max(int(m.sum()), 1)
        for h in range(hv):
            kh = h // (hv // hk)
            kn = k[bi, :, kh] / k[bi, :, kh].norm(dim=-1, keepdim=True)
            for t in range(l_):
                qn = q[bi, t, kh] / q[bi, t, kh].norm()
                e = torch.exp(x["scale"][h] * (kn @ qn)) * m
                eu = torch.exp(x["history_logit"][bi, t, h] + x["calibration"][h] * torch.log(
                    torch.tensor(float(l_eff), dtype=F64)))
                r = st[bi, h].T @ (readout_scale * qn)
                out[bi, t, h] = (e @ v[bi, :, h] + eu * r) / (e.sum() + eu)
    return out


@pytest.mark.parametrize("l_,hk,hv", [(1, 1, 1), (7, 2, 4), (33, 1, 2)])
def test_block_attention_matches_formula(l_: int, hk: int, hv: int, seed: int) -> None:
    x = block_inputs(3, l_, hk, hv, 8, 4, dtype=F64, seed=seed)
    o = block_attention(**x, readout_scale=0.7, backend="torch")
    # l2norm's eps (1e-6 inside the rsqrt) shifts q-hat by ~1e-7 relative to an exact norm.
    torch.testing.assert_close(o, _block_formula(x, 0.7), rtol=1e-5, atol=1e-5)


def test_block_attention_empty_block_is_history_readout(seed: int) -> None:
    x = block_inputs(2, 5, 1, 1, 8, 4, dtype=F64, seed=seed)
    x["block_mask"][:] = False
    o = block_attention(**x, backend="torch")
    qn = x["q"] / x["q"].norm(dim=-1, keepdim=True)
    r = torch.einsum("blhk,bhkv->blhv", qn * 8**-0.5, x["state"])
    torch.testing.assert_close(o, r, rtol=1e-5, atol=1e-5)


def test_block_attention_padded_keys_are_ignored(seed: int) -> None:
    x = block_inputs(1, 6, 1, 2, 8, 4, dtype=F64, seed=seed, ragged=False)
    x["block_mask"][0, 4:] = False
    o1 = block_attention(**x, backend="torch")
    x["k"][0, 4:] = 100.0
    x["v"][0, 4:] = -100.0
    o2 = block_attention(**x, backend="torch")
    torch.testing.assert_close(o1[:, :4], o2[:, :4], rtol=0, atol=0)



@pytest.mark.parametrize("backend", ["torch", "triton", "triton-autograd-local"])
def test_gate_minus_infinity_is_a_full_reset(backend: str, seed: int,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """g = -inf (alpha = 0 exactly, allowed by g <= 0) forgets the state as the recurrence does.

    Without a floor the chunk form's G_i - G_j is -inf - -inf = NaN after such a step (T > 8).
    """
    if backend != "torch" and not _dispatch.triton_interpreting():
        pytest.skip("CPU run without the Triton interpreter")
    if backend == "triton-autograd-local":
        from decision.kernels.gated_delta_rule import triton_chunk

        monkeypatch.setattr(triton_chunk, "LOCAL_BACKWARD", "torch")
        backend = "triton"
    x = gdn_inputs(1, 20, 1, 2, 8, 4, n_states=1, seed=seed)
    x["g"][0, 5, 0] = float("-inf")
    x["g"][0, 12, 1] = -5000.0
    ref = {n: t.double().requires_grad_() for n, t in x.items()}
    o_ref, s_ref = recurrent_gated_delta_rule_torch(**ref)
    leaves = {n: t.clone().requires_grad_() for n, t in x.items()}
    o, s = chunk_gated_delta_rule(**leaves, backend=backend)
    torch.testing.assert_close(o.double(), o_ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(s.double(), s_ref, rtol=1e-4, atol=1e-4)
    grads = torch.autograd.grad((o * o).sum() + (s * s).sum(), list(leaves.values()))
    ref_grads = torch.autograd.grad((o_ref * o_ref).sum() + (s_ref * s_ref).sum(),
                                    list(ref.values()))
    for name, a, b in zip(leaves, grads, ref_grads, strict=True):
        torch.testing.assert_close(a.double(), b, rtol=1e-3, atol=1e-4, msg=name)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's inf - inf
@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_padding_does_not_leak(backend: str, bad: float, seed: int) -> None:
    """Padded block keys/values, and the next packed sequence, may hold inf or NaN: real rows,
    their gradients and the other sequences' states stay as with finite padding."""
    if backend == "triton" and not _dispatch.triton_interpreting():
        pytest.skip("CPU run without the Triton interpreter")
    x = block_inputs(2, 6, 1, 2, 8, 4, seed=seed)
    x["block_mask"][1] = torch.arange(6) < 3
    outs = []
    for fill in (0.0, bad):
        y = {n: (t.clone().requires_grad_() if t.is_floating_point() else t) for n, t in x.items()}
        with torch.no_grad():
            y["k"][1, 3:] = fill
            y["v"][1, 3:] = fill
        o = block_attention(**y, backend=backend)
        real = torch.cat([o[0], o[1, :3]])
        grads = torch.autograd.grad(real.square().sum(), [y[n] for n in ("q", "state", "scale")])
        outs.append((real, *grads))
    for a, b in zip(*outs, strict=True):
        assert torch.isfinite(b).all()
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    # a non-finite token of the second packed sequence: the first keeps its outputs and state
    # (the reference pads the first to the second's length with slots that read its tokens)
    x = gdn_inputs(1, 20, 1, 2, 8, 4, n_states=2, seed=seed)
    cu = torch.tensor([0, 5, 20])
    o1, s1 = chunk_gated_delta_rule(**x, cu_seqlens=cu, backend=backend)
    for name in ("q", "k", "v", "g", "beta"):
        y = {n: t.clone() for n, t in x.items()}
        y[name][0, 8] = bad
        o2, s2 = chunk_gated_delta_rule(**y, cu_seqlens=cu, backend=backend)
        assert torch.equal(o2[:, :5], o1[:, :5]), name
        assert torch.equal(s2[0], s1[0]), name


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_empty_inputs_pass_through(backend: str, seed: int) -> None:
    """T = 0 / L = 0 (the model's empty histories and blocks): empty outputs, state unchanged."""
    if backend == "triton" and not _dispatch.triton_interpreting():
        pytest.skip("CPU run without the Triton interpreter")
    x = gdn_inputs(2, 0, 1, 2, 8, 4, n_states=2, seed=seed)
    o, s = chunk_gated_delta_rule(**x, backend=backend)
    assert o.shape == (2, 0, 2, 4)
    torch.testing.assert_close(s, x["initial_state"], rtol=0, atol=0)
    y = block_inputs(2, 3, 1, 2, 8, 4, seed=seed)
    y = {n: (t[:, :0] if n in ("q", "k", "v", "history_logit", "block_mask") else t)
         for n, t in y.items()}
    assert block_attention(**y, backend=backend).shape == (2, 0, 2, 4)


def test_bad_inputs_raise(seed: int) -> None:
    x = gdn_inputs(1, 8, 2, 3, 4, 4, seed=seed)
    with pytest.raises(DecisionInputError) as err:
        chunk_gated_delta_rule(**x)
    assert err.value.field == "v"
    x = gdn_inputs(2, 8, 1, 1, 4, 4, seed=seed)
    with pytest.raises(DecisionInputError, match="B == 1"):
        chunk_gated_delta_rule(**x, cu_seqlens=torch.tensor([0, 8]))
    x = gdn_inputs(1, 8, 1, 1, 4, 4, n_states=1, seed=seed)
    with pytest.raises(DecisionInputError) as err:
        chunk_gated_delta_rule(**x, cu_seqlens=torch.tensor([0, 3, 8]))
    assert err.value.field == "initial_state"
    with pytest.raises(DecisionInputError) as err:
        chunk_gated_delta_rule(**x, cu_seqlens=torch.tensor([0, 9]))
    assert err.value.field == "cu_seqlens"
    with pytest.raises(DecisionInputError) as err:
        chunk_gated_delta_rule(**x, backend="cuda")
    assert err.value.field == "backend"
    y = block_inputs(1, 4, 1, 2, 4, 4, seed=seed)
    y["scale"] = y["scale"][:1]
    with pytest.raises(DecisionInputError) as err:
        block_attention(**y)
    assert err.value.field == "scale"
    # no key head / key dim 0: a clear error, not a ZeroDivisionError (hv % hk, Dk ** -0.5)
    for cut in ((slice(None), slice(None), slice(0, 0)), (..., slice(0, 0))):
        x = gdn_inputs(1, 8, 1, 1, 4, 4, seed=seed)
        x["q"], x["k"] = x["q"][cut], x["k"][cut]
        with pytest.raises(DecisionInputError) as err:
            chunk_gated_delta_rule(**x)
        assert err.value.field == "q"
        y = block_inputs(1, 4, 1, 1, 4, 4, seed=seed)
        y["q"], y["k"] = y["q"][cut], y["k"][cut]
        with pytest.raises(DecisionInputError) as err:
            block_attention(**y)
        assert err.value.field == "q"


def test_inputs_on_another_device_raise(seed: int) -> None:
    """Every tensor input on the inputs' device or a DecisionInputError naming it (a CPU state
    with CUDA q was a bare RuntimeError from PyTorch, or a Triton pointer error); "meta" stands in
    for the other device. ``cu_seqlens`` may be anywhere (it is read on the host)."""
    x = gdn_inputs(1, 5, 1, 2, 4, 4, n_states=1, seed=seed)
    x["initial_state"] = x["initial_state"].to("meta")
    with pytest.raises(DecisionInputError) as err:
        chunk_gated_delta_rule(**x)
    assert err.value.field == "initial_state"
    for name in ("state", "history_logit", "scale", "calibration", "block_mask"):
        y = block_inputs(1, 4, 1, 2, 4, 4, seed=seed)
        y[name] = y[name].to("meta")
        with pytest.raises(DecisionInputError) as err:
            block_attention(**y)
        assert err.value.field == name


def test_importing_kernels_does_not_import_triton() -> None:
    code = "import sys, decision.kernels; sys.exit('triton' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_triton_on_cpu_without_interpreter_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_dispatch, "triton_interpreting", lambda: False)
    with pytest.raises(DecisionInputError, match="TRITON_INTERPRET"):
        _dispatch.resolve_backend("triton", torch.device("cpu"))
    assert _dispatch.resolve_backend("auto", torch.device("cpu")) == "torch"
    assert _dispatch.resolve_backend("auto", torch.device("cuda")) == "triton"
    assert _dispatch.resolve_backend("auto", torch.device("cuda"), torch.float64) == "torch"
