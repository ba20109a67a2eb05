"""Training configuration: one dataclass tree, read from a JSON or TOML file.

Why a file: the shipped model's recipe lives in the repository (configs/default.json), so anyone can
rerun it bit for bit; the CLI only overrides the budget and the resume flag.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from decision.errors import DecisionInputError
from decision.train.masking import LOSS_WEIGHTINGS

TASKS = ("contracts", "xiangqi")  # data.task: which driver's rows (decision train: contracts)
MAX_VOCAB = 1 << 20  # tokenizer.vocab_size: the BPE trainer allocates for the size asked
# Upper bounds of the sizes and counts: each far above any real run (a GPU run's batches, a run
# of years), so that a value past one is a typo. Such values were accepted when the config was
# read and failed late: torch.set_num_threads(2**31) raised an OverflowError after the tokenizer
# was written, a batch of 10**30 rows, 10**30 noise draws or tokenizer groups never finished,
# a [model] width of 2**62 overflowed torch's storage size and 10**30 layers hung the config read.
MAX_THREADS = 1024  # run.threads: above the 768 logical CPUs of the largest 2-socket servers
MAX_STEPS = 10**12  # step counts: 30 years at 1 ms a step; step * MAX_ROWS fits int64
MAX_ROWS = 1 << 20  # optim.batch_size * run.length_window: the rows built and held at once
MAX_DRAWS = 1024  # run.denoise_draws: each draw keeps its block activations until backward
MAX_BLOCK = 1 << 20  # data.doc_block_min/max: tokens; a contract document has a few hundred
MAX_CORPUS = 10_000_000  # tokenizer.corpus_groups: the TRAIN split's seeds, ~11 GB of text
# [model] sizes (hidden_size, heads, experts, ...): real models' largest is ~53,000 (an MLP's
# width); two sizes at this bound already make one matrix of 4 TB
MAX_WIDTH = 1 << 20
MAX_POSITIONS = (1 << 31) - 1  # model.max_position_embeddings: positions an int32 index reaches


@dataclass
class ModelSection:
    """Backbone size: keyword arguments of ``DecisionConfig`` (Qwen3.5-MoE field names)."""

    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class TokenizerSection:
    """Byte-level BPE trained on generated task text (DESIGN.md section 6)."""

    vocab_size: int = 1536
    corpus_groups: int = 3000  # generated groups whose text trains the tokenizer
    seed: int = 7_000_000  # corpus seeds (inside TRAIN's range: only the tokenizer reads that text)


@dataclass
class DataSection:
    """What each training row is made of and how often.

    Rows are one of: a joint group (2..8 questions, all slots in one block), a standalone item (one
    question of a group, same layout), or a document-denoising row (block diffusion on the text).
    """

    task: str = "contracts"
    p_joint: float = 0.5
    p_standalone: float = 0.25
    p_document: float = 0.25
    doc_block_min: int = 32  # document-denoising block length range (tokens)
    doc_block_max: int = 64
    # Curriculum: level-1 groups only until `level1_steps`, then the share of level 1 falls
    # linearly to `level1_final_share` over `curriculum_ramp_steps`.
    level1_steps: int = 1500
    curriculum_ramp_steps: int = 1500
    level1_final_share: float = 0.2
    max_level: int = 2
    # Dependency-aware masking for joint groups (see masking.py).
    p_extraction_visible: float = 0.35
    extraction_rate_scale: float = 0.5
    t_min: float = 0.02
    # How masked tokens are weighted (masking.diffusion_loss): "row_mean" (each row's mean
    # cross-entropy over its masked tokens, rows weighted equally) or "elbo" (MDLM's 1/rate).
    loss_weighting: str = "row_mean"
    # Weight of the option loss (option_loss.py: -log of the option scorer's probability of the
    # gold option) added to the diffusion loss, on rows that carry their options; 0 = off.
    option_loss_weight: float = 0.0
    # True: the option loss is the mean over the scoring orders of -log each order's own
    # probability of the gold, not -log of their mixture (option_loss.option_loss).
    option_loss_each_order: bool = False
    # Weight of the option-set loss (option_loss.py: -log of the option scorer's probability
    # that the answer is in the row's set of acceptable options, Row.option_set), on rows
    # that carry a set; 0 = off.
    option_set_loss_weight: float = 0.0
    # Weight of the soft option loss (option_loss.py: the cross-entropy of the option
    # scorer's probabilities against the row's soft targets, Row.soft_targets, e.g. a
    # teacher's; distillation), on rows that carry them; 0 = off.
    soft_option_loss_weight: float = 0.0
    val_groups: int = 64  # held-out groups scored every eval_every steps
    # Focus: a share `p_focus` of rows are standalone items of a question whose type is in
    # `focus_qtypes` (the types a model still gets wrong), taken from the first of the next
    # FOCUS_SCAN groups that has one. Off by default.
    focus_qtypes: tuple[str, ...] = ()
    p_focus: float = 0.0
    # Each integer question of a row gets, with this probability, other bounds that still hold
    # its gold answer (``reshaped_integer``): slots of every width, so that what the model learns
    # to read does not depend on one width per question type. Off by default.
    p_reshape_integer: float = 0.0
    # Copy rows: a share of rows ask for the number that follows a short cue of the document
    # (``copy_question``), to teach reading any stated number, not one type's usual values.
    p_copy: float = 0.0
    # Copy rows only of values unique in the document, weighted by digit count (copy_question).
    copy_hard: bool = False
    # Compare rows (compare_question): "is the number after one cue at least the number after
    # another?", half of them as a joint row with the two copy questions it derives from.
    p_compare: float = 0.0
    # Of the focus rows, this share are joint rows of a derived focus question whose answer is
    # decided (not "not stated") together with the questions of its group it derives from
    # (``DEPENDS_ON``, transitively), inputs first: the rule applied to the model's own inputs.
    p_focus_joint: float = 0.0
    # Days-between rows (days_between_question): "How many days after <date> is <date>?" for two
    # dates of the document at most 60 days apart: the subtraction behind the days taken.
    p_days_between: float = 0.0
    # Event-day rows (event_day_questions): a days-taken question of an NDA event joint with the
    # two questions it derives from, the day of the month of each of the event's dates (half of
    # them; the other half one of those day questions alone).
    p_event_days: float = 0.0


@dataclass
class OptimSection:
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 200
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.98)
    grad_clip: float = 1.0
    batch_size: int = 32
    # parameters whose name contains one of these strings train at lr * scaled_lr_factor
    # (e.g. the new experts of an upcycled model: "mlp.experts.", "mlp.gate.")
    scaled_lr_params: tuple[str, ...] = ()
    scaled_lr_factor: float = 1.0


@dataclass
class RunSection:
    out_dir: str = "runs/default"
    seed: int = 0
    max_steps: int = 20_000  # also the length of the cosine schedule
    max_minutes: float = 0.0  # 0 = no time budget
    log_every: int = 25
    eval_every: int = 500
    checkpoint_minutes: float = 4.0
    threads: int = 2
    # where the model trains: "cpu", "cuda", "cuda:N", or "auto" (the first GPU when there is one)
    device: str = "cpu"
    autocast_bf16: bool = False  # bf16 autocast on the device; no faster on the CPUs measured
    denoise_draws: int = 1  # noise draws per history encoding (step_loss.batch_loss)
    # Rows of this many consecutive batches are sorted by history length and re-cut, so a batch
    # pads less (batches.StepBatches); 1 keeps every batch in plain row order.
    length_window: int = 1
    # Stop early when, after this many steps, validation accuracy is not above the majority
    # baseline by at least `min_gain` (a run that learns nothing should not burn the budget).
    early_stop_step: int = 3000
    min_gain: float = 0.02


@dataclass
class TrainConfig:
    model: ModelSection = field(default_factory=ModelSection)
    tokenizer: TokenizerSection = field(default_factory=TokenizerSection)
    data: DataSection = field(default_factory=DataSection)
    optim: OptimSection = field(default_factory=OptimSection)
    run: RunSection = field(default_factory=RunSection)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (saved next to every checkpoint so a run documents itself)."""
        out = dataclasses.asdict(self)
        out["model"] = dict(self.model.fields)
        return out


