"""Kernels of the GDN backbone behind one entry point per op, with backend dispatch.

``backend="auto"`` runs the Triton kernels for CUDA tensors and the PyTorch references for CPU
tensors; ``"triton"`` forces Triton (on CPU only under ``TRITON_INTERPRET=1``); ``"torch"``
forces the reference. Triton is imported lazily: importing this package needs no GPU and is cheap.
Contracts: docs/interfaces.md; maths and tiling: docs/kernels.md.
"""

from __future__ import annotations

import torch

from decision.kernels._checks import check_block_attention, check_gated_delta_rule
from decision.kernels._dispatch import resolve_backend
from decision.kernels.block_attention.naive import block_attention_torch
from decision.kernels.gated_delta_rule.naive import (
    chunk_gated_delta_rule_torch,
    recurrent_gated_delta_rule_torch,
)

__all__ = [
    "block_attention",
    "block_attention_torch",
    "chunk_gated_delta_rule",
    "chunk_gated_delta_rule_torch",
    "recurrent_gated_delta_rule_torch",
]


def chunk_gated_delta_rule(
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
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Chunkwise gated delta rule (history path). Shapes and maths: docs/interfaces.md."""
    check_gated_delta_rule(q, k, v, g, beta, initial_state, cu_seqlens)
    kwargs = dict(
        scale=scale,
        initial_state=initial_state,
        output_final_state=output_final_state,
        cu_seqlens=cu_seqlens,
        use_qk_l2norm=use_qk_l2norm,
    )
    # an empty input (T = 0) has nothing to launch: the reference returns the state unchanged
    if resolve_backend(backend, q.device, q.dtype) == "torch" or q.shape[1] == 0:
        return chunk_gated_delta_rule_torch(q, k, v, g, beta, **kwargs)
    from decision.kernels.gated_delta_rule.triton_chunk import chunk_gated_delta_rule_triton

    return chunk_gated_delta_rule_triton(q, k, v, g, beta, **kwargs)


def block_attention(
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
    backend: str = "auto",
) -> torch.Tensor:
    """Block-path attention with the history unit in the same softmax. See docs/interfaces.md."""
    check_block_attention(q, k, v, state, history_logit, scale, calibration, block_mask)
    kwargs = dict(
        scale=scale,
        calibration=calibration,
        block_mask=block_mask,
        readout_scale=readout_scale,
        use_qk_l2norm=use_qk_l2norm,
    )
    if resolve_backend(backend, q.device, q.dtype) == "torch" or q.shape[1] == 0:
        return block_attention_torch(q, k, v, state, history_logit, **kwargs)
    from decision.kernels.block_attention.triton_fused import block_attention_triton

    return block_attention_triton(q, k, v, state, history_logit, **kwargs)
