"""GPU benchmark of decision.kernels: check against the reference on the GPU, then time.

Run on a CUDA machine from the repository root:

    .venv/bin/python benchmarks/gpu_kernels.py            # about 3-5 minutes, always < 8
    .venv/bin/python benchmarks/gpu_kernels.py --quick    # smallest sizes only

1. measures the machine: HBM bandwidth (a large device copy) and the dense bf16 rate (a large
   matmul), each the median of ``triton.testing.do_bench``;
2. checks each kernel (forward and gradients) against the float64 PyTorch reference on the GPU and
   stops with exit status 1 if one is off;
3. times each kernel at realistic sizes (hidden 2048: 16 key heads and 32 value heads of 128;
   histories of 4k-32k tokens; blocks of 32-256 tokens) and prints its floor
   max(bytes / bandwidth, FLOPs / bf16 rate) and the achieved fraction floor / time, next to
   flash-linear-attention's ``chunk_gated_delta_rule`` (when ``fla`` is installed) and PyTorch SDPA
   (plain in-block attention without the history unit, as a yardstick).

Without CUDA it exits at once with status 2 and says so.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEVICE = "cuda"  # the dry run in tests/test_kernels_benchmark.py switches these three
D_CHECK = 128  # head dim of the correctness check
LENGTHS_CHECK = [1, 7, 63, 65, 200, 1000]
BUDGET_S = 7 * 60  # stop timing new sizes past this, so the run stays under 8 minutes
T0 = time.monotonic()


def _fail_without_cuda() -> None:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        sys.exit("gpu_kernels.py: unset TRITON_INTERPRET (it makes Triton run on the CPU)")
    if not torch.cuda.is_available():
        print("gpu_kernels.py: no CUDA device visible; this benchmark needs a GPU "
              "(the kernels' CPU tests are tests/test_kernels_*.py)", file=sys.stderr)
        sys.exit(2)


def bench(fn: Callable[[], object], grads: Sequence[torch.Tensor] = ()) -> float:
    """Median time of ``fn`` in milliseconds (triton.testing.do_bench). ``grads``: the leaves a
    backward fills, their ``.grad`` cleared before each repeat (else every repeat after the
    first also times an accumulation kernel per leaf)."""
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, grad_to_none=list(grads) or None,
                          return_mode="median"))


def machine_rates() -> tuple[float, float]:
    """(bytes/s of a device copy, bf16 FLOP/s of a dense matmul), measured now."""
    src = torch.empty(1 << 29, dtype=torch.float16, device="cuda")  # 1 GiB per buffer
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src))
    bw = 2 * src.numel() * src.element_size() / (ms * 1e-3)
    src = dst = torch.empty(0, device="cuda")
    torch.cuda.empty_cache()
    m = 8192
    x = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
    y = torch.randn(m, m, dtype=torch.bfloat16, device="cuda")
    ms = bench(lambda: x @ y)
    rate = 2 * m**3 / (ms * 1e-3)
    return bw, rate


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    """max |a - ref| / max(|ref|, 1e-3): the kernel tests' metric."""
    if not torch.isfinite(a).all():
        return float("inf")
    return ((a.double() - ref.double()).abs().max() / ref.abs().max().clamp_min(1e-3)).item()


def check_gdn(seed: int) -> list[str]:
    """Triton vs float64 reference on the GPU, fwd and grads; returns the failures."""
    from decision.kernels import chunk_gated_delta_rule
    from decision.kernels.testing import gdn_inputs

    bad = []
    lengths = LENGTHS_CHECK
    x = gdn_inputs(1, sum(lengths), 4, 8, D_CHECK, D_CHECK, n_states=len(lengths), device=DEVICE,
                   dtype=torch.float32, seed=seed)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device=DEVICE)
    w = None
    grads = []
    outs = []
    for backend, dtype in (("torch", torch.float64), ("triton", torch.float32)):
        leaves = {n: t.to(dtype).requires_grad_() for n, t in x.items()}
        o, s = chunk_gated_delta_rule(**leaves, cu_seqlens=cu, backend=backend)
        if w is None:
            w = torch.randn_like(o), torch.randn_like(s)
        loss = (o * w[0].to(o.dtype)).sum() + (s * w[1].to(s.dtype)).sum()
        grads.append(torch.autograd.grad(loss, list(leaves.values())))
        outs.append((o, s))
    for name, a, b in [("o", outs[1][0], outs[0][0]), ("state", outs[1][1], outs[0][1])] + [
        (f"d{n}", a, b) for n, a, b in zip(x, grads[1], grads[0], strict=True)
    ]:
        e = rel_err(a, b)
        ok = e < 1e-4  # fp32 kernel with TF32 off (ieee dots) vs float64: ~1e-6 expected
        print(f"  gated delta rule {name:14s} rel err {e:.2e} {'ok' if ok else 'FAIL'}")
        if not ok:
            bad.append(f"gdn {name}")
    return bad


