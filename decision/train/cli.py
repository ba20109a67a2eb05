"""``decision train``: command-line entry of the training recipe.

``register(subparsers)`` adds the sub-command to the service's CLI dispatcher; ``main`` runs it
stand-alone (``python -m decision.train --config FILE``).
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import TYPE_CHECKING, Any

# exit_status: python -m apps.xiangqi.train_player takes it from here too
from decision.cli import exit_status
from decision.errors import DecisionInputError

if TYPE_CHECKING:
    from decision.train.recipe import TrainResult


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="training config (.json or .toml)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from OUT_DIR/checkpoint (model, optimiser, RNG, data)")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="stop after this many minutes of this session (default: config)")
    parser.add_argument("--max-steps", type=int, default=None,
                        help="stop at this global step (default: config run.max_steps)")
    parser.add_argument("--out-dir", default=None, help="run directory (default: config)")
    parser.add_argument("--init-from", default=None, metavar="MODEL_DIR",
                        help="start a fresh run from this model's weights and tokenizer "
                             "(e.g. models/default) instead of a new tokenizer and random weights")
    parser.add_argument("--export", default=None,
                        help="after training, write the checkpoint in bf16 to this directory")
    parser.add_argument("--device", default=None,
                        help="cpu, cuda, cuda:N or auto (default: config run.device)")


# flags whose value names a directory or a device, and what it names: an empty one
# (``--out-dir "$OUT"`` with OUT unset) was taken as absent, and the run trained into the
# config's directory (``--init-from ""`` read the working directory as a model)
NAMED_FLAGS = {"out_dir": "a run directory", "init_from": "a model directory",
               "export": "a directory", "device": "a device"}


def check_flags(args: argparse.Namespace) -> None:
    """Refuse a flag of ``NAMED_FLAGS`` given an empty value (also used by
    ``python -m apps.xiangqi.train_player``)."""
    for name, what in NAMED_FLAGS.items():
        value = getattr(args, name, None)
        if value is not None and not value.strip():
            flag = name.replace("_", "-")
            raise DecisionInputError(f"--{flag} is empty: give {what}, or leave the flag out",
                                     flag)


def interrupted(result: TrainResult, export: str | None) -> int | None:
    """When Ctrl-C or SIGTERM stopped the run (the loop checkpointed it): the line saying so and
    that ``export`` is skipped, and the exit status, 128 + the signal; None for a run that ended
    otherwise (also used by ``python -m apps.xiangqi.train_player``)."""
    if result.loop.signal is None:
        return None
    name = signal.Signals(result.loop.signal).name
    skipped = "; not exported" if export else ""
    print(f"interrupted by {name} at step {result.loop.step}: checkpoint saved in "
          f"{result.checkpoint}{skipped}; continue with --resume", file=sys.stderr)
    return 128 + result.loop.signal


def run(args: argparse.Namespace) -> int:
    from decision.train.config import check_device, load_config
    from decision.train.export import check_export_dest
    from decision.train.recipe import train

    check_flags(args)
    cfg = load_config(args.config)
    if args.out_dir is not None:
        cfg.run.out_dir = args.out_dir
    if args.device is not None:
        cfg.run.device = check_device(args.device)
    if args.export is not None:  # before training: an export that cannot be written is refused
        check_export_dest(args.export, cfg.run.out_dir)
    # the export is written with the run directory still held (train's export)
    result = train(cfg, resume=args.resume, max_minutes=args.max_minutes,
                   max_steps=args.max_steps, init_from=args.init_from, export=args.export)
    status = interrupted(result, args.export)
    if status is not None:
        return status
    if args.export is not None:
        print(f"exported bf16 model to {args.export}", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    """Add ``train`` to a ``argparse`` sub-parser set (the ``decision`` CLI)."""
    parser = subparsers.add_parser("train", help="train a decision model from a config")
    add_arguments(parser)
    parser.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decision.train", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    return exit_status(lambda: run(args))
