"""The parameter-wise mean of checkpoints of one shape ("weight averaging", a model soup).

    python -m decision.model.average runs/a/export runs/b/export --out runs/mean
    python -m decision.model.average runs/mean runs/parent --weights 1.5,-0.5 --out runs/ext

Checkpoints continued from one parent with the same config and tokenizer can be averaged into
one model of the same size. The mean is taken in float32 and stored in the first checkpoint's
dtype, beside its config and tokenizer. Weights (finite, summing to 1, negative ones allowed)
give a weighted mean, e.g. the children's mean moved further from their parent (extrapolation).
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from decision.errors import CheckpointError
from decision.model.backbone import DecisionModel
from decision.model.checkpoint import load_model


def _tokenizer_text(model: DecisionModel) -> str | None:
    return None if model.tokenizer is None else model.tokenizer.to_str()


def average_models(paths: Sequence[str | Path],
                   weights: Sequence[float] | None = None) -> DecisionModel:
    """The first checkpoint with every parameter replaced by the (weighted) mean over all."""
    if len(paths) < 2:
        raise CheckpointError("averaging needs at least two checkpoints")
    if weights is not None:
        if len(weights) != len(paths):
            raise CheckpointError(f"{len(weights)} weights for {len(paths)} checkpoints")
        if not all(math.isfinite(w) for w in weights):  # NaN fails every comparison
            raise CheckpointError(f"the weights must be finite numbers, got {list(weights)}")
        if abs(sum(weights) - 1.0) > 1e-6:
            raise CheckpointError(f"the weights sum to {sum(weights):g}, not 1")
        weight_vector = torch.tensor(weights, dtype=torch.float32)
    models = [load_model(p, dtype=None) for p in paths]
    first = models[0]
    for path, model in zip(paths[1:], models[1:], strict=True):
        if model.config != first.config:
            raise CheckpointError(f"{path}: config differs from {paths[0]}'s")
        if _tokenizer_text(model) != _tokenizer_text(first):
            raise CheckpointError(f"{path}: tokenizer differs from {paths[0]}'s")
    states = [m.state_dict() for m in models]
    with torch.no_grad():
        # every mean before any copy: a tied tensor (embed_tokens and lm_head with
        # tie_word_embeddings) is listed under both names, and copying the first mean in place
        # made the second name average the first model's already averaged tensor again
        means = {}
        for name in states[0]:
            stacked = torch.stack([s[name].float() for s in states])
            means[name] = (stacked.mean(dim=0) if weights is None
                           else torch.tensordot(weight_vector, stacked, dims=1))
        for name, tensor in states[0].items():
            tensor.copy_(means[name].to(tensor.dtype))
    return first


def _weights(text: str) -> list[float]:
    try:
        return [float(w) for w in text.split(",")]
    except ValueError:
        message = f"not a comma-separated list of numbers: {text!r}"
        raise argparse.ArgumentTypeError(message) from None


def _save_new(model: DecisionModel, out: Path) -> None:
    """Save to ``out``, which did not exist; a failed write (``out`` under a file, a read-only
    place, a full disk) is a CheckpointError and leaves no partial ``out`` to refuse a rerun."""
    try:
        model.save(out)
    except CheckpointError as exc:  # ``out`` could not be made (it names it)
        raise CheckpointError(f"cannot write the mean: {exc}") from None
    except OSError as exc:
        shutil.rmtree(out, ignore_errors=True)
        raise CheckpointError(f"cannot write the mean to {out}: {exc}") from None


def _negative_first_weight_joined(argv: list[str]) -> list[str]:
    """``--weights -0.5,1.5`` as ``--weights=-0.5,1.5``: argparse takes a value that starts with
    a minus and is not one plain number for an option, and answered "expected one argument"."""
    joined: list[str] = []
    for i, arg in enumerate(argv):
        if i and argv[i - 1] == "--weights" and re.match(r"-[\d.]", arg):
            joined[-1] = f"--weights={arg}"
        else:
            joined.append(arg)
    return joined


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decision.model.average",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", help="model directories of one config")
    parser.add_argument("--out", required=True, help="directory for the mean (must not exist)")
    parser.add_argument("--weights", type=_weights, default=None,
                        help="comma-separated, one per checkpoint, summing to 1 (default: equal)")
    args = parser.parse_args(_negative_first_weight_joined(sys.argv[1:] if argv is None else argv))
    out = Path(args.out)
    try:
        if out.exists():
            raise CheckpointError(f"{out}: already exists")
        _save_new(average_models(args.checkpoints, args.weights), out)
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote the mean of {len(args.checkpoints)} checkpoints to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
