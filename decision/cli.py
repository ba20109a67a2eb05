"""The ``decision`` command: a small dispatcher over subcommands that live in their own modules.

Each module in ``COMMAND_MODULES`` exposes ``register(subparsers)``, which adds its subparser and
sets ``func`` (``argparse.Namespace -> int`` exit status) as a default. Add a command with one
line. Keep those modules light at import time (import torch inside ``func``): ``decision --help``
imports all of them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from decision.errors import CheckpointError, DecisionError, DecisionInputError

COMMAND_MODULES: list[str] = [
    "decision.serve.command",  # decision serve
    "decision.serve.decide_command",  # decision decide
    "decision.scoring.command",  # decision score
    "apps.xiangqi.cli",  # decision xiangqi
    "decision.train.cli",  # decision train
    "decision.evaluate",  # decision eval
    "apps.contracts.demo",  # decision contracts demo
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="decision",
        description="Joint-mode structured decisions from a block-diffusion language model.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; bad input and unreadable checkpoints exit 2 with a one-line message,
    other errors the library raises on purpose (a diverged training run) exit 1."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status: int = args.func(args)
    except DecisionInputError as exc:
        where = f" ({exc.field})" if exc.field else ""
        print(f"decision {args.command}: error{where}: {exc.message}", file=sys.stderr)
        return 2
    except CheckpointError as exc:
        print(f"decision {args.command}: cannot load the model: {exc}", file=sys.stderr)
        return 2
    except DecisionError as exc:  # e.g. a training run that diverged (TrainingError)
        print(f"decision {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"decision {args.command}: interrupted", file=sys.stderr)
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
