"""The training loop: steps, progress lines, periodic validation, checkpoint and exact resume.

Exact resume: batch ``i`` is a pure function of ``(seed, i)`` (rows come from a deterministic
source), and the masking generator, the global torch RNG, the optimiser and the scheduler are
saved with the weights, so a run stopped after step k and resumed produces the same losses as one
that never stopped. Batches and masks are drawn on the CPU and moved to ``run.device``, so a run
sees the same data and the same noise on any device.

The loop drives the other modules: the optimiser (optimizer.py), the loss of a step
(step_loss.py) and the checkpoint it writes and resumes from (checkpoint.py).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from decision.errors import DecisionInputError, TrainingError
from decision.train.batches import StepBatches
from decision.train.checkpoint import (
    CHECKPOINT_DIR,
    read_saved_config,
    resume_notes,
    save_checkpoint,
)
from decision.train.config import TrainConfig
from decision.train.optimizer import check_group_layout, load_optimizer, make_optimizer
from decision.train.rows import Row, collate
from decision.train.step_loss import batch_loss
from decision.train.trainable import TrainableModel


@dataclass
class LoopHooks:
    """The task-specific parts, injected so the loop itself stays generic and testable."""

    rows: Callable[[int], Row]  # global row index -> row (deterministic)
    pad_token_id: int
    mask_token_id: int
    validate: Callable[[TrainableModel, int], dict[str, Any]] | None = None
    log: Callable[[str], None] = field(default=lambda s: print(s, file=sys.stderr, flush=True))
    # The task's own config sections (the Xiangqi driver's ``xiangqi``: name -> JSON-ready
    # values), saved in train_config.json beside the TrainConfig's and compared on resume; a
    # change to any of their keys but ``not_data_keys`` ("xiangqi.val_positions") is a data
    # change (checkpoint.resume_notes).
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    not_data_keys: frozenset[str] = frozenset()


@dataclass
class LoopResult:
    step: int
    losses: list[float]  # loss of every step run in this call
    evals: list[dict[str, Any]]
    stopped_because: str
    elapsed_s: float
    signal: int | None = None  # SIGINT/SIGTERM received: the run was interrupted (checkpointed)


def format_eval(record: dict[str, Any]) -> str:
    """One progress line of a validation record (the full record goes to evals.jsonl)."""
    known = ("joint", "standalone", "majority", "groups_correct_joint")
    keys = [k for k in known if isinstance(record.get(k), float)] or [
        k for k, v in record.items() if k != "step" and isinstance(v, int | float)
    ]  # another task's record (e.g. the Xiangqi player's top1): its numbers as they are
    head = " ".join(
        f"{k} {record[k]:.3f}" if isinstance(record[k], float) else f"{k} {record[k]}"
        for k in keys
    )
    types = record.get("per_type", {})
    detail = " ".join(
        f"{qt}={v['joint']:.2f}/{v['majority']:.2f}" for qt, v in sorted(types.items())
    )
    tail = f" | joint/majority: {detail}" if detail else ""
    return f"eval step {record.get('step')}: {head}{tail}"


def resolve_device(name: str) -> torch.device:
    """``run.device`` as a torch device; ``auto`` is the first GPU when one is present."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DecisionInputError(
                f"run.device is {name!r} but torch sees no CUDA device; use 'cpu' or 'auto'",
                "run.device",
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise DecisionInputError(
                f"run.device is {name!r} but torch sees {torch.cuda.device_count()} GPU(s)",
                "run.device",
            )
    return device


