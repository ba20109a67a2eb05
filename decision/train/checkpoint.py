"""A training run's checkpoint on disk (``OUT/checkpoint``: the model, ``trainer_state.pt``,
``train_config.json``) and what a resume reads back from it: the trainer state, and the saved
config compared with the current one (the log lines of an edited config).

Apart from the loop because the run's commands (recipe.py, the Xiangqi driver) look at the
checkpoint before any loop starts: to refuse a directory that holds a run, to finish a swap a
killed run left half done, to load the state to resume from. The model's own files are
``decision.model.checkpoint``'s; this module adds the trainer's and swaps the whole directory in.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from decision.errors import CheckpointError, TrainingError
from decision.files import fsync_dir, fsync_file
from decision.train.config import TrainConfig
from decision.train.trainable import TrainableModel

STATE_FILE = "trainer_state.pt"
CHECKPOINT_DIR = "checkpoint"
# a checkpoint is written beside the old one, then swapped in (save_checkpoint)
CHECKPOINT_TMP, CHECKPOINT_OLD = CHECKPOINT_DIR + ".tmp", CHECKPOINT_DIR + ".old"
# Settings that decide which rows step s trains on (rows: run.seed and data.*, bar
# data.val_groups; batches: optim.batch_size and run.length_window): changed on resume, they
# change the data from there on.
DATA_KEYS = ("run.seed", "optim.batch_size", "run.length_window")


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
