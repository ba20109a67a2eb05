"""The whole tiny model gives the same logits with the Triton kernels (interpreted) and the
PyTorch references.

The model calls the kernels through ``decision.model.gdn``'s imported names and exposes no backend
switch (yet), so the test rebinds those names to wrappers that force one backend.
"""

from __future__ import annotations

import functools
import os
import random

import pytest
import torch

import decision.model.gdn as gdn
from decision.kernels import _dispatch, block_attention, chunk_gated_delta_rule
from decision.model.testing import tiny_model

# fp32 throughout; kernels agree to ~1e-6 relative per call, and four layers with MoE routing
# (discrete top-k, stable here: same inputs up to ~1e-6) keep the logits within ~1e-5.
TOL = 1e-4


def _logits(model: torch.nn.Module, backend: str, batch: dict[str, torch.Tensor],
            monkeypatch: pytest.MonkeyPatch) -> torch.Tensor:
    monkeypatch.setattr(gdn, "chunk_gated_delta_rule",
                        functools.partial(chunk_gated_delta_rule, backend=backend))
    monkeypatch.setattr(gdn, "block_attention", functools.partial(block_attention, backend=backend))
    with torch.no_grad():
        return model(**batch)

# an overflow or 0 * inf inside an interpreted kernel shows up as a numpy RuntimeWarning: fail on it
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


@pytest.mark.skipif(not _dispatch.triton_interpreting() and not torch.cuda.is_available(),
                    reason="needs CUDA or the Triton interpreter")
def test_model_logits_triton_equal_torch(monkeypatch: pytest.MonkeyPatch) -> None:
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
    ref = _logits(model, "torch", batch, monkeypatch)
    got = _logits(model, "triton", batch, monkeypatch)
    assert torch.isfinite(got).all()
    err = ((got - ref).abs().max() / ref.abs().max()).item()
    assert err < TOL, err
