"""The training loop: steps, progress lines, periodic validation, checkpoint and exact resume.

Exact resume: batch ``i`` is a pure function of ``(seed, i)`` (rows come from a deterministic
source), and the masking generator, the global torch RNG, the optimiser and the scheduler are
saved with the weights, so a run stopped after step k and resumed produces the same losses as one
that never stopped. Batches and masks are drawn on the CPU and moved to ``run.device``, so a run
sees the same data and the same noise on any device.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from decision.errors import CheckpointError, DecisionInputError, TrainingError
from decision.files import fsync_dir, fsync_file
from decision.joint.scoring import Denoiser, SlotOptions
from decision.train.batches import StepBatches
from decision.train.config import TrainConfig
from decision.train.masking import apply_mask, diffusion_loss, sample_t, slot_rates
from decision.train.option_loss import (
    BlockDenoiser,
    option_loss,
    option_set_loss,
    soft_option_loss,
)
from decision.train.rows import Batch, Row, collate

STATE_FILE = "trainer_state.pt"
CHECKPOINT_DIR = "checkpoint"
# a checkpoint is written beside the old one, then swapped in (save_checkpoint)
CHECKPOINT_TMP, CHECKPOINT_OLD = CHECKPOINT_DIR + ".tmp", CHECKPOINT_DIR + ".old"
# Settings that decide which rows step s trains on (rows: run.seed and data.*, bar
# data.val_groups; batches: optim.batch_size and run.length_window): changed on resume, they
# change the data from there on.
DATA_KEYS = ("run.seed", "optim.batch_size", "run.length_window")


class TrainableModel(Protocol):
    """What the loop needs from the backbone (``decision.model.DecisionModel`` satisfies it)."""

    def __call__(
        self,
        history_ids: torch.Tensor,
        block_ids: torch.Tensor,
        history_mask: torch.Tensor | None = None,
        block_mask: torch.Tensor | None = None,
        history_segments: torch.Tensor | None = None,
        block_segments: torch.Tensor | None = None,
    ) -> torch.Tensor: ...

    def parameters(self) -> Any: ...

    def named_parameters(self) -> Any: ...

    def train(self, mode: bool = True) -> Any: ...

    def state_dict(self) -> dict[str, torch.Tensor]: ...

    def save(self, path: str | Path) -> None: ...

    def to(self, device: torch.device) -> Any: ...


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
    # change (resume_notes).
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


def batch_loss(
    model: TrainableModel,
    batch: Batch,
    cfg: TrainConfig,
    mask_token_id: int,
    gen: torch.Generator,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Noise the batch's blocks (masking.py) and return the weighted diffusion loss.

    ``batch`` lives on the CPU, where ``gen`` draws the noise; the model's inputs go to ``device``
    (default: the CPU).

    With ``run.denoise_draws = K > 1`` and a model that has ``prefill``/``denoise``, the history is
    encoded once and the block is denoised under K independent noise draws (t and masks), the
    loss being their mean: K Monte-Carlo samples of the same objective for about the cost of one
    history pass plus K block passes (the block is ~10x shorter than the history), i.e. several
    times more supervised tokens per second. Gradients flow into the shared cache.

    With ``data.option_loss_weight = w > 0``, rows that carry their options (``Row.options``)
    add ``w`` times the option loss (option_loss.py), its block forwards on the same cache;
    with ``data.option_set_loss_weight = w > 0``, rows that also carry an option set
    (``Row.option_set``) add ``w`` times the option-set loss, likewise; with
    ``data.soft_option_loss_weight = w > 0``, rows that carry soft targets
    (``Row.soft_targets``) add ``w`` times the soft option loss, likewise.
    """
    draws = cfg.run.denoise_draws
    device = device or torch.device("cpu")
    ctx = (
        torch.autocast(device.type, dtype=torch.bfloat16) if cfg.run.autocast_bf16
        else nullcontext()
    )
    scored = cfg.data.option_loss_weight > 0 and bool(batch.scored_slots)
    sets = batch.scored_sets or tuple(() for _ in batch.scored_slots)
    with_sets = [(slot, members) for slot, members in zip(batch.scored_slots, sets, strict=True)
                 if members] if cfg.data.option_set_loss_weight > 0 else []
    soft = batch.scored_soft or tuple(() for _ in batch.scored_slots)
    with_soft = [(slot, target) for slot, target in zip(batch.scored_slots, soft, strict=True)
                 if target] if cfg.data.soft_option_loss_weight > 0 else []
    shared = (draws > 1 or scored or bool(with_sets) or bool(with_soft)) \
        and hasattr(model, "prefill") \
        and hasattr(model, "denoise")
    on = batch.to(device)
    total = torch.zeros((), device=device)
    with ctx:
        cache = (
            model.prefill(on.history_ids, on.history_mask, on.history_segments)  # type: ignore[attr-defined]
            if shared
            else None
        )
        for _ in range(draws if shared else 1):
            t = sample_t(batch.block_ids.shape[0], cfg.data.t_min, gen)
            rates = slot_rates(
                batch.roles, t, gen, cfg.data.p_extraction_visible, cfg.data.extraction_rate_scale
            )
            mb = apply_mask(batch.block_ids, batch.slot_of, rates, mask_token_id, gen).to(device)
            if cache is not None:
                logits = model.denoise(  # type: ignore[attr-defined]
                    mb.noised, cache, on.block_mask, on.block_segments
                )
            else:
                logits = model(
                    on.history_ids,
                    mb.noised,
                    history_mask=on.history_mask,
                    block_mask=on.block_mask,
                    history_segments=on.history_segments,
                    block_segments=on.block_segments,
                )
            loss = diffusion_loss(logits, on.block_ids, mb, cfg.data.loss_weighting)
            total = total + loss
        total = total / (draws if shared else 1)
        if scored or with_sets or with_soft:
            read = only_scored_slots(batch.block_ids, batch.slot_of, batch.scored_slots,
                                     mask_token_id).to(device)
        if scored:
            total = total + cfg.data.option_loss_weight * option_loss(
                _block_denoiser(model, on, cache), read, batch.scored_slots,
                mask_token_id, each_order=cfg.data.option_loss_each_order,
            )
        if with_sets:
            total = total + cfg.data.option_set_loss_weight * option_set_loss(
                _row_denoiser(model, on, cache), read, [slot for slot, _ in with_sets],
                [members for _, members in with_sets], mask_token_id,
            )
        if with_soft:
            total = total + cfg.data.soft_option_loss_weight * soft_option_loss(
                _row_denoiser(model, on, cache), read, [slot for slot, _ in with_soft],
                [target for _, target in with_soft], mask_token_id,
            )
    return total


