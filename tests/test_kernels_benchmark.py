"""benchmarks/gpu_kernels.py: fails fast without CUDA; a CPU dry run of its checks and timings.

The dry run swaps the GPU for the Triton interpreter, tiny sizes and a one-call "timer", so the
script's own logic (inputs, references, cost model, report) is exercised before a GPU run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import ModuleType

import pytest
import torch

from decision.kernels import _dispatch


@pytest.fixture
def mod(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("gpu_kernels")


def test_exits_with_status_2_without_cuda(mod: ModuleType, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(sys, "argv", ["gpu_kernels.py"])
    with pytest.raises(SystemExit) as err:
        mod.main()
    assert err.value.code == 2
    assert "no CUDA device" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not _dispatch.triton_interpreting(), reason="needs the Triton interpreter")
def test_dry_run_on_cpu(mod: ModuleType, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(mod, "DEVICE", "cpu")
    monkeypatch.setattr(mod, "D_CHECK", 16)
    monkeypatch.setattr(mod, "LENGTHS_CHECK", [1, 7, 65])
    monkeypatch.setattr(mod, "bench", lambda fn, grads=(): (fn(), 1.0)[1])
    assert mod.check_gdn(seed=1) == []
    assert mod.check_block(seed=1) == []
    mod.time_gdn([65], 1e12, 1e14, hk=1, hv=2, d=16)
    mod.time_block([7], 1e12, 1e14, hk=1, hv=2, d=16, b=2)
    out = capsys.readouterr().out
    assert out.count("achieved") == 6 and "FAIL" not in out
