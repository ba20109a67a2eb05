"""The whole tiny model gives the same logits with the Triton kernels (interpreted) and the
PyTorch references.

The backend is chosen model-wide with ``DecisionModel.set_kernel_backend``.
"""

from __future__ import annotations

import os
import random

import pytest
import torch

from decision.errors import DecisionInputError
from decision.kernels import _dispatch
from decision.model import DecisionModel
from decision.model.testing import tiny_model

# fp32 throughout; kernels agree to ~1e-6 relative per call, and four layers with MoE routing
# (discrete top-k, stable here: same inputs up to ~1e-6) keep the logits within ~1e-5.
TOL = 1e-4


def _logits(model: DecisionModel, backend: str, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    model.set_kernel_backend(backend)
    with torch.no_grad():
        return model(**batch)

# an overflow or 0 * inf inside an interpreted kernel shows up as a numpy RuntimeWarning: fail on it
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


@pytest.mark.skipif(not _dispatch.triton_interpreting() and not torch.cuda.is_available(),
                    reason="needs CUDA or the Triton interpreter")
def test_model_logits_triton_equal_torch() -> None:
    seed = int(os.environ.get("KERNEL_TEST_SEED", random.randrange(2**31)))
    print(f"seed={seed} (replay: KERNEL_TEST_SEED={seed})")
    model = tiny_model(seed=seed % 1000, random_block=True)
    gen = torch.Generator().manual_seed(seed)
    hist = torch.randint(2, 90, (2, 70), generator=gen)
    block = torch.randint(2, 90, (2, 9), generator=gen)
    hmask = torch.ones(2, 70, dtype=torch.bool)
    hmask[1, 40:] = False
    bmask = torch.ones(2, 9, dtype=torch.bool)
    bmask[1, 5:] = False
    batch = dict(history_ids=hist, block_ids=block, history_mask=hmask, block_mask=bmask)
    ref = _logits(model, "torch", batch)
    if not _dispatch.triton_interpreting():  # compiled Triton: the model and batch on the GPU
        model = model.to("cuda")
        batch = {n: t.to("cuda") for n, t in batch.items()}
    got = _logits(model, "triton", batch).cpu()
    assert torch.isfinite(got).all()
    err = ((got - ref).abs().max() / ref.abs().max()).item()
    assert err < TOL, err


def test_unknown_backend_is_refused() -> None:
    model = tiny_model(seed=0)
    with pytest.raises(DecisionInputError, match="kernel backend"):
        model.set_kernel_backend("cuda")
