"""Cost of one denoising step vs history length, against recomputing the whole sequence.

One ``denoise`` call on a 64-token block reads the history cache; the baseline is what a
full-attention masked-diffusion model does without a cache: ``history_logits`` over
history + block at every step. Random weights (timing only), CPU, medians over repeats.

    .venv/bin/python benchmarks/step_cost.py            # lengths 256 .. 8192
    .venv/bin/python benchmarks/step_cost.py --lengths 256 1024 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from decision.model import DecisionConfig, DecisionModel


def bench_config() -> DecisionConfig:
    """hidden 256, 8 layers in the 3:1 GDN/attention pattern, 8 experts (top-2) + shared."""
    return DecisionConfig(
        vocab_size=2048, hidden_size=256, num_hidden_layers=8, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=64, linear_value_head_dim=64, num_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=256, shared_expert_intermediate_size=256, mask_token_id=2047,
    )


def median_ms(fn: Callable[[], object], repeats: int, warmup: bool = True) -> float:
    """Median wall time of ``fn`` in ms (after one warm-up call when ``warmup``)."""
    if warmup:
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def recompute(model: DecisionModel, ids: torch.Tensor, block: int) -> torch.Tensor:
    """Baseline step: run the network over history + block, logits for the block only.

    (A cache-free masked-diffusion model pays this full pass at every step; its attention would
    be bidirectional, which costs the same as the causal pass used here.)
    """
    mask = torch.ones_like(ids, dtype=torch.bool)
    hidden, _ = model._history_pass(ids, mask, None, model.empty_cache(ids.shape[0]))
    assert hidden is not None
    return model.lm_head(hidden[:, -block:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+",
                        default=[256, 512, 1024, 2048, 4096, 8192])
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline-repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    args = parser.parse_args()
    if min(args.block, args.repeats, args.baseline_repeats) < 1:
        parser.error("--block, --repeats and --baseline-repeats must be >= 1")
    if min(args.lengths) < 0 or args.threads < 0:
        parser.error("--lengths and --threads must be >= 0")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = DecisionModel(bench_config()).eval()
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params / 1e6:.2f}M params, layers {model.config.layer_types}, "
          f"threads {torch.get_num_threads()}, block {args.block} tokens")
    print("| history | denoise step (ms) | recompute all (ms) | ratio | cache (MiB) |")
    print("|---:|---:|---:|---:|---:|")
    gen = torch.Generator().manual_seed(1)
    block = torch.full((1, args.block), 2047)  # an all-[MASK] block, as at the first step
    with torch.inference_mode():
        for n in args.lengths:
            history = torch.randint(0, 2000, (1, n), generator=gen)
            cache = model.prefill(history)
            step = median_ms(lambda c=cache: model.denoise(block, c), args.repeats)
            both = torch.cat([history, block], dim=1)
            full = median_ms(lambda b=both: recompute(model, b, args.block),
                             args.baseline_repeats, warmup=False)
            mib = cache.nbytes() / 2**20
            print(f"| {n} | {step:.1f} | {full:.1f} | {full / step:.1f}x | {mib:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