_SECTIONS: dict[str, type] = {
    "tokenizer": TokenizerSection,
    "data": DataSection,
    "optim": OptimSection,
    "run": RunSection,
}


def build_section(cls: type, raw: Any, name: str) -> Any:
    """A dataclass section from a JSON/TOML table, checked as the training config's sections are
    (unknown keys and values of another type than the default's raise DecisionInputError)."""
    if not isinstance(raw, dict):
        raise DecisionInputError(f"config section [{name}] must be a table/object", name)
    known = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            raise DecisionInputError(
                f"unknown key {key!r} in config section [{name}]; known: {sorted(known)}",
                f"{name}.{key}",
            )
        default = getattr(cls(), key)
        if isinstance(default, tuple):
            if not isinstance(value, list | tuple):  # tuple("abc") would be ('a', 'b', 'c')
                raise DecisionInputError(
                    f"{name}.{key} must be a list, got {type(value).__name__}", f"{name}.{key}"
                )
            value = tuple(_as_float(v) if default and isinstance(default[0], float) else v
                          for v in value)
            kinds = {type(v) for v in default}
            if kinds and any(type(v) not in kinds for v in value):
                raise DecisionInputError(
                    f"{name}.{key} must be a list of {type(default[0]).__name__}",
                    f"{name}.{key}",
                )
        elif isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not type(default):
            raise DecisionInputError(
                f"{name}.{key} must be {type(default).__name__}, got {type(value).__name__}",
                f"{name}.{key}",
            )
        kwargs[key] = value
    return cls(**kwargs)


