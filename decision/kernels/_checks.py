"""Input validation shared by the kernel entry points: both backends reject the same input."""

from __future__ import annotations

import torch

from decision.errors import DecisionInputError

BACKENDS = ("auto", "triton", "torch")


def check_backend(backend: str) -> None:
    """Reject an unknown backend name."""
    if backend not in BACKENDS:
        raise DecisionInputError(f"backend must be one of {BACKENDS}, got {backend!r}", "backend")


def _float(t: torch.Tensor, name: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise DecisionInputError(f"{name} must be a torch.Tensor, got {type(t).__name__}", name)
    if not t.is_floating_point():
        raise DecisionInputError(f"{name} must be a floating-point tensor, got {t.dtype}", name)


def _ndim(t: torch.Tensor, n: int, name: str, layout: str) -> None:
    if t.dim() != n:
        raise DecisionInputError(f"{name} must be {layout}, got shape {tuple(t.shape)}", name)


def _same_device(like: torch.Tensor, *named: tuple[torch.Tensor | None, str]) -> None:
    """Each tensor on ``like``'s device: the reference would fail in PyTorch with a bare
    RuntimeError, and the Triton kernels would be handed a pointer into another device."""
    for t, name in named:
        if t is not None and t.device != like.device:
            raise DecisionInputError(
                f"{name} is on {t.device}, the other inputs on {like.device}", name
            )


def _key_heads(q: torch.Tensor) -> None:
    """At least one key head and a key dim of at least 1 (the default scale is Dk ** -0.5)."""
    if q.shape[2] == 0 or q.shape[3] == 0:
        raise DecisionInputError(
            f"q needs at least one key head and a head dim >= 1, got shape {tuple(q.shape)}", "q"
        )


def check_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None,
    cu_seqlens: torch.Tensor | None,
) -> int:
    """Validate the inputs of ``chunk_gated_delta_rule``; return N, the number of sequences."""
    for t, name in ((q, "q"), (k, "k"), (v, "v"), (g, "g"), (beta, "beta")):
        _float(t, name)
    _ndim(q, 4, "q", "[B, T, Hk, Dk]")
    _ndim(k, 4, "k", "[B, T, Hk, Dk]")
    _ndim(v, 4, "v", "[B, T, Hv, Dv]")
    _ndim(g, 3, "g", "[B, T, Hv]")
    _ndim(beta, 3, "beta", "[B, T, Hv]")
    if q.shape != k.shape:
        raise DecisionInputError(f"q {tuple(q.shape)} and k {tuple(k.shape)} differ", "k")
    _key_heads(q)
    b, t, hk, _ = q.shape
    hv = v.shape[2]
    if v.shape[:2] != (b, t):
        raise DecisionInputError(f"v {tuple(v.shape)} does not match q {tuple(q.shape)}", "v")
    if hv % hk != 0:
        raise DecisionInputError(f"value heads {hv} not a multiple of key heads {hk}", "v")
    for t_, name in ((g, "g"), (beta, "beta")):
        if t_.shape != (b, t, hv):
            raise DecisionInputError(f"{name} must be {(b, t, hv)}, got {tuple(t_.shape)}", name)
    devices = {x.device for x in (q, k, v, g, beta)}
    if len(devices) != 1:
        raise DecisionInputError(f"inputs on several devices: {sorted(map(str, devices))}", "q")
    n = b
    if cu_seqlens is not None:
        if cu_seqlens.dim() != 1 or cu_seqlens.dtype not in (torch.int32, torch.int64):
            raise DecisionInputError("cu_seqlens must be a 1-D int32/int64 tensor", "cu_seqlens")
        if b != 1:
            raise DecisionInputError(f"cu_seqlens needs B == 1 (packed), got B = {b}", "cu_seqlens")
        cu = cu_seqlens.tolist()
        rising = all(a <= c for a, c in zip(cu, cu[1:], strict=False))
        if len(cu) < 2 or cu[0] != 0 or cu[-1] != t or not rising:
            raise DecisionInputError(
                f"cu_seqlens must rise from 0 to T = {t}, got {cu}", "cu_seqlens"
            )
        n = len(cu) - 1
    if initial_state is not None:
        _float(initial_state, "initial_state")
        _same_device(q, (initial_state, "initial_state"))
        want = (n, hv, q.shape[3], v.shape[3])
        if tuple(initial_state.shape) != want:
            raise DecisionInputError(
                f"initial_state must be {want}, got {tuple(initial_state.shape)}", "initial_state"
            )
    return n


def check_block_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: torch.Tensor,
    history_logit: torch.Tensor,
    scale: torch.Tensor,
    calibration: torch.Tensor,
    block_mask: torch.Tensor | None,
) -> None:
    """Validate the inputs of ``block_attention``."""
    for t, name in (
        (q, "q"), (k, "k"), (v, "v"), (state, "state"), (history_logit, "history_logit"),
        (scale, "scale"), (calibration, "calibration"),
    ):
        _float(t, name)
    _ndim(q, 4, "q", "[B, L, Hk, Dk]")
    _ndim(k, 4, "k", "[B, L, Hk, Dk]")
    _ndim(v, 4, "v", "[B, L, Hv, Dv]")
    if q.shape != k.shape:
        raise DecisionInputError(f"q {tuple(q.shape)} and k {tuple(k.shape)} differ", "k")
    _key_heads(q)
    b, l_, hk, dk = q.shape
    hv, dv = v.shape[2], v.shape[3]
    if v.shape[:2] != (b, l_):
        raise DecisionInputError(f"v {tuple(v.shape)} does not match q {tuple(q.shape)}", "v")
    if hv % hk != 0:
        raise DecisionInputError(f"value heads {hv} not a multiple of key heads {hk}", "v")
    if tuple(state.shape) != (b, hv, dk, dv):
        raise DecisionInputError(
            f"state must be {(b, hv, dk, dv)}, got {tuple(state.shape)}", "state"
        )
    if tuple(history_logit.shape) != (b, l_, hv):
        raise DecisionInputError(
            f"history_logit must be {(b, l_, hv)}, got {tuple(history_logit.shape)}",
            "history_logit",
        )
    for t, name in ((scale, "scale"), (calibration, "calibration")):
        if tuple(t.shape) != (hv,):
            raise DecisionInputError(f"{name} must be [{hv}], got {tuple(t.shape)}", name)
    _same_device(q, (k, "k"), (v, "v"), (state, "state"), (history_logit, "history_logit"),
                 (scale, "scale"), (calibration, "calibration"), (block_mask, "block_mask"))
    if block_mask is not None:
        if block_mask.dtype != torch.bool or tuple(block_mask.shape) != (b, l_):
            raise DecisionInputError(
                f"block_mask must be bool {(b, l_)}, got {block_mask.dtype} "
                f"{tuple(block_mask.shape)}",
                "block_mask",
            )
