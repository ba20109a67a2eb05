"""Compile every Triton kernel for a GPU target without a GPU, and report resources.

The interpreter tests run the kernels' semantics on the CPU but never the compiler; this runs the
real pipeline (TTIR -> TTGIR -> LLVM -> PTX -> cubin with the bundled ptxas) for sm_90 at the
benchmark's sizes, so a kernel that the compiler rejects (a dot below 16x16, a type error) or that
spills registers shows up before a GPU run:

    TRITON_INTERPRET=0 .venv/bin/python -m decision.kernels.compile_check \
        [--arch 90] [--head-dim 128]

Prints per kernel: shared memory, registers per thread and spilled bytes (from ``cuobjdump``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decision.errors import DecisionInputError


@dataclass
class Compiled:
    """Resources of one compiled kernel."""

    name: str
    shared: int
    regs: int | None
    spill_bytes: int | None
    seconds: float


def _resources(cubin: bytes) -> tuple[int | None, int | None]:
    """(registers, stack bytes per thread) from ``cuobjdump -res-usage``; stack > 0 = spills."""
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.exists():
        return None, None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([str(tool), "-res-usage", f.name], capture_output=True, text=True,
                             check=False).stdout
    regs = re.search(r"REG:(\d+)", out)
    spill = re.search(r"STACK:(\d+)", out)
    return (int(regs.group(1)) if regs else None, int(spill.group(1)) if spill else None)


def compile_kernel(fn: Any, types: dict[str, str], consts: dict[str, Any], arch: int,
                   num_warps: int = 4, num_stages: int = 3) -> Compiled:
    """Compile ``fn`` for ``sm_<arch>``: ``types`` for runtime args, ``consts`` for constexprs."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = {n: types.get(n, "constexpr") for n in fn.arg_names}
    missing = [n for n, t in sig.items() if t == "constexpr" and n not in consts]
    if missing:
        raise DecisionInputError(f"{fn.__name__}: no value for {missing}", "consts")
    t0 = time.monotonic()
    src = ASTSource(fn, sig, constexprs={n: consts[n] for n, t in sig.items() if t == "constexpr"})
    k = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                       options={"num_warps": num_warps, "num_stages": num_stages})
    regs, spill = _resources(k.asm["cubin"])
    return Compiled(fn.__name__, int(k.metadata.shared), regs, spill, time.monotonic() - t0)


def all_kernels(dtype: str = "bf16", d: int = 128) -> list[tuple[Any, dict[str, str], dict]]:
    """(kernel, runtime arg types, constexprs) of every kernel at head dim ``d``."""
    from decision.kernels.block_attention import triton_fused as bf
    from decision.kernels.gated_delta_rule import triton_chunk as tc

    x, f32, i32 = f"*{dtype}", "*fp32", "*i32"
    prec = "ieee" if dtype == "fp32" else "tf32"
    bk = max(16, 1 << (d - 1).bit_length())
    gdn = dict(HK=16, HV=32, DK=d, DV=d, BT=tc.BT, BK=bk, BV=min(tc.MAX_BV, bk), L2=True,
               EPS=1e-6, PREC=prec)
    blk = dict(HK=16, HV=32, DK=d, DV=d, BQ=64, BKV=64, BK=bk, BV=bk, L2=True, EPS=1e-6,
               PREC=prec)
    ptr = {n: x for n in ("q_ptr", "k_ptr", "v_ptr", "g_ptr", "beta_ptr", "do_ptr", "o_ptr",
                          "hl_ptr")}
    ptr.update({n: i32 for n in ("cu_ptr", "idx_ptr", "off_ptr")})
    ptr["m_ptr"] = "*i8"
    for n in ("w_ptr", "u_ptr", "gc_ptr", "h0_ptr", "h_ptr", "vn_ptr", "ht_ptr", "dht_ptr",
              "dh_ptr", "dh0_ptr", "s_ptr", "scale_ptr", "cal_ptr", "lle_ptr", "lse_ptr",
              "of_ptr", "delta_ptr", "dq_ptr", "du_ptr", "ds_ptr", "dsc_ptr", "dk_ptr", "dv_ptr",
              "dg_ptr", "db_ptr"):
        ptr[n] = f32
    ints = {"L": "i32", "NQ": "i32"}
    floats = {"scale": "fp32", "rs": "fp32"}
    types = {**ptr, **ints, **floats}
    return [
        (tc._wy_fwd_kernel, types, dict(gdn, SUB=16)),
        (tc._state_fwd_kernel, types, dict(gdn, HAS_H0=True)),
        (tc._output_fwd_kernel, types, gdn),
        (tc._state_bwd_kernel, types, dict(gdn, HAS_DHT=True)),
        (tc._chunk_bwd_kernel, types, dict(gdn, SUB=16)),
        (bf._fwd_kernel, types, dict(blk, STORE_F32=True)),
        (bf._bwd_q_kernel, types, blk),
        (bf._bwd_kv_kernel, types, blk),
    ]


def launch_options_of(fn: Any, dtype: str = "bf16") -> tuple[int, int]:
    """(warps, pipeline stages) a kernel is launched with: its module's NUM_WARPS / NUM_STAGES
    tables (NUM_STAGES_FP32 first for fp32 inputs), else Triton's defaults (4, 3)."""
    mod = sys.modules[fn.__module__]
    stages = getattr(mod, "NUM_STAGES", {}).get(fn.__name__, 3)
    if dtype == "fp32":
        stages = getattr(mod, "NUM_STAGES_FP32", {}).get(fn.__name__, stages)
    return int(getattr(mod, "NUM_WARPS", {}).get(fn.__name__, 4)), int(stages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 80, 90")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp32"))
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--num-warps", type=int, default=None, help="override the kernels' own")
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        sys.exit("compile_check: run with TRITON_INTERPRET=0 (the interpreter does not compile)")
    print(f"sm_{args.arch}, {args.dtype}, head dim {args.head_dim}")
    for fn, types, consts in all_kernels(args.dtype, args.head_dim):
        warps, stages = launch_options_of(fn, args.dtype)
        warps = args.num_warps or warps
        c = compile_kernel(fn, types, consts, args.arch, warps, stages)
        print(f"  {c.name:20s} warps {warps}  shared {c.shared:6d} B  regs {c.regs}  "
              f"stack (spills) {c.spill_bytes} B"
              f"  ({c.seconds:.0f} s)")


if __name__ == "__main__":
    main()
