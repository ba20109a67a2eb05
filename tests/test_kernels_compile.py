"""Every Triton kernel compiles for sm_90 (no GPU needed) within H100/H200 shared memory.

The interpreter tests never run the compiler; this runs the real pipeline down to a cubin with the
bundled ptxas at the benchmark's sizes (bf16 and fp32, head dim 128), in a subprocess because this
test session has the interpreter switched on. Slow (minutes of CPU): `make test` skips it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

SM90_MAX_SHARED = 227 * 1024  # opt-in shared memory per block on H100 / H200


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_all_kernels_compile_for_sm90(dtype: str) -> None:
    # fp32: the GPU benchmark's correctness check; at 3 pipeline stages the block backward needed
    # 240 KiB there and failed to launch on the H200
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION="1")
    run = subprocess.run([sys.executable, "-m", "decision.kernels.compile_check", "--arch", "90",
                          "--dtype", dtype],
                         capture_output=True, text=True, env=env, check=False, timeout=1800)
    assert run.returncode == 0, run.stderr[-4000:]
    rows = re.findall(r"(\w+)\s+warps (\d+)\s+shared\s+(\d+) B\s+regs (\S+)\s+stack \(spills\) "
                      r"(\S+) B", run.stdout)
    assert len(rows) == 8, run.stdout
    for name, _, shared, _, _ in rows:
        if name == "_chunk_bwd_kernel":
            # needs 264 KiB at head dim 128: on such a GPU the wrapper catches OutOfResources
            # and takes the batched-autograd path (tested in test_kernels_triton_gdn.py); it
            # fits at head dim 64 (168 KiB)
            continue
        assert int(shared) <= SM90_MAX_SHARED, (name, shared)
    # Register spills (stack > 0) are printed, not failed: they cost speed, not correctness, and
    # are a known open item (docs/kernels.md).
    print(run.stdout)