def check_block(seed: int) -> list[str]:
    from decision.kernels import block_attention
    from decision.kernels.testing import block_inputs

    bad = []
    x = block_inputs(4, max(LENGTHS_CHECK), 4, 8, D_CHECK, D_CHECK, device=DEVICE, seed=seed)
    res = []
    for backend, dtype in (("torch", torch.float64), ("triton", torch.float32)):
        leaves = {n: (t.to(dtype).requires_grad_() if t.is_floating_point() else t)
                  for n, t in x.items()}
        o = block_attention(**leaves, backend=backend)
        w = torch.randn_like(o) if not res else res[0][2].to(o.dtype)
        names = [n for n, t in leaves.items() if t.is_floating_point()]
        gr = torch.autograd.grad((o * w).sum(), [leaves[n] for n in names])
        res.append((o, dict(zip(names, gr, strict=True)), w))
    e = rel_err(res[1][0], res[0][0])
    checks = [("o", e)] + [(f"d{n}", rel_err(res[1][1][n], res[0][1][n])) for n in res[0][1]]
    for name, e in checks:
        ok = e < 1e-4
        print(f"  block attention  {name:14s} rel err {e:.2e} {'ok' if ok else 'FAIL'}")
        if not ok:
            bad.append(f"block {name}")
    return bad


def gdn_cost(t: int, hk: int, hv: int, d: int, bwd: bool) -> tuple[float, float]:
    """(minimal bytes, FLOPs) of the chunk form at chunk 64 for one sequence of t tokens.

    Per chunk of C tokens and value head (Dk = Dv = d): K K^T, W = T K, U = T V, Q K^T, P V'
    (5 of 2 C^2 d) and W S, Q S, K^T V' (3 of 2 C d^2); backward about twice the forward.
    Bytes: q, k (Hk heads) and v, o (Hv heads) in bf16, g and beta in fp32/bf16, the fp32 final
    state; the backward reads them again and writes the gradients.
    """
    c = 64
    flops = hv * (t / c) * (5 * 2 * c * c * d + 3 * 2 * c * d * d)
    io = t * (2 * hk * d * 2 + 2 * hv * d * 2 + hv * 2 * 4) + hv * d * d * 4
    return (3 * io, 3 * flops) if bwd else (io, flops)


def block_cost(b: int, l_: int, hk: int, hv: int, d: int, bwd: bool) -> tuple[float, float]:
    """(minimal bytes, FLOPs): q k^T, p v and the readout S^T q per (row, value head)."""
    flops = b * hv * (2 * 2 * l_ * l_ * d + 2 * l_ * d * d)
    io = b * (l_ * (2 * hk * d * 2 + 2 * hv * d * 2 + hv * 2) + hv * d * d * 4)
    return (3 * io, 2.5 * flops) if bwd else (io, flops)


def sdpa_cost(b: int, l_: int, hv: int, d: int) -> tuple[float, float]:
    """(minimal bytes, FLOPs) of plain attention over the block: bf16 q, k, v (k and v expanded
    to the value heads) and o, and the two matmuls; no history unit (the readout of
    :func:`block_cost` is not its work)."""
    return b * l_ * hv * d * 2 * 4, b * hv * 2 * 2 * l_ * l_ * d


def report(name: str, ms: float, cost: tuple[float, float], bw: float, rate: float) -> None:
    floor = max(cost[0] / bw, cost[1] / rate) * 1e3
    print(f"  {name:46s} {ms:9.3f} ms   floor {floor:8.3f} ms   achieved {floor / ms:6.1%}")


