"""Soft targets for distillation: a teacher's pooled move probabilities on a run's own rows.

Symmetry pooling (:mod:`apps.xiangqi.pooling`) ranks the moves better than the model's own
view of the position, at four decodes a move. Distillation (Hinton, Vinyals and Dean, 2015)
trains the single view toward the pooled answer: this module asks a teacher model each of a
training run's rows ``start .. end - 1`` (:func:`apps.xiangqi.train_player.row_source`, the
rows the loop will feed, by index) as the model alone plays (pooled from ply 20, as is
before), and writes its most probable moves, up to ``top`` of them or until they hold ``mass``
of the probability, one JSON line a row::

    {"row": 17, "fen": "...", "targets": {"h2e2": 0.41, "b2e2": 0.22, ...}}

The training driver reads the file through ``xiangqi.soft_targets`` and trains those rows
with ``data.soft_option_loss_weight`` times the cross-entropy against them
(:func:`decision.train.option_loss.soft_option_loss`)::

    python -m apps.xiangqi.distil --config configs/xiangqi-stage53-distil-pooled.json \\
        --model models/xiangqi --rows 0:9216 --out runs/distil54/targets.jsonl [--threads 1]

The config may be the run's own: its ``soft_targets`` are not read here (the rows do not
depend on them). Several processes may label disjoint row ranges side by side; their files
are concatenated.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from apps.xiangqi.board import Board
from apps.xiangqi.model_player import decide_images
from apps.xiangqi.pooling import (
    SymmetryPooling,
    image_questions,
    pooled_probabilities,
)
from decision.errors import DecisionInputError

TOP = 8  # at most this many moves a row
MASS = 0.95  # ... or fewer, once they hold this much of the teacher's probability
BATCH = 8  # positions decided in one decide_many call (4 images each from ply 20)


def teacher_probabilities(model: Any, boards: Sequence[Board],
                          pooling: SymmetryPooling) -> list[dict[str, float]]:
    """The teacher's probability of every legal move of each board (the row's options), pooled
    over the board's images where ``pooling`` says so, all boards' images in one batch."""
    asked, spans = [], []
    for board in boards:
        images = pooling.images_of(board)
        spans.append((len(asked), images))
        asked.extend(image_questions(board, list(board.legal_moves), images))
    decisions = decide_images(model, asked, threshold=0.9, return_probabilities=True,
                               decoder="score")
    out = []
    for first, images in spans:
        probs = [decisions[first + k].answers[0].option_probabilities or {}
                 for k in range(len(images))]
        out.append(pooled_probabilities(images, probs))
    return out


def most_probable(probs: dict[str, float], top: int = TOP, mass: float = MASS
                  ) -> dict[str, float]:
    """The most probable moves, at most ``top``, stopping once they hold ``mass`` (rounded to
    5 decimals; the loss renormalises them)."""
    kept: dict[str, float] = {}
    for move, q in sorted(probs.items(), key=lambda item: (-item[1], item[0]))[:top]:
        kept[move] = round(q, 5)
        if sum(kept.values()) >= mass:
            break
    return kept


def label_rows(config: str | Path, model_dir: str | Path, start: int, end: int,
               out: str | Path, top: int = TOP, mass: float = MASS,
               batch: int = BATCH) -> int:
    """Write the teacher's soft targets for rows ``start .. end - 1`` of ``config``'s run to
    ``out`` (JSON lines, flushed each batch so progress survives an interrupt); returns the
    number written."""
    from apps.xiangqi.train_player import load_player_config, log, row_source
    from apps.xiangqi.training import load_games
    from decision import load_model

    if not 0 <= start < end:
        raise DecisionInputError(f"rows must be START:END with 0 <= START < END, got "
                                 f"{start}:{end}", "rows")
    if top < 1 or not 0 < mass <= 1 or batch < 1:
        raise DecisionInputError("top and batch must be >= 1 and mass in (0, 1]", "top")
    _, xq = load_player_config(config)  # its soft_targets (the file being made) unread
    model = load_model(model_dir, dtype=torch.float32)
    source = row_source(xq, load_games(xq.train_games), model.tokenizer)
    pooling = SymmetryPooling()
    t0, written = time.monotonic(), 0
    with Path(out).open("w", encoding="utf-8") as f:
        for first in range(start, end, batch):
            rows = range(first, min(first + batch, end))
            boards = [source.position(i)[0] for i in rows]
            for i, board, probs in zip(rows, boards,
                                       teacher_probabilities(model, boards, pooling),
                                       strict=True):
                f.write(json.dumps({"row": i, "fen": board.fen(),
                                    "targets": most_probable(probs, top, mass)}) + "\n")
                written += 1
            f.flush()
            if written % (batch * 25) < batch:
                rate = written / (time.monotonic() - t0)
                log(f"{written}/{end - start} rows, {rate:.1f} rows/s, "
                    f"{(end - start - written) / rate / 60:.1f} min left")
    log(f"done: {written} rows in {time.monotonic() - t0:.0f} s -> {out}")
    return written


def _rows(text: str) -> tuple[int, int]:
    try:
        start, end = (int(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START:END, got {text!r}") from None
    return start, end


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m apps.xiangqi.distil",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--config", required=True, help="the training run's config file")
    parser.add_argument("--model", required=True, help="the teacher's model directory")
    parser.add_argument("--rows", type=_rows, required=True, help="START:END row indices")
    parser.add_argument("--out", required=True, help="the JSON-lines file to write")
    parser.add_argument("--top", type=int, default=TOP)
    parser.add_argument("--mass", type=float, default=MASS)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        label_rows(args.config, args.model, *args.rows, args.out, args.top, args.mass,
                   args.batch)
    except DecisionInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
