"""Backend choice for the kernel entry points: Triton on CUDA, the PyTorch reference on CPU."""

from __future__ import annotations

import os
import sys

import torch

from decision.errors import DecisionInputError
from decision.kernels._checks import check_backend


def triton_interpreting() -> bool:
    """Whether Triton kernels would run under the CPU interpreter in this process.

    Triton reads TRITON_INTERPRET when a kernel is decorated; our kernel modules are imported
    lazily, so what matters is the variable's value when they are first imported (or now).
    """
    mod = sys.modules.get("decision.kernels.gated_delta_rule.triton_chunk")
    if mod is not None:
        return bool(mod.INTERPRETED)
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def resolve_backend(backend: str, device: torch.device,
                    dtype: torch.dtype = torch.float32) -> str:
    """Map ``auto``/``triton``/``torch`` and the tensors' device to ``"triton"`` or ``"torch"``.

    ``auto`` sends float64 to the reference even on CUDA: the kernels compute in fp32.
    """
    check_backend(backend)
    if backend == "torch":
        return "torch"
    if backend == "auto":
        return "triton" if device.type == "cuda" and dtype != torch.float64 else "torch"
    if device.type == "cuda":
        return "triton"
    if device.type == "cpu" and triton_interpreting():
        return "triton"
    raise DecisionInputError(
        f"backend='triton' needs CUDA tensors, or CPU tensors with TRITON_INTERPRET=1 set before "
        f"triton is imported (tensors are on {device}); use backend='torch' or 'auto'",
        "backend",
    )
