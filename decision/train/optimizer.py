"""The optimiser of a training run: AdamW's parameter groups, the learning-rate schedule, and
how a resume loads the checkpoint's optimiser state under the current config.

Apart from the loop because a resume checks and loads it before any step runs, and the group
layout (which parameter sits in which group) is what decides whether a checkpoint's moments fit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from decision.errors import DecisionInputError
from decision.train.config import TrainConfig
from decision.train.trainable import TrainableModel


def lr_lambda(cfg: TrainConfig) -> Callable[[int], float]:
    """Linear warm-up then cosine decay to ``min_lr_ratio`` at ``max_steps``."""
    warm, total, floor = cfg.optim.warmup_steps, cfg.run.max_steps, cfg.optim.min_lr_ratio

    def f(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        frac = min(1.0, (step - warm) / max(1, total - warm))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * frac))

    return f


def group_specs(scaled_lr_params: Sequence[str]) -> list[tuple[bool, bool]]:
    """``(scaled, decays)`` of each AdamW group, in :func:`make_optimizer`'s order: scaled
    groups only when ``optim.scaled_lr_params`` names some."""
    scaled = (False, True) if scaled_lr_params else (False,)
    return [(s, decays) for s in scaled for decays in (True, False)]


def grouped_params(
    model: TrainableModel, scaled_lr_params: Sequence[str]
) -> list[list[tuple[str, torch.nn.Parameter]]]:
    """The trainable ``(name, parameter)`` pairs of each group of :func:`group_specs`: a name
    containing one of ``scaled_lr_params`` is scaled, a matrix (dim >= 2) decays."""
    groups: dict[tuple[bool, bool], list[tuple[str, torch.nn.Parameter]]] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            scaled = any(part in name for part in scaled_lr_params)
            groups.setdefault((scaled, p.dim() >= 2), []).append((name, p))
    return [groups.get(spec, []) for spec in group_specs(scaled_lr_params)]


def group_settings(cfg: TrainConfig) -> list[dict[str, Any]]:
    """Each group's base ``lr`` (``optim.lr``, times ``scaled_lr_factor`` in a scaled group),
    ``weight_decay`` (none on vectors) and ``betas``, as the config sets them."""
    o = cfg.optim
    return [{"lr": o.lr * (o.scaled_lr_factor if scaled else 1.0),
             "weight_decay": o.weight_decay if decays else 0.0, "betas": o.betas}
            for scaled, decays in group_specs(o.scaled_lr_params)]


def make_optimizer(
    model: TrainableModel, cfg: TrainConfig
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with no weight decay on vectors (norms, biases, decay constants), as is usual;
    parameters named in ``optim.scaled_lr_params`` get their own groups at ``lr *
    scaled_lr_factor`` (the schedule scales every group alike). Without them the two groups are
    what they always were, so older checkpoints resume."""
    param_groups = [
        {"params": [p for _, p in params], **settings}
        for params, settings in zip(grouped_params(model, cfg.optim.scaled_lr_params),
                                    group_settings(cfg), strict=True)
    ]
    opt = torch.optim.AdamW(param_groups, lr=cfg.optim.lr, betas=cfg.optim.betas)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg))


def check_group_layout(model: TrainableModel, cfg: TrainConfig,
                       saved: dict[str, Any] | None, ckpt: Path) -> None:
    """Refuse a resume whose ``optim.scaled_lr_params`` put the parameters in other optimiser
    groups than the checkpoint's config (``saved``, its train_config.json) did: AdamW's moments
    are stored per group position, so they would land on other parameters, or torch refuses
    the state with a traceback. None (no saved config): the load's own check is all there is."""
    optim = saved.get("optim") if isinstance(saved, dict) else None
    if not isinstance(optim, dict):
        return
    was = optim.get("scaled_lr_params", [])  # older configs: no scaled groups
    if not isinstance(was, list) or not all(isinstance(n, str) for n in was):
        return

    def names(scaled_lr_params: Sequence[str]) -> list[list[str]]:
        return [[n for n, _ in group] for group in grouped_params(model, scaled_lr_params)]

    now = list(cfg.optim.scaled_lr_params)
    if names(was) != names(now):
        raise group_layout_error(ckpt, f"optim.scaled_lr_params {now!r} groups the parameters "
                                       f"otherwise than the checkpoint's {was!r}")


def group_layout_error(ckpt: Path, why: str) -> DecisionInputError:
    """The one-line error of a resume whose optimiser groups differ from the checkpoint's."""
    return DecisionInputError(
        f"cannot resume: {why}, so the checkpoint's optimiser state does not fit; keep its "
        f"optim.scaled_lr_params, or start a new run from its weights with --init-from {ckpt} "
        "and another --out-dir", "optim.scaled_lr_params",
    )


def load_optimizer(
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LambdaLR,
    state: dict[str, Any],
    cfg: TrainConfig,
    ckpt: Path,
) -> None:
    """Load the checkpoint's optimiser and scheduler state, then put the config's values on
    them: torch's load brings back the saved lr, betas, weight decay and base rates, and the
    run would go on with the old recipe although the log says it takes the new one. The
    moments and the step count stay the checkpoint's; each group's rate becomes its new base
    times the schedule at the current step, so the first resumed step already follows it."""
    try:
        opt.load_state_dict(state["optimizer"])
    except ValueError as exc:  # another number or size of groups
        raise group_layout_error(ckpt, f"the optimiser groups differ ({exc})") from None
    sched.load_state_dict(state["scheduler"])
    for group, settings, scale in zip(opt.param_groups, group_settings(cfg), sched.lr_lambdas,
                                      strict=True):
        group.update(settings, initial_lr=settings["lr"],
                     lr=settings["lr"] * scale(sched.last_epoch))
    sched.base_lrs = [group["initial_lr"] for group in opt.param_groups]
