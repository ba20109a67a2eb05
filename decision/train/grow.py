"""Grow a trained dense model deeper and wider without changing what it computes.

Training a small model on two CPU cores flattens long before the data is used up; starting a
larger one from scratch throws away hours of training. Growing keeps them: new layers are
appended with their output projections (the token mixer's ``out_proj`` / ``o_proj`` and the MLP's
``down_proj``) set to zero, so each new layer adds nothing to the residual stream, and new MLP
units of existing layers get zero ``down_proj`` columns, so they add nothing either. The grown
model's logits equal the source's (up to rounding in the source's dtype); training then moves
the zeroed weights first and the rest follows (the zero-initialised residual branch of Goyal et
al. 2017 / Zhang et al., "Fixup", 2019, used here for function-preserving growth as in Chen et
al., "Net2Net", 2016).

Upcycling (:func:`upcycle`) adds capacity without adding much compute a token: every dense MLP
becomes Qwen3.5's sparse MoE block, its shared expert the old MLP and its routed experts new
(Komatsuzaki et al., "Sparse Upcycling", 2023, here with silent new experts so that the function
is kept). The routed experts' ``down_proj`` starts at zero, and the shared expert's gate at zero,
whose ``sigmoid(0) = 1/2`` the shared expert's doubled ``down_proj`` cancels exactly.

``python -m decision.train.grow SOURCE OUT --add-layers linear_attention,full_attention
--intermediate-size 384`` (or ``--experts 8 --experts-per-token 2 --expert-size 128``) writes a
model directory that ``--init-from`` trains on.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import torch

from decision.errors import CheckpointError, DecisionInputError
from decision.model import DecisionModel, load_model
from decision.model.config import FULL, LINEAR, DecisionConfig

# the weights whose output feeds the residual stream, zeroed in a new layer
RESIDUAL_OUTPUTS = ("linear_attn.out_proj.weight", "self_attn.o_proj.weight",
                    "self_attn.o_proj.bias", "mlp.down_proj.weight")


def grown_config(config: DecisionConfig, add_layers: list[str],
                 intermediate_size: int | None) -> DecisionConfig:
    """The source's config with ``add_layers`` appended and the MLPs ``intermediate_size`` wide
    (None: as wide as before); refused for MoE models and for narrowing."""
    if config.num_experts > 0:
        raise DecisionInputError(
            "growing is implemented for dense models only (num_experts 0); this one has "
            f"{config.num_experts} experts", "num_experts",
        )
    unknown = [t for t in add_layers if t not in (LINEAR, FULL)]
    if unknown:
        raise DecisionInputError(
            f"unknown layer type(s) {unknown}; choose from {LINEAR}, {FULL}", "add_layers"
        )
    width = config.intermediate_size if intermediate_size is None else intermediate_size
    if width < config.intermediate_size:
        raise DecisionInputError(
            f"intermediate_size {width} is below the source's {config.intermediate_size}: "
            "growing never removes units", "intermediate_size",
        )
    if not add_layers and width == config.intermediate_size:
        raise DecisionInputError("nothing to grow: add layers or widen the MLPs", "add_layers")
    return dataclasses.replace(
        config,
        num_hidden_layers=config.num_hidden_layers + len(add_layers),
        layer_types=[*config.layer_types, *add_layers],
        intermediate_size=width,
    )


def grow(source: DecisionModel, add_layers: list[str], intermediate_size: int | None = None,
         seed: int = 0) -> DecisionModel:
    """A new model computing what ``source`` does, with ``add_layers`` appended on top of its
    layers and its MLPs widened to ``intermediate_size``; the new weights that do not feed the
    residual stream get the model's usual initialisation (seeded by ``seed``)."""
    config = grown_config(source.config, add_layers, intermediate_size)
    torch.manual_seed(seed)
    grown = DecisionModel(config).to(dtype=source.dtype, device=source.device)
    grown.tokenizer = source.tokenizer
    old = source.state_dict()
    n_old = source.config.num_hidden_layers
    width = source.config.intermediate_size
    with torch.no_grad():
        for name, target in grown.state_dict().items():
            if name in old:
                _copy_into(target, old[name], name, width)
            elif _is_new_residual_output(name, n_old):
                target.zero_()
    return grown.eval() if not source.training else grown


def upcycled_config(config: DecisionConfig, num_experts: int, experts_per_tok: int,
                    expert_size: int) -> DecisionConfig:
    """The source's config with every layer's MLP a sparse MoE block of ``num_experts`` routed
    experts ``expert_size`` wide (``experts_per_tok`` a token) and a shared expert as wide as
    the source's MLP; refused for MoE sources and impossible routings."""
    if config.num_experts > 0:
        raise DecisionInputError(
            f"upcycling takes a dense model (num_experts 0); this one has {config.num_experts} "
            "experts", "num_experts",
        )
    if num_experts < 1:
        raise DecisionInputError(f"experts {num_experts}: need at least 1", "num_experts")
    if not 1 <= experts_per_tok <= num_experts:
        raise DecisionInputError(
            f"experts per token {experts_per_tok}: must be between 1 and the {num_experts} "
            "experts", "num_experts_per_tok",
        )
    if expert_size < 1:
        raise DecisionInputError(f"expert size {expert_size}: need at least 1",
                                 "moe_intermediate_size")
    return dataclasses.replace(
        config,
        num_experts=num_experts,
        num_experts_per_tok=experts_per_tok,
        moe_intermediate_size=expert_size,
        shared_expert_intermediate_size=config.intermediate_size,
        decoder_sparse_step=1,
        mlp_only_layers=[],
    )