def _install_stop_handlers(flag: list[int]) -> dict[int, Any]:
    """SIGTERM/SIGINT end the run after the current step, with a final checkpoint."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, lambda signum, frame: flag.append(signum))
    return previous


def _warn_if_longer_than_served(rows: Sequence[Row], model: TrainableModel, step: int,
                                log: Callable[[str], None]) -> bool:
    """Say once when a row needs more positions than the trained model will serve
    (``model.max_position_embeddings``, the engine's limit on a request's layout): it trains,
    but the service refuses every request that long. True once said."""
    served = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if served is None:  # a stand-in model without a config: nothing to compare
        return True
    longest = max(len(r.history_ids) + len(r.block_ids) for r in rows)
    if longest <= served:
        return False
    log(f"warning: a row of step {step + 1} needs {longest} positions, but the model serves at "
        f"most {served} (model.max_position_embeddings): the service will refuse requests that "
        "long; raise it in the config's [model] section to serve them")
    return True


def train_loop(
    model: TrainableModel,
    cfg: TrainConfig,
    hooks: LoopHooks,
    out_dir: Path,
    resume_state: dict[str, Any] | None = None,
    max_steps: int | None = None,
    max_minutes: float | None = None,
) -> LoopResult:
    """Run steps until ``max_steps`` (default cfg.run.max_steps) or the time budget.

    ``resume_state`` is what :func:`decision.train.checkpoint.load_trainer_state` returned for
    the checkpoint whose weights ``model`` already holds.
    """
    torch.set_num_threads(cfg.run.threads)
    device = resolve_device(cfg.run.device)
    model.to(device)  # before the optimiser exists, so its state lives beside the weights
    stop_step = cfg.run.max_steps if max_steps is None else max_steps
    minutes = cfg.run.max_minutes if max_minutes is None else max_minutes
    opt, sched = make_optimizer(model, cfg)
    gen = torch.Generator().manual_seed(cfg.run.seed)
    step, prior_s, evals = 0, 0.0, []
    ckpt = out_dir / CHECKPOINT_DIR
    if resume_state is None:
        torch.manual_seed(cfg.run.seed)
    else:
        check_group_layout(model, cfg, read_saved_config(ckpt / "train_config.json"), ckpt)
        load_optimizer(opt, sched, resume_state, cfg, ckpt)
        gen.set_state(resume_state["mask_generator"])
        torch.set_rng_state(resume_state["torch_rng"])
        step, prior_s = resume_state["step"], resume_state["elapsed_s"]
        evals = list(resume_state["evals"])
        hooks.log(f"resumed at step {step} ({prior_s / 60:.1f} min trained before)")
        for note in resume_notes(ckpt / "train_config.json", cfg, hooks.sections,
                                 hooks.not_data_keys):
            hooks.log(note)

    hooks.log(f"training on {device}" + (f", {cfg.run.threads} CPU threads"
                                         if device.type == "cpu" else ""))
    t0 = time.monotonic()
    last_ckpt = t0
    window_loss, window_tokens, window_n, window_t = 0.0, 0, 0, t0
    losses: list[float] = []
    batches = StepBatches(hooks.rows, cfg.optim.batch_size, cfg.run.length_window, cfg.run.seed)
    reason = "max_steps"
    model.train()

    def checkpoint() -> None:
        save_checkpoint(
            out_dir, model, opt, sched, gen, step, prior_s + time.monotonic() - t0, evals, cfg,
            hooks.sections,
        )

    warned_long = False
    stop_signal: list[int] = []
    previous = _install_stop_handlers(stop_signal)
    try:
        while step < stop_step:
            if stop_signal:
                reason = f"signal {stop_signal[0]}"
                hooks.log(f"{signal.Signals(stop_signal[0]).name} received: stopping at step "
                          f"{step}, with a checkpoint")
                break
            if minutes > 0 and time.monotonic() - t0 >= minutes * 60:
                reason = "time budget"
                break
            rows = batches.rows_for(step)
            if not warned_long:
                warned_long = _warn_if_longer_than_served(rows, model, step, hooks.log)
            batch = collate(rows, hooks.pad_token_id)
            loss = batch_loss(model, batch, cfg, hooks.mask_token_id, gen, device)
            if not torch.isfinite(loss):  # no update, no checkpoint: the last one stays
                raise TrainingError(
                    f"the training loss is {loss.item()} at step {step + 1}: the run diverged "
                    f"and stopped (optim.lr is {cfg.optim.lr}); the last checkpoint, if any, "
                    f"is kept"
                )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
            # an inf/NaN gradient under a finite loss: clipping makes it NaN, the update would
            # write NaN weights and the next checkpoint hold them (unloadable: no resume)
            if not torch.isfinite(norm):
                raise TrainingError(
                    f"the gradient norm is {norm.item()} at step {step + 1} (the loss is "
                    f"{loss.item():.4g}): the run diverged and stopped before the update "
                    f"(optim.lr is {cfg.optim.lr}); the last checkpoint, if any, is kept"
                )
            opt.step()
            sched.step()
            step += 1
            lv = float(loss.detach())
            losses.append(lv)
            window_loss += lv
            window_tokens += batch.n_tokens
            window_n += 1
            if step % cfg.run.log_every == 0:
                now = time.monotonic()
                hooks.log(
                    f"step {step} loss {window_loss / window_n:.4f} "
                    f"lr {sched.get_last_lr()[0]:.2e} "
                    f"tok/s {window_tokens / max(1e-9, now - window_t):.0f} "
                    f"elapsed {(prior_s + now - t0) / 60:.1f} min"
                )
                window_loss, window_tokens, window_n, window_t = 0.0, 0, 0, now
            if hooks.validate is not None and step % cfg.run.eval_every == 0:
                record = hooks.validate(model, step)
                model.train()
                record["step"] = step
                evals.append(record)
                hooks.log(format_eval(record))
                gain = record.get("gain_over_majority")
                if step >= cfg.run.early_stop_step and gain is not None and gain < cfg.run.min_gain:
                    reason = f"early stop: {gain:.3f} over the majority baseline at step {step}"
                    break
            if time.monotonic() - last_ckpt >= cfg.run.checkpoint_minutes * 60:
                checkpoint()
                last_ckpt = time.monotonic()
                hooks.log(f"checkpoint at step {step}")
        checkpoint()
    finally:  # also when a step raises: SIGINT/SIGTERM must not stay swallowed
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    elapsed = prior_s + time.monotonic() - t0
    hooks.log(f"stopped at step {step} ({reason}); {elapsed / 60:.1f} min in all")
    # a signal that came during the last step or checkpoint still asks the caller to stop
    return LoopResult(step, losses, evals, reason, elapsed,
                      signal=stop_signal[0] if stop_signal else None)
