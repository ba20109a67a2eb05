"""The training recipe end to end: tokenizer, model, data, validation, loop, bf16 export.

Run directory (``cfg.run.out_dir``): ``checkpoint/`` (a model directory ``decision.load_model``
reads, plus ``trainer_state.pt`` and ``train_config.json``), ``tokenizer.json`` and
``evals.jsonl`` (one line per validation). Taking and checking that directory is
:mod:`decision.train.run_dir`'s, the export :mod:`decision.train.export`'s.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from decision.errors import CheckpointError, DecisionInputError, TrainingError
from decision.tokenizer import MAX_QUESTIONS, special_ids, train_tokenizer
from decision.train.checkpoint import CHECKPOINT_DIR, load_trainer_state
from decision.train.config import TrainConfig, check_max_steps, check_minutes
from decision.train.data import (
    RowSource,
    ValidationSet,
    check_focus_qtypes,
    check_tokenizer_seeds,
    check_val_groups,
    tokenizer_corpus,
)
from decision.train.export import export_checkpoint
from decision.train.loop import LoopHooks, LoopResult, resolve_device, train_loop
from decision.train.run_dir import (
    EVALS_NAME,
    check_out_dir,
    hold_run_dir,
    log,
    resume_point,
    trim_evals,
)


@dataclass
class TrainResult:
    checkpoint: Path
    loop: LoopResult


def build_tokenizer(cfg: TrainConfig) -> Tokenizer:
    """Byte-level BPE (decision.tokenizer) trained on generated task text of its own seeds."""
    texts = tokenizer_corpus(cfg)
    return train_tokenizer(texts, cfg.tokenizer.vocab_size)


def build_model(cfg: TrainConfig, tokenizer: Tokenizer) -> Any:
    """A fresh ``DecisionModel`` of the configured size over ``tokenizer``'s vocabulary."""
    from decision.model import DecisionConfig, DecisionModel

    ids = special_ids(tokenizer)
    fields = dict(cfg.model.fields)
    fields.update(
        vocab_size=tokenizer.get_vocab_size(with_added_tokens=True),
        mask_token_id=ids.mask,
        pad_token_id=ids.pad,
        eos_token_id=ids.eos,
    )
    torch.manual_seed(cfg.run.seed)
    model = DecisionModel(DecisionConfig(**fields))
    model.tokenizer = tokenizer
    return model


def count_parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def load_trainable(path: str | Path, purpose: str) -> Any:
    """A model directory's weights in float32, with its tokenizer, to train on (``purpose``:
    "resume with" or "train with", for the error when the tokenizer is missing)."""
    from decision.model import load_model

    model = load_model(path, dtype=torch.float32)  # refuses a tokenizer larger than the model
    if model.tokenizer is None:
        raise CheckpointError(f"{path} has no tokenizer.json to {purpose}")
    return model


# [model] fields that build_model takes from the tokenizer, not from the config file
TOKENIZER_FIELDS = frozenset({"vocab_size", "mask_token_id", "pad_token_id", "eos_token_id"})


def check_model_matches(model: Any, cfg: TrainConfig, source: str | Path) -> None:
    """Refuse a loaded model (``--init-from``, ``--resume``) of another shape than the config's
    [model] section: the run would train the loaded shape while its ``train_config.json`` and
    its logs claimed the configured one."""
    differ = [
        f"{key} {value!r} in the config, {getattr(model.config, key)!r} in the model"
        for key, value in sorted(cfg.model.fields.items())
        if key not in TOKENIZER_FIELDS and getattr(model.config, key) != value
    ]
    if differ:
        raise DecisionInputError(
            f"{source} does not match config section [model]: {'; '.join(differ)}", "model"
        )




def check_num_segments(cfg: TrainConfig, questions: int, model: Any = None,
                       source: str | Path | None = None) -> None:
    """Refuse a ``model.num_segments`` that cannot number the rows of up to ``questions``
    questions (segment 0 the document, one per question): such a run failed at the first row
    that needs more, after it had written its tokenizer (and maybe checkpoints). With ``model``
    (loaded from ``source``: ``--init-from``, ``--resume``) its own count is checked, which a
    config that does not set the field does not fix."""
    from decision.model.config import DecisionConfig

    have = cfg.model.fields.get("num_segments", DecisionConfig.num_segments)  # or the default
    where = "model.num_segments is"
    if model is not None:
        have, where = model.config.num_segments, f"{source} has num_segments"
    if have < questions + 1:
        raise DecisionInputError(
            f"{where} {have}: rows of up to {questions} questions need "
            f"{questions + 1} (the document and one segment a question)", "model.num_segments",
        )




def begin_run(
    cfg: TrainConfig, resume: bool, max_minutes: float | None, max_steps: int | None,
) -> Path | None:
    """The checks of a run before anything loads or is written (the budget, the step to stop
    at, the device, :func:`resume_point`), with torch's CPU threads set: the checkpoint to
    resume from, or None for a fresh run in ``cfg.run.out_dir`` (also used by
    ``python -m apps.xiangqi.train_player``)."""
    check_minutes(max_minutes)
    check_max_steps(max_steps)
    check_out_dir(cfg.run.out_dir)
    resolve_device(cfg.run.device)  # a GPU that is not there: refused before any file
    torch.set_num_threads(cfg.run.threads)
    return resume_point(Path(cfg.run.out_dir), resume)


