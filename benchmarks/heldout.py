"""Set-up shared by the benchmarks that decode held-out contract groups (TEST seeds, level 2)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from apps.contracts.generator import generate_groups  # noqa: E402
from apps.contracts.splits import TEST  # noqa: E402
from decision import load_model  # noqa: E402
from decision.errors import DecisionError  # noqa: E402
from decision.evaluate import warn_unless_test  # noqa: E402


def _at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum`` (argparse reports anything else)."""
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value
    parse.__name__ = "int"  # argparse's "invalid int value" for a non-number
    return parse


def parser(description: str, threads: int = 2) -> argparse.ArgumentParser:
    """--model, --seed-start, --groups, --batch-size, --threads; callers add their own."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", default=None, help="checkpoint directory (default: shipped)")
    p.add_argument("--seed-start", type=_at_least(0), default=TEST.start)
    p.add_argument("--groups", type=_at_least(1), default=500)
    p.add_argument("--batch-size", type=_at_least(1), default=25)
    p.add_argument("--threads", type=_at_least(1), default=threads)
    return p


def model_and_groups(args: argparse.Namespace,
                     qtypes: Collection[str] | None = None) -> tuple[Any, list[Any]]:
    """The model (torch threads set) and the groups, only those asking one of ``qtypes``.

    Warns, as ``decision eval`` does, where the seeds are not all TEST seeds: the scripts print
    their numbers as those of held-out TEST groups."""
    torch.set_num_threads(args.threads)
    warn_unless_test(args.seed_start, args.groups)
    try:  # a missing checkpoint: one line, not a traceback
        model = load_model(args.model)
    except DecisionError as exc:
        raise SystemExit(f"error: {exc}") from None
    groups = [g for g in generate_groups(args.seed_start, args.groups, level=2)
              if qtypes is None or any(q.qtype in qtypes for q in g.questions)]
    return model, groups


def decide_in_batches(model: Any, requests: list[dict[str, Any]],
                      batch_size: int) -> list[Any]:
    """``model.decide_many`` over ``requests`` in batches of ``batch_size``; one Decision each."""
    return [decision for start in range(0, len(requests), batch_size)
            for decision in model.decide_many(requests[start : start + batch_size])]