# dense MLP weight -> its place in the MoE block (the shared expert)
_SHARED = {"gate_proj.weight": "shared_expert.gate_proj.weight",
           "up_proj.weight": "shared_expert.up_proj.weight",
           "down_proj.weight": "shared_expert.down_proj.weight"}
# new MoE weights that feed the residual stream, zeroed so that the block computes the old MLP
_SILENT = ("mlp.experts.down_proj", "mlp.shared_expert_gate.weight")


def upcycle(source: DecisionModel, num_experts: int, experts_per_tok: int, expert_size: int,
            seed: int = 0) -> DecisionModel:
    """A new model computing what the dense ``source`` does, each MLP turned into a sparse MoE
    block (the old MLP as its shared expert, ``num_experts`` silent routed experts); the
    routers and the experts' input projections get the model's usual initialisation (seeded by
    ``seed``)."""
    config = upcycled_config(source.config, num_experts, experts_per_tok, expert_size)
    torch.manual_seed(seed)
    moe = DecisionModel(config).to(dtype=source.dtype, device=source.device)
    moe.tokenizer = source.tokenizer
    target = moe.state_dict()
    with torch.no_grad():
        for name, value in source.state_dict().items():
            prefix, dot, rest = name.partition(".mlp.")
            place = f"{prefix}.mlp.{_SHARED[rest]}" if dot else name
            # sigmoid(0) = 1/2 on the shared expert's output, cancelled here (exact in bf16)
            scale = 2.0 if dot and rest == "down_proj.weight" else 1.0
            target[place].copy_(value * scale)
        for name, value in target.items():
            if name.endswith(_SILENT):
                value.zero_()
    return moe.eval() if not source.training else moe


def _copy_into(target: torch.Tensor, value: torch.Tensor, name: str, width: int) -> None:
    """Copy a source weight into its (possibly wider) place; a widened MLP's new down_proj
    columns are zeroed so that its new units add nothing."""
    if target.shape == value.shape:
        target.copy_(value)
    elif name.endswith(("mlp.gate_proj.weight", "mlp.up_proj.weight")):
        target[:width].copy_(value)
    elif name.endswith("mlp.down_proj.weight"):
        target[:, :width].copy_(value)
        target[:, width:].zero_()
    else:  # pragma: no cover - grown_config changes no other shape
        raise CheckpointError(f"{name}: shape {tuple(value.shape)} cannot grow to "
                              f"{tuple(target.shape)}")


def _is_new_residual_output(name: str, n_old: int) -> bool:
    parts = name.split(".")
    if parts[:2] != ["model", "layers"] or int(parts[2]) < n_old:
        return False
    return ".".join(parts[3:]) in RESIDUAL_OUTPUTS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m decision.train.grow", description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="model directory to grow (config, weights, tokenizer)")
    parser.add_argument("out", help="directory to write the grown model to (must not exist)")
    parser.add_argument("--add-layers", default="", metavar="TYPES",
                        help="comma-separated layer types to append, e.g. "
                             "linear_attention,full_attention")
    parser.add_argument("--intermediate-size", type=int, default=None,
                        help="the MLPs' new width (default: unchanged)")
    parser.add_argument("--experts", type=int, default=0, metavar="N",
                        help="upcycle every MLP into a sparse MoE block of N routed experts "
                             "(after any growth; default 0: stay dense)")
    parser.add_argument("--experts-per-token", type=int, default=2, metavar="K",
                        help="routed experts a token (with --experts; default 2)")
    parser.add_argument("--expert-size", type=int, default=None, metavar="I",
                        help="a routed expert's width (with --experts; default: half the MLP's)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the new weights that do not feed the residual stream")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if out.exists():
        parser.error(f"{out} already exists: choose a new directory")
    add = [t.strip() for t in args.add_layers.split(",") if t.strip()]
    source = load_model(args.source, dtype=None)
    if source.tokenizer is None:
        parser.error(f"{args.source} has no tokenizer.json")
    try:
        grown = source
        # the source's own width with --experts is the upcycle alone, not "nothing to grow"
        widen = args.intermediate_size not in (None, source.config.intermediate_size)
        if add or widen or not args.experts:
            grown = grow(source, add, args.intermediate_size, args.seed)
        if args.experts:
            size = (max(grown.config.intermediate_size // 2, 1) if args.expert_size is None
                    else args.expert_size)
            grown = upcycle(grown, args.experts, args.experts_per_token, size, args.seed)
    except DecisionInputError as exc:
        parser.error(str(exc))
    grown.save(out)
    before = sum(p.numel() for p in source.parameters())
    after = sum(p.numel() for p in grown.parameters())
    experts = (f", {grown.config.num_experts} experts of {grown.config.moe_intermediate_size} "
               f"({grown.config.num_experts_per_tok} a token)" if args.experts else "")
    print(f"grew {args.source} ({source.config.num_hidden_layers} layers, {before:,} "
          f"parameters) into {out} ({grown.config.num_hidden_layers} layers, "
          f"intermediate {grown.config.intermediate_size}{experts}, {after:,} parameters)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