def start_model(
    cfg: TrainConfig,
    out: Path,
    resume_from: Path | None,
    init_from: str | Path | None,
    new_tokenizer: Callable[[], Tokenizer],
    questions: int = 1,
) -> tuple[Any, dict[str, Any] | None]:
    """The model to train (its tokenizer as ``model.tokenizer``) and the trainer state to resume
    (None for a fresh run): the checkpoint ``resume_from`` (:func:`resume_point`), else the
    weights and tokenizer of ``init_from``, else a new model over ``new_tokenizer()``. A fresh
    run writes its tokenizer to ``out/tokenizer.json``. Either way the validation records after
    the step it starts from are dropped (``trim_evals``): a fresh run here is a ``--resume``
    without a checkpoint (else ``check_no_run`` refused the directory). A loaded model must
    number the segments of rows of up to ``questions`` questions (:func:`check_num_segments`)."""
    if resume_from is not None:
        model = load_trainable(resume_from, "resume with")
        check_model_matches(model, cfg, resume_from)
        check_num_segments(cfg, questions, model, resume_from)
        state = load_trainer_state(resume_from)
        trim_evals(out / EVALS_NAME, state["step"])
        return model, state
    if init_from is not None:
        model = load_trainable(init_from, "train with")
        check_model_matches(model, cfg, init_from)
        check_num_segments(cfg, questions, model, init_from)
        log(f"initialised from the weights of {init_from}")
    else:
        model = build_model(cfg, new_tokenizer())
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # what check_out_dir cannot tell (a read-only or virtual file system)
        raise DecisionInputError(f"cannot make the run directory {out}: {exc.strerror or exc}",
                                 "run.out_dir") from None
    save_tokenizer(model.tokenizer, out / "tokenizer.json")
    trim_evals(out / EVALS_NAME, 0)
    return model, None


def save_tokenizer(tokenizer: Tokenizer, path: Path) -> None:
    """Write a fresh run's ``tokenizer.json`` (its first file), or a one-line ``TrainingError``
    when it cannot be written (a full disk, an I/O error), the torn file removed: tokenizers
    raises a bare ``Exception("No space left on device (os error 28)")``, which ended the run
    with a traceback."""
    try:
        tokenizer.save(str(path))
    except Exception as exc:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else \
            re.sub(r" \(os error \d+\)$", "", str(exc))
        raise TrainingError(
            f"cannot write the run's tokenizer {path}: {reason}; nothing was trained: once the "
            "disk is fixed (space freed), run the same command again"
        ) from exc




def train(
    cfg: TrainConfig,
    resume: bool = False,
    max_minutes: float | None = None,
    max_steps: int | None = None,
    init_from: str | Path | None = None,
    export: str | Path | None = None,
) -> TrainResult:
    """Train (or continue) the run in ``cfg.run.out_dir``; returns its checkpoint directory.

    ``init_from`` starts a fresh run (new optimiser and schedule) from the weights and tokenizer
    of a model directory, e.g. the shipped ``models/default``: the way to keep training across
    sessions when the run directory (git-ignored) is gone. ``resume`` takes precedence when the
    run directory has a checkpoint (one without trainer state is an error); without ``resume``,
    a directory that already holds a run is refused.

    ``export``: once the run has ended (not when a signal stopped it), its checkpoint is
    exported there (:func:`export_checkpoint`) with the run directory still held, so that a run
    started into the directory meanwhile cannot swap the checkpoint under the export.
    """
    if cfg.data.task != "contracts":
        raise DecisionInputError(
            f"data.task is {cfg.data.task!r}: this recipe trains 'contracts' (the Xiangqi player "
            "trains with python -m apps.xiangqi.train_player)", "data.task",
        )
    check_focus_qtypes(cfg)  # the config's task-specific checks, before any file is written
    check_val_groups(cfg)
    check_num_segments(cfg, MAX_QUESTIONS)  # a contract group asks up to MAX_QUESTIONS
    with hold_run_dir(cfg.run.out_dir):  # until the run and its export end: one run a directory
        result = _train(cfg, resume, max_minutes, max_steps, init_from)
        if export is not None and result.loop.signal is None:
            export_checkpoint(result.checkpoint, export)
        return result


def _train(cfg: TrainConfig, resume: bool, max_minutes: float | None, max_steps: int | None,
           init_from: str | Path | None) -> TrainResult:
    """:func:`train` with its run directory held."""
    resume_from = begin_run(cfg, resume, max_minutes, max_steps)
    if resume_from is None and init_from is None:  # a tokenizer is trained: on TRAIN groups
        check_tokenizer_seeds(cfg)
    out = Path(cfg.run.out_dir)

    def new_tokenizer() -> Tokenizer:
        t0 = time.monotonic()
        tokenizer = build_tokenizer(cfg)
        log(f"tokenizer: {tokenizer.get_vocab_size()} tokens in {time.monotonic() - t0:.1f} s")
        return tokenizer

    model, state = start_model(cfg, out, resume_from, init_from, new_tokenizer, MAX_QUESTIONS)
    evals_path = out / EVALS_NAME
    tokenizer = model.tokenizer
    log(f"model: {count_parameters(model) / 1e6:.2f}M parameters")
    ids = special_ids(tokenizer)
    source = RowSource(cfg, tokenizer)
    val = ValidationSet(cfg, tokenizer)

    def validate(m: Any, step: int) -> dict[str, Any]:
        t0 = time.monotonic()
        record = val.evaluate(m)
        record["eval_s"] = round(time.monotonic() - t0, 1)
        with evals_path.open("a") as f:
            f.write(json.dumps({"step": step, **record}) + "\n")
        return record

    hooks = LoopHooks(rows=source.row, pad_token_id=ids.pad, mask_token_id=ids.mask,
                      validate=validate, log=log)
    result = train_loop(model, cfg, hooks, out, resume_state=state, max_steps=max_steps,
                        max_minutes=max_minutes)
    return TrainResult(out / CHECKPOINT_DIR, result)
