"""Cost of one Xiangqi training step: batches in plain row order vs length-sorted windows.

The same rows, the same model and the same step (``batch_loss`` then ``backward``); variants run
interleaved, all ``--steps`` steps each per round, and the table gives medians over the rounds
of the mean step time, the mean padded history width per batch, and each variant's time
relative to plain order; the header gives the time to build a row (replay, render, tokenize,
lay out), which the loop spends too.
The optional ``--bf16`` adds the plain-order step under bf16 autocast.

    .venv/bin/python benchmarks/train_step.py    # models/xiangqi, configs/xiangqi-stage8.json
    .venv/bin/python benchmarks/train_step.py --rounds 5 --windows 8 32 --bf16
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apps.xiangqi.train_player import load_player_config  # noqa: E402
from apps.xiangqi.training import MoveRowSource, load_games, sample_positions  # noqa: E402
from decision.tokenizer import special_ids  # noqa: E402
from decision.train.batches import StepBatches  # noqa: E402
from decision.train.config import TrainConfig  # noqa: E402
from decision.train.recipe import load_trainable  # noqa: E402
from decision.train.rows import collate  # noqa: E402
from decision.train.step_loss import batch_loss  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="models/xiangqi")
    p.add_argument("--config", default="configs/xiangqi-stage8.json")
    p.add_argument("--games", type=int, default=5000, help="training games read (the first N)")
    p.add_argument("--windows", type=int, nargs="+", default=[32], help="length_window values")
    p.add_argument("--steps", type=int, default=32,
                   help="steps timed per variant and round (rounded up to whole windows of "
                   "every --windows value)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--bf16", action="store_true", help="also plain order under bf16 autocast")
    args = p.parse_args()
    if min(args.games, args.steps, args.rounds, args.threads, *args.windows) < 1:
        p.error("--games, --windows, --steps, --rounds and --threads must be >= 1")
    torch.set_num_threads(args.threads)

    cfg, section = load_player_config(args.config)
    games = load_games(section.train_games, limit=args.games)
    model = load_trainable(args.model, "benchmark").float()
    model.train()
    tok = model.tokenizer
    ids = special_ids(tok)
    source = MoveRowSource(games, sample_positions(games, 10_000, 2026), tok)
    bs = cfg.optim.batch_size
    # whole windows of every variant, all timed: every variant trains on the same rows (a span
    # of whole windows of the largest only left a smaller one's last window short of rows)
    unit = math.lcm(*args.windows)
    span = -(-args.steps // unit) * unit
    t0 = time.perf_counter()
    rows = [source.row(i) for i in range(span * bs)]  # replay, render, tokenize, lay out
    row_ms = (time.perf_counter() - t0) * 1000 / len(rows)

    variants: dict[str, tuple[StepBatches, TrainConfig]] = {
        "plain order": (StepBatches(rows.__getitem__, bs), cfg)
    }
    for w in args.windows:
        variants[f"sorted windows of {w}"] = (StepBatches(rows.__getitem__, bs, w, 0), cfg)
    if args.bf16:
        bf = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, autocast_bf16=True))
        variants["plain order, bf16 autocast"] = (StepBatches(rows.__getitem__, bs), bf)

    collated = {name: [collate(batches.rows_for(s), ids.pad) for s in range(span)]
                for name, (batches, _) in variants.items()}
    widths = {name: statistics.mean(b.history_ids.shape[1] for b in batch_list)
              for name, batch_list in collated.items()}
    times: dict[str, list[float]] = {name: [] for name in variants}
    gen = torch.Generator().manual_seed(0)
    for name, (_, c) in variants.items():  # warm-up, untimed: first-call costs not in round 1
        batch_loss(model, collated[name][0], c, ids.mask, gen).backward()
    model.zero_grad(set_to_none=True)
    for _ in range(args.rounds):
        for name, (_, c) in variants.items():
            t0 = time.perf_counter()
            for b in collated[name]:
                batch_loss(model, b, c, ids.mask, gen).backward()
            times[name].append((time.perf_counter() - t0) / span)
            model.zero_grad(set_to_none=True)

    real = statistics.mean(len(r.history_ids) for r in rows)
    print(f"# {args.model}, batch {bs}, {cfg.run.denoise_draws} noise draws, {args.threads} "
          f"threads; {len(rows)} rows ({row_ms:.2f} ms each to build), mean history {real:.0f} "
          f"tokens; medians of {args.rounds}")
    print("\n".join(table(times, widths)))
    return 0


def table(times: dict[str, list[float]], widths: dict[str, float]) -> list[str]:
    """The Markdown table: per variant (in ``times``' order, "plain order" among them), the
    padded history width, the median over the rounds of its step time, and that median over
    plain order's ("/ plain": 2.00 for a variant twice as slow)."""
    lines = ["| batches | padded history width | step (s) | / plain |", "|---|---:|---:|---:|"]
    base = statistics.median(times["plain order"])
    for name, per_round in times.items():
        m = statistics.median(per_round)
        lines.append(f"| {name} | {widths[name]:.0f} | {m:.3f} | {m / base:.2f} |")
    return lines


if __name__ == "__main__":
    from decision.cli import exit_status  # a missing config or model: one line, not a traceback

    raise SystemExit(exit_status(main, "train_step.py: "))