def _as_float(value: Any) -> Any:
    """An int (not a bool) as a float; anything else as it is."""
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON/TOML value has the type of a ``DecisionConfig`` field: an int is an int
    and no bool (``True`` is an int to Python), a float may be an int, a list is a list of
    its items' type. Sizes of another type (``32.0``) crashed deep in torch with a TypeError."""
    if hint is Any:
        return True
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in typing.get_args(hint))
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(_fits(v, item) for v in value)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _type_name(hint: Any) -> str:
    """A field type as the errors name it: ``int``, ``list of str``, ``float or null``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(arg) for arg in typing.get_args(hint))
    if typing.get_origin(hint) is list:
        return "a list of " + " or ".join(_type_name(a) for a in typing.get_args(hint))
    return "null" if hint is type(None) else getattr(hint, "__name__", str(hint))


def _check_model(fields: dict[str, Any]) -> None:
    """The [model] section: ``DecisionConfig`` field names, with values it accepts."""
    from decision.errors import CheckpointError
    from decision.model.config import DecisionConfig

    hints = typing.get_type_hints(DecisionConfig)
    known = {f.name for f in dataclasses.fields(DecisionConfig)} - {"source_model_type"}
    for key, value in fields.items():
        if key not in known:
            raise DecisionInputError(
                f"unknown key {key!r} in config section [model]; known: {sorted(known)}",
                f"model.{key}",
            )
        if not _fits(value, hints[key]):
            raise DecisionInputError(
                f"model.{key} must be {_type_name(hints[key])}, got {value!r}", f"model.{key}"
            )
        bound = _model_bound(key) if hints[key] is int else None
        if bound is not None and value > bound:  # before DecisionConfig builds a layer list
            raise DecisionInputError(
                f"model.{key} must be at most {bound:,}, got {value}", f"model.{key}")
    try:
        DecisionConfig(**fields)
    except (CheckpointError, TypeError, ValueError) as exc:
        message = str(exc).removeprefix("config.json: ")
        raise DecisionInputError(f"config section [model]: {message}", "model") from None


def _model_bound(key: str) -> int | None:
    """The largest value an int field of the [model] section may take (None: no bound here;
    ``vocab_size`` comes from the tokenizer, whose ``tokenizer.vocab_size`` is bounded)."""
    from decision.model.config import MAX_LAYERS

    bounds = {"vocab_size": None, "num_hidden_layers": MAX_LAYERS,
              "max_position_embeddings": MAX_POSITIONS}
    return bounds.get(key, MAX_WIDTH)


def config_from_dict(raw: dict[str, Any]) -> TrainConfig:
    """Build and validate a config; unknown keys and wrong types raise DecisionInputError."""
    if not isinstance(raw, dict):
        raise DecisionInputError("config must be an object", None)
    unknown = set(raw) - set(_SECTIONS) - {"model"}
    if unknown:
        hint = " (a Xiangqi player config? it trains with python -m " \
            "apps.xiangqi.train_player)" if "train" in unknown else ""
        raise DecisionInputError(f"unknown config sections: {sorted(unknown)}{hint}",
                                 sorted(unknown)[0])
    model = raw.get("model", {})
    if not isinstance(model, dict):
        raise DecisionInputError("config section [model] must be a table/object", "model")
    _check_model(model)
    cfg = TrainConfig(model=ModelSection(dict(model)))
    for name, cls in _SECTIONS.items():
        if name in raw:
            setattr(cfg, name, build_section(cls, raw[name], name))
    _check(cfg)
    return cfg


def check_minutes(minutes: float | None) -> float | None:
    """``minutes`` if it is a time budget (None: the config's; 0: none), else the error."""
    if minutes is not None and not (math.isfinite(minutes) and minutes >= 0):
        raise DecisionInputError(
            f"--max-minutes must be >= 0 and finite (0: no budget), got {minutes}",
            "max_minutes",
        )
    return minutes


def check_max_steps(steps: int | None) -> int | None:
    """``steps`` if it is a step to stop at (None: the config's ``run.max_steps``), else the
    error (a run asked to stop at step 0 or before would only rewrite its checkpoint)."""
    if steps is not None and steps < 1:
        raise DecisionInputError(f"--max-steps must be >= 1, got {steps}", "max_steps")
    if steps is not None and steps > MAX_STEPS:
        raise DecisionInputError(f"--max-steps must be at most {MAX_STEPS:,}, got {steps}",
                                 "max_steps")
    return steps


def check_device(name: str) -> str:
    """``name`` if it is a ``run.device`` value (``cpu``, ``cuda``, ``cuda:N``, ``auto``)."""
    if not isinstance(name, str) or not re.fullmatch(r"cpu|auto|cuda(:\d+)?", name):
        raise DecisionInputError(
            f"run.device must be 'cpu', 'cuda', 'cuda:N' or 'auto', got {name!r}", "run.device"
        )
    return name


def _check_finite(cfg: TrainConfig) -> None:
    """Every float of the config is a number: JSON (Python's reader) and TOML spell NaN and
    infinity, which pass a range check written as ``x < 0`` (a NaN learning rate trained NaN
    weights; a NaN ``run.checkpoint_minutes`` never checkpointed)."""
    values = [(f"model.{key}", value) for key, value in cfg.model.fields.items()]
    for name in _SECTIONS:
        section = getattr(cfg, name)
        values += [(f"{name}.{f.name}", getattr(section, f.name))
                   for f in dataclasses.fields(section)]
    for key, value in values:
        items = value if isinstance(value, tuple | list) else (value,)
        if any(isinstance(v, float) and not math.isfinite(v) for v in items):
            raise DecisionInputError(f"{key} must be a finite number, got {value!r}", key)


def check_at_most(key: str, value: int, bound: int, least: int | None = None) -> None:
    """Refuse ``value`` of ``key`` above ``bound`` (or, with ``least``, outside [least, bound])
    in one line that names the bound."""
    if least is not None and not least <= value <= bound:
        raise DecisionInputError(f"{key} must lie in [{least}, {bound:,}], got {value}", key)
    if value > bound:
        raise DecisionInputError(f"{key} must be at most {bound:,}, got {value}", key)


def _check_bounds(cfg: TrainConfig) -> None:
    """The upper bounds (MAX_*) of the sizes and counts; lower ones are checked in _check."""
    d, o, r, t = cfg.data, cfg.optim, cfg.run, cfg.tokenizer
    check_at_most("run.threads", r.threads, MAX_THREADS)
    check_at_most("optim.batch_size", o.batch_size, MAX_ROWS)
    check_at_most("run.length_window", r.length_window, MAX_ROWS)
    if o.batch_size >= 1 and r.length_window >= 1 and o.batch_size * r.length_window > MAX_ROWS:
        raise DecisionInputError(
            f"optim.batch_size * run.length_window (the rows sorted together) must be at most "
            f"{MAX_ROWS:,}, got {o.batch_size * r.length_window:,}", "run.length_window")
    check_at_most("run.denoise_draws", r.denoise_draws, MAX_DRAWS)
    for key, value in (("run.max_steps", r.max_steps), ("run.log_every", r.log_every),
                       ("run.eval_every", r.eval_every), ("optim.warmup_steps", o.warmup_steps)):
        check_at_most(key, value, MAX_STEPS)
    for key, value in (("run.early_stop_step", r.early_stop_step),
                       ("data.level1_steps", d.level1_steps),
                       ("data.curriculum_ramp_steps", d.curriculum_ramp_steps)):
        check_at_most(key, value, MAX_STEPS, least=0)
    check_at_most("data.doc_block_max", d.doc_block_max, MAX_BLOCK)
    check_at_most("tokenizer.corpus_groups", t.corpus_groups, MAX_CORPUS)


def _check(cfg: TrainConfig) -> None:
    _check_finite(cfg)
    _check_bounds(cfg)
    d, o, r = cfg.data, cfg.optim, cfg.run
    shares = (d.p_joint, d.p_standalone, d.p_document)
    if min(shares) < 0 or sum(shares) <= 0:
        raise DecisionInputError("data.p_* shares must be >= 0 with a positive sum", "data")
    if not 0 <= d.p_copy < 1:
        raise DecisionInputError("data.p_copy must lie in [0, 1)", "data.p_copy")
    if not 0 <= d.p_compare < 1:
        raise DecisionInputError("data.p_compare must lie in [0, 1)", "data.p_compare")
    if not 0 <= d.p_reshape_integer <= 1:
        raise DecisionInputError("data.p_reshape_integer must lie in [0, 1]", "data")
    if not 0 <= d.p_focus < 1:
        raise DecisionInputError("data.p_focus must lie in [0, 1)", "data.p_focus")
    if not all(isinstance(t, str) for t in d.focus_qtypes):
        raise DecisionInputError("data.focus_qtypes must be a list of strings", "data.focus_qtypes")
    if not 0 <= d.p_days_between < 1:
        raise DecisionInputError("data.p_days_between must lie in [0, 1)", "data.p_days_between")
    if not 0 <= d.p_event_days < 1:
        raise DecisionInputError("data.p_event_days must lie in [0, 1)", "data.p_event_days")
    if not 0 <= d.p_focus_joint <= 1:
        raise DecisionInputError("data.p_focus_joint must lie in [0, 1]", "data.p_focus_joint")
    if d.p_focus > 0 and not d.focus_qtypes:
        raise DecisionInputError("data.p_focus > 0 needs data.focus_qtypes", "data.focus_qtypes")
    if not 0 < d.t_min < 1:
        raise DecisionInputError("data.t_min must lie in (0, 1)", "data.t_min")
    if d.loss_weighting not in LOSS_WEIGHTINGS:
        raise DecisionInputError(
            f"data.loss_weighting must be one of {LOSS_WEIGHTINGS}, got {d.loss_weighting!r}",
            "data.loss_weighting",
        )
    if d.option_loss_weight < 0:
        raise DecisionInputError("data.option_loss_weight must be >= 0",
                                 "data.option_loss_weight")
    if d.option_set_loss_weight < 0:
        raise DecisionInputError("data.option_set_loss_weight must be >= 0",
                                 "data.option_set_loss_weight")
    if d.soft_option_loss_weight < 0:
        raise DecisionInputError("data.soft_option_loss_weight must be >= 0",
                                 "data.soft_option_loss_weight")
    if not 0 <= d.p_extraction_visible <= 1:
        raise DecisionInputError("data.p_extraction_visible must lie in [0, 1]", "data")
    if not 0 < d.extraction_rate_scale <= 1:
        raise DecisionInputError("data.extraction_rate_scale must lie in (0, 1]", "data")
    if not 8 <= d.doc_block_min <= d.doc_block_max:
        raise DecisionInputError("need 8 <= data.doc_block_min <= data.doc_block_max", "data")
    if d.task not in TASKS:
        raise DecisionInputError(f"data.task must be one of {TASKS}, got {d.task!r}", "data.task")
    if not 0 <= d.level1_final_share <= 1:
        raise DecisionInputError("data.level1_final_share must lie in [0, 1]", "data")
    if d.val_groups < 1:
        raise DecisionInputError("data.val_groups must be >= 1", "data.val_groups")
    if not 0 < o.lr <= 1:  # AdamW's step is about lr per weight: above 1 it only diverges
        raise DecisionInputError(f"optim.lr must lie in (0, 1], got {o.lr}", "optim.lr")
    if o.batch_size < 1:
        raise DecisionInputError("optim.batch_size must be >= 1", "optim.batch_size")
    if len(o.betas) != 2 or not all(0 <= b < 1 for b in o.betas):
        raise DecisionInputError("optim.betas must be two numbers in [0, 1)", "optim.betas")
    if not o.grad_clip > 0:  # 0 zeroes every update, a negative one flips it (ascent)
        raise DecisionInputError("optim.grad_clip must be > 0", "optim.grad_clip")
    if not 0 <= o.min_lr_ratio <= 1:
        raise DecisionInputError("optim.min_lr_ratio must lie in [0, 1]", "optim.min_lr_ratio")
    if o.warmup_steps < 0 or o.weight_decay < 0:
        raise DecisionInputError("optim.warmup_steps and optim.weight_decay must be >= 0", "optim")
    if not all(isinstance(n, str) and n for n in o.scaled_lr_params):
        raise DecisionInputError("optim.scaled_lr_params must be a list of non-empty strings",
                                 "optim.scaled_lr_params")
    if not 0 < o.lr * o.scaled_lr_factor <= 1:
        raise DecisionInputError(
            f"optim.scaled_lr_factor must be > 0 with lr * factor at most 1, got "
            f"{o.scaled_lr_factor}", "optim.scaled_lr_factor")
    if r.threads < 1:
        raise DecisionInputError("run.threads must be >= 1", "run.threads")
    if r.max_minutes < 0 or r.checkpoint_minutes < 0:
        raise DecisionInputError(
            "run.max_minutes (0: no budget) and run.checkpoint_minutes must be >= 0", "run"
        )
    if r.denoise_draws < 1:
        raise DecisionInputError("run.denoise_draws must be >= 1", "run.denoise_draws")
    if r.length_window < 1:
        raise DecisionInputError("run.length_window must be >= 1", "run.length_window")
    if r.max_steps < 1 or r.log_every < 1 or r.eval_every < 1:
        raise DecisionInputError("run.max_steps/log_every/eval_every must be >= 1", "run")
    check_device(r.device)
    if not r.out_dir.strip():  # "" is the working directory: the run's files landed there
        raise DecisionInputError("run.out_dir must name a directory, got ''", "run.out_dir")
    if not 0 <= r.seed < 2**63:  # torch's seeds are 64-bit: a larger one failed at the model
        raise DecisionInputError(f"run.seed must lie in [0, 2**63), got {r.seed}", "run.seed")
    if not 1 <= d.max_level <= 2:  # the contract generator's levels; 3 trained as 2
        raise DecisionInputError(f"data.max_level must be 1 or 2, got {d.max_level}",
                                 "data.max_level")
    t = cfg.tokenizer
    if not 300 <= t.vocab_size <= MAX_VOCAB:  # 2**40 aborted the process in the BPE trainer
        raise DecisionInputError(
            f"tokenizer.vocab_size must lie in [300, {MAX_VOCAB}] (bytes + specials at least), "
            f"got {t.vocab_size}", "tokenizer.vocab_size")
    if t.corpus_groups < 1:  # no text: a tokenizer of bytes alone, whatever vocab_size says
        raise DecisionInputError(
            f"tokenizer.corpus_groups must be >= 1, got {t.corpus_groups}",
            "tokenizer.corpus_groups")
    if t.seed < 0:  # the generator's seeds; was refused at the first group, naming no key
        raise DecisionInputError(f"tokenizer.seed must be >= 0, got {t.seed}", "tokenizer.seed")


class _Pairs(dict[str, Any]):
    """A JSON object as ``json.loads`` read it, with the keys it gave more than once."""

    repeated: tuple[str, ...] = ()


def _pairs(pairs: list[tuple[str, Any]]) -> _Pairs:
    out = _Pairs(pairs)
    if len(out) < len(pairs):
        keys = [key for key, _ in pairs]
        out.repeated = tuple(key for i, key in enumerate(keys) if key in keys[:i])
    return out


def _repeated_key(value: Any, where: str = "") -> str | None:
    """The dotted name of the first key some object of ``value`` gives twice, or None."""
    if isinstance(value, _Pairs) and value.repeated:
        return where + value.repeated[0]
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _repeated_key(item, f"{where}{key}.")
        if found is not None:
            return found
    return None


def read_config_file(path: str | Path) -> Any:
    """The parsed content of a ``.toml`` file, or of any other as JSON, else one
    DecisionInputError: a file that is missing or unreadable, not UTF-8 text (a UTF-8 byte-order
    mark is allowed, as editors on Windows write one), not JSON/TOML, or that gives a key twice in
    one object (JSON's reader kept only the last: ``{"run": {...}, "run": {...}}`` dropped the
    first section without a word; TOML refuses it itself). Also used by
    ``python -m apps.xiangqi.train_player``."""
    p = Path(path)
    if not p.is_file():
        raise DecisionInputError(f"config file not found: {p}", "config")
    try:
        text = p.read_bytes().decode("utf-8-sig")
    except OSError as exc:
        raise DecisionInputError(f"cannot read config {p}: {exc.strerror or exc}",
                                 "config") from None
    except UnicodeDecodeError as exc:
        raise DecisionInputError(f"cannot read config {p}: not UTF-8 text ({exc.reason} at "
                                 f"byte {exc.start})", "config") from None
    if not text.strip():  # TOML reads it as {}: the default config, trained without a word
        raise DecisionInputError(f"config {p} is empty", "config")
    try:
        raw = tomllib.loads(text) if p.suffix == ".toml" else json.loads(
            text, object_pairs_hook=_pairs)
    except (ValueError, RecursionError) as exc:  # JSON/TOML errors, a 5000-digit number, ...
        raise DecisionInputError(f"cannot parse config {p}: {exc}", "config") from None
    repeated = _repeated_key(raw)
    if repeated is not None:
        raise DecisionInputError(
            f"config {p} gives {repeated} more than once (JSON would keep only the last)",
            repeated)
    return raw


def load_config(path: str | Path) -> TrainConfig:
    """Read a ``.json`` or ``.toml`` training config."""
    return config_from_dict(read_config_file(path))