def time_gdn(sizes: list[int], bw: float, rate: float, hk: int = 16, hv: int = 32,
             d: int = 128) -> None:
    from decision.kernels import chunk_gated_delta_rule
    from decision.kernels.testing import gdn_inputs

    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_gdn
    except ImportError:
        fla_gdn = None
        print("  (flash-linear-attention not installed: no fla comparison)")
    for t in sizes:
        if time.monotonic() - T0 > BUDGET_S:
            print(f"  time budget reached, skipping T={t}")
            break
        x = gdn_inputs(1, t, hk, hv, d, d, n_states=1, dtype=torch.bfloat16, device=DEVICE)
        report(f"ours fwd       T={t:6d}", bench(lambda x=x: chunk_gated_delta_rule(
            **x, backend="triton")), gdn_cost(t, hk, hv, d, False), bw, rate)
        leaves = {n: v.requires_grad_() for n, v in x.items()}

        def fwd_bwd(leaves: dict[str, torch.Tensor] = leaves) -> None:
            o, s = chunk_gated_delta_rule(**leaves, backend="triton")
            torch.autograd.backward((o, s), (torch.ones_like(o), torch.ones_like(s)))

        report(f"ours fwd+bwd   T={t:6d}", bench(fwd_bwd, list(leaves.values())),
               gdn_cost(t, hk, hv, d, True), bw, rate)
        from decision.kernels.gated_delta_rule import triton_chunk

        fell_back = any(key[:2] == (d, d) for key in triton_chunk._NO_FIT)
        print("    (chunk-local backward: " + ("PyTorch fallback, the kernel does not fit"
                                               if fell_back else "Triton kernel") + ")")
        if fla_gdn is not None:
            # fla takes beta after the sigmoid; q, k are expanded to the value heads so the call
            # does not depend on fla's grouped-head support (same FLOPs either way).
            rep = hv // hk
            q = x["q"].detach().repeat_interleave(rep, 2)
            k = x["k"].detach().repeat_interleave(rep, 2)
            beta = torch.sigmoid(x["beta"].detach().float()).to(torch.bfloat16)
            try:
                ms = bench(lambda q=q, k=k, beta=beta, x=x: fla_gdn(
                    q, k, x["v"].detach(), x["g"].detach(), beta,
                    initial_state=x["initial_state"].detach(), output_final_state=True,
                    use_qk_l2norm_in_kernel=True))
                report(f"fla  fwd       T={t:6d}", ms, gdn_cost(t, hk, hv, d, False), bw, rate)
            except Exception as err:  # report and go on: fla versions differ in their API
                print(f"  fla failed at T={t}: {type(err).__name__}: {err}")
        del x, leaves
        torch.cuda.empty_cache()


def time_block(sizes: list[int], bw: float, rate: float, hk: int = 16, hv: int = 32,
               d: int = 128, b: int = 64) -> None:
    from decision.kernels import block_attention
    from decision.kernels.testing import block_inputs

    for l_ in sizes:
        if time.monotonic() - T0 > BUDGET_S:
            print(f"  time budget reached, skipping L={l_}")
            break
        x = block_inputs(b, l_, hk, hv, d, d, dtype=torch.bfloat16, device=DEVICE)
        report(f"ours fwd       B={b} L={l_:4d}", bench(lambda x=x: block_attention(
            **x, backend="triton")), block_cost(b, l_, hk, hv, d, False), bw, rate)
        report(f"torch ref fwd  B={b} L={l_:4d}", bench(lambda x=x: block_attention(
            **x, backend="torch")), block_cost(b, l_, hk, hv, d, False), bw, rate)
        leaves = {n: (v.requires_grad_() if v.is_floating_point() else v) for n, v in x.items()}

        def fwd_bwd(leaves: dict[str, torch.Tensor] = leaves) -> None:
            block_attention(**leaves, backend="triton").sum().backward()

        report(f"ours fwd+bwd   B={b} L={l_:4d}",
               bench(fwd_bwd, [v for v in leaves.values() if v.requires_grad]),
               block_cost(b, l_, hk, hv, d, True), bw, rate)
        qs = x["q"].detach().repeat_interleave(hv // hk, 2).transpose(1, 2)
        ks = x["k"].detach().repeat_interleave(hv // hk, 2).transpose(1, 2)
        vs = x["v"].detach().transpose(1, 2)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        report(f"SDPA (no history unit) B={b} L={l_:4d}",
               bench(lambda sdpa=sdpa, qs=qs, ks=ks, vs=vs: sdpa(qs, ks, vs)),
               sdpa_cost(b, l_, hv, d), bw, rate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smallest sizes only")
    parser.add_argument("--seed", type=int, default=None,
                        help="inputs of the correctness checks (default: drawn and printed, so a "
                             "failure can be replayed)")
    args = parser.parse_args()
    seed = int(time.time()) if args.seed is None else args.seed
    _fail_without_cuda()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    bw, rate = machine_rates()
    print(f"measured: copy bandwidth {bw / 1e12:.2f} TB/s, bf16 matmul {rate / 1e12:.0f} TFLOP/s")
    print(f"correctness on the GPU (Triton fp32 vs PyTorch float64 reference; --seed {seed}):")
    bad = check_gdn(seed) + check_block(seed)
    if bad:
        print(f"FAILED: {', '.join(bad)} (replay: --seed {seed})")
        sys.exit(1)
    print("chunk_gated_delta_rule (B=1, Hk=16, Hv=32, D=128, bf16):")
    time_gdn([4096] if args.quick else [4096, 8192, 16384, 32768], bw, rate)
    print("block_attention (B=64 rows, Hk=16, Hv=32, D=128, bf16):")
    time_block([32] if args.quick else [32, 64, 128, 256], bw, rate)
    print(f"done in {time.monotonic() - T0:.0f} s")


if __name__ == "__main__":
    main()