def only_scored_slots(block_ids: torch.Tensor, slot_of: torch.Tensor,
                      slots: Sequence[SlotOptions], mask_token_id: int) -> torch.Tensor:
    """The blocks the option losses read: in each scored row, every answer slot but the scored
    one masked, as a pass that asks only that question would see it (a row's other answers,
    e.g. an auxiliary question's, must not give the scored choice away)."""
    if slot_of.numel() == 0 or int(slot_of.max()) < 1:  # one slot a row: nothing to hide
        return block_ids
    read = block_ids.clone()
    for slot in slots:
        slots_of_row = slot_of[slot.row]
        own = slots_of_row[slot.start]
        other = (slots_of_row >= 0) & (slots_of_row != own)
        read[slot.row, other] = mask_token_id
    return read


def _row_denoiser(model: TrainableModel, on: Batch, cache: Any) -> Denoiser:
    """(block ids, the batch row of each) -> logits: rows of ``on`` repeated as needed, on the
    shared history cache when there is one."""
    def denoise(ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        mask = on.block_mask.index_select(0, rows)
        segments = on.block_segments.index_select(0, rows)
        if cache is not None:
            return model.denoise(ids, cache.index_select(rows), mask, segments)  # type: ignore[attr-defined]
        return model(on.history_ids.index_select(0, rows), ids,
                     history_mask=on.history_mask.index_select(0, rows), block_mask=mask,
                     history_segments=on.history_segments.index_select(0, rows),
                     block_segments=segments)
    return denoise


def _block_denoiser(model: TrainableModel, on: Batch, cache: Any) -> BlockDenoiser:
    """Block ids -> logits for ``on``'s rows: on the shared history cache when there is one."""
    def denoise(ids: torch.Tensor) -> torch.Tensor:
        if cache is not None:
            return model.denoise(ids, cache, on.block_mask, on.block_segments)  # type: ignore[attr-defined]
        return model(on.history_ids, ids, history_mask=on.history_mask,
                     block_mask=on.block_mask, history_segments=on.history_segments,
                     block_segments=on.block_segments)
    return denoise


def save_checkpoint(
    out_dir: Path,
    model: TrainableModel,
    opt: torch.optim.Optimizer,
    sched: torch.optim.lr_scheduler.LambdaLR,
    gen: torch.Generator,
    step: int,
    elapsed_s: float,
    evals: list[dict[str, Any]],
    cfg: TrainConfig,
    sections: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """Write ``out_dir/checkpoint`` atomically (write a temp dir, then rename over the old one);
    its train_config.json holds ``cfg`` and the task's own ``sections`` (LoopHooks.sections)."""
    final = out_dir / CHECKPOINT_DIR
    tmp = out_dir / CHECKPOINT_TMP
    writing = tmp  # the model's files, then each file of ours: named when a write fails
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        model.save(tmp)
        writing = tmp / STATE_FILE
        # through a Python file: torch.save given a path, onto a full disk, raises "unexpected
        # pos N vs M" without errno or file name
        with writing.open("wb") as handle:
            torch.save(
                {
                    "step": step,
                    "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict(),
                    "mask_generator": gen.get_state(),
                    "torch_rng": torch.get_rng_state(),
                    "elapsed_s": elapsed_s,
                    "evals": evals,
                },
                handle,
            )
        writing = tmp / "train_config.json"
        writing.write_text(json.dumps(saved_config(cfg, sections), indent=2))
        writing = tmp
        _fsync_dir_files(tmp)  # on disk before the rename publishes it (a crash keeps whole files)
    except Exception as exc:  # a full disk, an I/O error: the last checkpoint stays as it was
        shutil.rmtree(tmp, ignore_errors=True)  # nothing half-written left, holding the space
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        kept = (f"the last complete checkpoint {final} is kept" if final.is_dir()
                else "the run has no checkpoint yet")
        raise TrainingError(
            f"cannot write the checkpoint of step {step}: {writing}: {reason}; {kept}; the "
            "run stopped: once the disk is fixed (space freed), continue with --resume"
        ) from exc
    old = out_dir / CHECKPOINT_OLD
    if final.exists():
        if old.exists():
            shutil.rmtree(old)
        os.replace(final, old)
    os.replace(tmp, final)  # a kill just before this leaves only .old/.tmp: recover_checkpoint
    fsync_dir(out_dir)
    if old.exists():
        shutil.rmtree(old)
    return final


def _fsync_dir_files(directory: Path) -> None:
    """Flush every file of ``directory`` and the directory itself to disk."""
    for path in directory.iterdir():
        if path.is_file():
            fsync_file(path)
    fsync_dir(directory)


def recover_checkpoint(out_dir: Path) -> Path:
    """``out_dir/checkpoint``, after finishing a swap that :func:`save_checkpoint` was killed in.

    The swap renames ``checkpoint`` to ``checkpoint.old``, then the complete ``checkpoint.tmp``
    to ``checkpoint``; a run killed between the two renames leaves no ``checkpoint``, and a
    ``--resume`` would then silently start a fresh run over the directory. Here the newer
    ``checkpoint.tmp`` (complete: it is renamed only once fully written) takes its place, or,
    should it lack its last-written file, ``checkpoint.old``.
    """
    final = out_dir / CHECKPOINT_DIR
    old = out_dir / CHECKPOINT_OLD
    tmp = out_dir / CHECKPOINT_TMP
    if not final.exists() and old.is_dir():
        complete = (tmp / STATE_FILE).is_file() and (tmp / "train_config.json").is_file()
        os.replace(tmp if complete else old, final)
    return final


def saved_config(cfg: TrainConfig, sections: dict[str, dict[str, Any]] | None = None
                 ) -> dict[str, Any]:
    """What train_config.json holds: ``cfg``'s sections, then the task's own ``sections``."""
    out = cfg.to_dict()
    clash = set(out) & set(sections or {})
    if clash:
        raise ValueError(f"task config sections {sorted(clash)} clash with TrainConfig's")
    return {**out, **(sections or {})}


def read_saved_config(saved_path: Path) -> dict[str, Any] | None:
    """A checkpoint's train_config.json, or None when it is missing (checkpoints older than
    it) or not a JSON object (edited by hand?): nothing to compare with."""
    try:
        saved = json.loads(saved_path.read_text())
    except (OSError, ValueError):
        return None
    return saved if isinstance(saved, dict) else None


def config_changes(saved_path: Path, cfg: TrainConfig,
                   sections: dict[str, dict[str, Any]] | None = None
                   ) -> dict[str, tuple[Any, Any]]:
    """``{key: (saved, now)}`` for each setting that differs from the checkpoint's saved config
    (``'(unset)'`` on the side that lacks the key), keys sorted: resuming with an edited config
    (a re-aimed schedule, another batch size) is allowed, but the log says so
    (:func:`resume_notes`) instead of silently mixing two recipes. The task's ``sections`` are
    compared too, bar one the saved file lacks whole (saved before it was kept)."""
    saved = read_saved_config(saved_path)
    if saved is None:
        return {}
    sections = {name: values for name, values in (sections or {}).items() if name in saved}

    def flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in d.items():
            if isinstance(value, dict):
                out.update(flat(value, f"{prefix}{key}."))
            else:
                out[f"{prefix}{key}"] = value
        return out

    # through JSON as the saved file went, so tuples compare equal to the lists read back
    before, now = flat(saved), flat(json.loads(json.dumps(saved_config(cfg, sections))))
    return {
        key: (before.get(key, "(unset)"), now.get(key, "(unset)"))
        for key in sorted(before.keys() | now.keys())
        if before.get(key) != now.get(key)
    }


def resume_notes(saved_path: Path, cfg: TrainConfig,
                 sections: dict[str, dict[str, Any]] | None = None,
                 not_data_keys: frozenset[str] = frozenset()) -> list[str]:
    """The log lines of a run resumed with a config that differs from its checkpoint's
    (``saved_path``, its train_config.json): each change as ``key saved -> now``, then, when a
    change touches which rows the steps take (``DATA_KEYS``, ``data.*`` bar ``data.val_groups``,
    the task's ``sections`` bar ``not_data_keys``), the keys that do; no line for an unchanged
    config. A task section the saved file lacks gets a line saying its changes are unknown."""
    saved = read_saved_config(saved_path)
    notes = [f"the checkpoint's train_config.json has no [{name}] section (saved before it was "
             "kept): changes to it since are not known"
             for name in sections or {} if saved is not None and name not in saved]
    changed = config_changes(saved_path, cfg, sections)
    if not changed:
        return notes
    notes.append("the config differs from the checkpoint's (the run goes on with the new "
                 "values): "
                 + "; ".join(f"{key} {was!r} -> {now!r}" for key, (was, now) in changed.items()))
    task = tuple(f"{name}." for name in sections or {})
    data = [k for k in changed if k in DATA_KEYS
            or (k.startswith("data.") and k != "data.val_groups")
            or (k.startswith(task) and k not in not_data_keys)]
    if data:
        notes.append(f"{', '.join(data)} changed: the rows of the steps from here on are not "
                     "those the checkpoint's config would have drawn (the masking noise goes on "
                     "from the checkpoint)")
    kept = [k for k in changed if k.startswith("tokenizer.")]
    if kept:  # the line above says "the run goes on with the new values": not these
        notes.append(f"{', '.join(kept)} changed: no effect, a resumed run keeps the "
                     "checkpoint's tokenizer (only a fresh run trains one)")
    return notes


def load_trainer_state(ckpt: Path) -> dict[str, Any]:
    path = ckpt / STATE_FILE
    if not path.is_file():
        raise CheckpointError(f"no trainer state to resume from: {path}")
    try:
        return torch.load(path, weights_only=False, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - any unreadable file is a checkpoint error
        raise CheckpointError(f"cannot read trainer state {path}: {exc}") from exc


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

    ``resume_state`` is what :func:`load_trainer_state` returned for the checkpoint whose weights
    ``model`` already holds.
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
