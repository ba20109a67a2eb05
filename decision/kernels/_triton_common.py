"""Triton device functions shared by the kernels (imported only where Triton is)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def l2_normalise_rows(x, L2: tl.constexpr, EPS: tl.constexpr):
    """(x normalised, 1 / norm per row): x * rsqrt(sum x^2 + eps) as Qwen3.5 / fla ``l2norm``.

    The factor is kept for the backward of the norm; without normalisation it is 1.
    """
    if L2:
        r = 1.0 / tl.sqrt(tl.sum(x * x, 1) + EPS)
    else:
        r = tl.full([x.shape[0]], 1.0, tl.float32)
    return x * r[:, None], r
