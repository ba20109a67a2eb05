"""The parameter-wise mean of checkpoints of one shape ("weight averaging", a model soup).

    python -m decision.model.average runs/a/export runs/b/export --out runs/mean

Checkpoints continued from one parent with the same config and tokenizer can be averaged into
one model of the same size. The mean is taken in float32 and stored in the first checkpoint's
dtype, beside its config and tokenizer.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from decision.errors import CheckpointError
from decision.model.backbone import DecisionModel
from decision.model.checkpoint import load_model


def _tokenizer_text(model: DecisionModel) -> str | None:
    return None if model.tokenizer is None else model.tokenizer.to_str()


def average_models(paths: Sequence[str | Path]) -> DecisionModel:
    """The first checkpoint with every parameter replaced by the mean over all of them."""
    if len(paths) < 2:
        raise CheckpointError("averaging needs at least two checkpoints")
    models = [load_model(p, dtype=None) for p in paths]
    first = models[0]
    for path, model in zip(paths[1:], models[1:], strict=True):
        if model.config != first.config:
            raise CheckpointError(f"{path}: config differs from {paths[0]}'s")
        if _tokenizer_text(model) != _tokenizer_text(first):
            raise CheckpointError(f"{path}: tokenizer differs from {paths[0]}'s")
    states = [m.state_dict() for m in models]
    with torch.no_grad():
        for name, tensor in states[0].items():
            mean = torch.stack([s[name].float() for s in states]).mean(dim=0)
            tensor.copy_(mean.to(tensor.dtype))
    return first


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decision.model.average",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", help="model directories of one config")
    parser.add_argument("--out", required=True, help="directory for the mean (must not exist)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    try:
        if out.exists():
            raise CheckpointError(f"{out}: already exists")
        average_models(args.checkpoints).save(out)
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote the mean of {len(args.checkpoints)} checkpoints to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
