"""Train the Xiangqi player: the generic block-diffusion loop on master-game positions.

``python -m apps.xiangqi.train_player --config configs/xiangqi.json [--resume] [--max-minutes M]
[--device D] [--export models/xiangqi]``

It reuses ``decision.train`` as is: the config file's ``train`` object is a
:class:`decision.train.config.TrainConfig`, the loop (:func:`decision.train.loop.train_loop`)
does the masking, loss, optimiser, progress lines, periodic checkpoints and exact resume. What
is Xiangqi-specific lives here: the ``xiangqi`` object of the config (data paths and sizes), the
tokenizer trained on rendered positions, the rows (:mod:`apps.xiangqi.training`) and a validation
that asks the model exactly as :class:`apps.xiangqi.model_player.ModelPlayer` does.

How a run starts comes from the recipe (:mod:`decision.train.recipe`): ``begin_run`` (the
checks, then :mod:`decision.train.run_dir`'s ``resume_point``: a fresh run refuses a directory
that holds one, ``--resume`` a checkpoint without trainer state) and ``start_model`` (the
checkpoint, ``--init-from``'s weights or a fresh ``build_model``); ``export`` (a bf16 copy of
the checkpoint's model files that keeps the model card beside them) is our own. Every file the
run reads (games, soft targets, teacher games) is read before ``start_model`` writes the first
one, and the ``xiangqi`` section is saved with each checkpoint (``LoopHooks.sections``), so a
resume reports its changes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from apps.xiangqi.book import MoveBook
from apps.xiangqi.model_player import MOVE_DECODER, decoder_options
from apps.xiangqi.pooling import POOL_FROM_PLY
from apps.xiangqi.training import (
    AUX_KINDS,
    GameRecord,
    MoveExample,
    MoveRowSource,
    PositionRef,
    SoftTarget,
    board_at,
    book_positions,
    example_at,
    last_ply_positions,
    load_games,
    load_soft_targets,
    mixed_positions,
    sample_positions,
    tokenizer_corpus,
)
from decision.errors import DecisionInputError
from decision.files import fsync_dir
from decision.model.safetensors_files import INDEX_NAME
from decision.tokenizer import special_ids, train_tokenizer
from decision.train.checkpoint import CHECKPOINT_DIR, recover_checkpoint
from decision.train.cli import check_flags, exit_status, interrupted
from decision.train.config import (
    MAX_CORPUS,
    TrainConfig,
    build_section,
    check_at_most,
    check_device,
    config_from_dict,
    read_config_file,
)
from decision.train.export import check_export_dest, export_error
from decision.train.loop import LoopHooks, train_loop
from decision.train.recipe import TrainResult, begin_run, check_num_segments, start_model
from decision.train.run_dir import EVALS_NAME, hold_run_dir, may_hold_run_dir

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "xiangqi"
# ``train`` keys only the contract recipe reads (its row kinds, curriculum, extraction masking,
# validation groups and tokenizer corpus): set here they changed nothing, without a word
CONTRACT_KEYS = (
    *(f"data.{key}" for key in (
        "p_joint", "p_standalone", "p_document", "doc_block_min", "doc_block_max",
        "level1_steps", "curriculum_ramp_steps", "level1_final_share", "max_level",
        "p_extraction_visible", "extraction_rate_scale", "val_groups", "focus_qtypes",
        "p_focus", "p_reshape_integer", "p_copy", "copy_hard", "p_compare", "p_focus_joint",
        "p_days_between", "p_event_days")),
    "tokenizer.corpus_groups", "tokenizer.seed",
)
MODEL_FILES = ("config.json", "tokenizer.json")
# ``xiangqi`` keys that do not decide the training rows: validation, and the tokenizer (trained
# only by a fresh run); a resume that changes any other says the rows change (resume_notes)
NOT_DATA_KEYS = frozenset({"xiangqi.valid_games", "xiangqi.val_positions",
                           "xiangqi.tokenizer_positions"})
# Upper bounds of the position counts, far above any real run (which draws 400,000): past them
# a run could only fail late (10**30 train_positions was an OverflowError from random.choices
# once the games were read and the tokenizer written)
MAX_TRAIN_POSITIONS = 10**9  # a list of (game, ply) references: ~130 bytes each, 130 GB here
MAX_VAL_POSITIONS = 100_000  # each decided every eval_every steps (the shipped runs: 32)


@dataclass
class XiangqiSection:
    """The Xiangqi data of a run (the ``xiangqi`` object of the config file)."""

    train_games: str = str(DATA / "train-games.jsonl.gz")
    valid_games: str = str(DATA / "valid-games.jsonl.gz")
    train_positions: int = 400_000  # sampled (game, ply) references; rows cycle over them
    fragment_weight: float = 1.0  # weight of a fragment's ply relative to a full game's
    tokenizer_positions: int = 3000  # rendered positions that train the tokenizer
    val_positions: int = 48  # validation positions decided every eval_every steps
    seed: int = 11
    # A teacher file (apps/xiangqi/teacher.py): the student's own positions labelled by the
    # model behind the search; ``teacher_share`` of the train_positions are drawn from it
    # ("": none).
    teacher_games: str = ""
    teacher_share: float = 0.0
    # Augmentation: this share of the training rows shows the position and the master's move
    # mirrored left to right (MoveRowSource); 0 keeps every row as played.
    mirror_share: float = 0.0
    # Augmentation for symmetry pooling (apps/xiangqi/pooling.py): this share of the rows at
    # ply ``image_from_ply`` or later shows the position in one of its three other images
    # (MoveRowSource); 0 keeps every row as played. Not with mirror_share.
    image_share: float = 0.0
    image_from_ply: int = POOL_FROM_PLY
    # This share of the master draws comes from the plies before ``opening_plies`` only (where
    # validation positions repeat training ones and a master's move is most predictable); 0
    # draws every master position uniformly over all plies.
    opening_share: float = 0.0
    opening_plies: int = 30
    # Targets: a master position that the training games reach at least this often is labelled
    # with their most frequent move there (apps/xiangqi/book.py); 0 keeps each game's own move.
    book_min_count: int = 0
    # Drill: this share of the master draws is uniform over the distinct positions the training
    # games reach at least ``drill_min_count`` times (each at its first occurrence, with the
    # book's move as target), not over plies; 0 draws none.
    drill_share: float = 0.0
    drill_min_count: int = 5
    # The option-set loss (``data.option_set_loss_weight``): each row's acceptable moves are its
    # target and the moves a material search of this depth keeps within 0 of the best (the
    # blunder check of SearchGuidedPlayer); 0 gives the rows no set.
    sound_depth: int = 0
    # Multi-task: this share of the master rows also asks an auxiliary question in the same
    # joint group ("reply": the opponent's next move in the game; "result": who won), trained by
    # the diffusion loss; play asks only the move. 0 asks none.
    aux: str = ""
    aux_share: float = 0.0
    # Distillation (``data.soft_option_loss_weight``): a file of soft targets for the run's
    # rows by index (apps/xiangqi/distil.py writes it from a teacher model); "" = none.
    soft_targets: str = ""


def load_player_config(path: str | Path) -> tuple[TrainConfig, XiangqiSection]:
    """Read ``{"train": TrainConfig fields, "xiangqi": XiangqiSection fields}`` from JSON."""
    raw = read_config_file(path)  # one line for a file that is unreadable, ... or repeats a key
    if not isinstance(raw, dict) or set(raw) - {"train", "xiangqi"}:
        raise DecisionInputError("config must be an object with 'train' and 'xiangqi'", "config")
    section = raw.get("xiangqi", {})
    if isinstance(section, dict):
        known = {f.name for f in dataclasses.fields(XiangqiSection)}
        unknown = set(section) - known
        if unknown:
            raise DecisionInputError(f"unknown xiangqi keys {sorted(unknown)}", "xiangqi")
    xq = build_section(XiangqiSection, section, "xiangqi")
    for f in dataclasses.fields(xq):  # JSON spells NaN and Infinity; an infinite weight failed
        value = getattr(xq, f.name)  # only as the rows were drawn, after the tokenizer
        if isinstance(value, float) and not math.isfinite(value):
            raise DecisionInputError(f"xiangqi.{f.name} must be a finite number, got {value}",
                                     f"xiangqi.{f.name}")
    if xq.aux not in ("", *AUX_KINDS):  # a typo was ignored while aux_share was 0
        raise DecisionInputError(f"xiangqi.aux must be '' (none) or one of {AUX_KINDS}, got "
                                 f"{xq.aux!r}", "xiangqi.aux")
    if min(xq.train_positions, xq.tokenizer_positions, xq.val_positions) < 1:
        raise DecisionInputError(
            "xiangqi.train_positions, tokenizer_positions and val_positions must be >= 1",
            "xiangqi",
        )
    check_at_most("xiangqi.train_positions", xq.train_positions, MAX_TRAIN_POSITIONS)
    check_at_most("xiangqi.tokenizer_positions", xq.tokenizer_positions, MAX_CORPUS)  # as
    # tokenizer.corpus_groups: each a game replayed to its ply and rendered
    check_at_most("xiangqi.val_positions", xq.val_positions, MAX_VAL_POSITIONS)
    if not xq.fragment_weight >= 0:
        raise DecisionInputError("xiangqi.fragment_weight must be >= 0", "xiangqi.fragment_weight")
    if not 0.0 <= xq.teacher_share <= 1.0:
        raise DecisionInputError("xiangqi.teacher_share must be in [0, 1]", "xiangqi.teacher_share")
    if not 0.0 <= xq.mirror_share <= 1.0:
        raise DecisionInputError("xiangqi.mirror_share must be in [0, 1]", "xiangqi.mirror_share")
    if not 0.0 <= xq.image_share <= 1.0 or xq.image_from_ply < 0:
        raise DecisionInputError(
            "xiangqi.image_share must be in [0, 1] and xiangqi.image_from_ply >= 0",
            "xiangqi.image_share")
    if xq.image_share and xq.mirror_share:
        raise DecisionInputError("xiangqi.mirror_share and xiangqi.image_share cannot both be set",
                                 "xiangqi.image_share")
    if not 0.0 <= xq.opening_share <= 1.0:
        raise DecisionInputError("xiangqi.opening_share must be in [0, 1]", "xiangqi.opening_share")
    if xq.opening_plies < 1:
        raise DecisionInputError("xiangqi.opening_plies must be >= 1", "xiangqi.opening_plies")
    if not 0 <= xq.sound_depth <= 3:
        raise DecisionInputError("xiangqi.sound_depth must be 0 (off) to 3", "xiangqi.sound_depth")
    if not 0.0 <= xq.aux_share <= 1.0 or (xq.aux_share > 0 and xq.aux not in AUX_KINDS):
        raise DecisionInputError(
            f"xiangqi.aux_share must be in [0, 1], and > 0 needs xiangqi.aux in {AUX_KINDS}",
            "xiangqi.aux")
    if xq.book_min_count < 0:
        raise DecisionInputError("xiangqi.book_min_count must be >= 0", "xiangqi.book_min_count")
    if not 0.0 <= xq.drill_share <= 1.0:
        raise DecisionInputError("xiangqi.drill_share must be in [0, 1]", "xiangqi.drill_share")
    if xq.drill_share > 0 and not 1 <= xq.book_min_count <= xq.drill_min_count:
        raise DecisionInputError(
            "xiangqi.drill_share > 0 needs 1 <= book_min_count <= drill_min_count, so that "
            "every drilled position carries the book's move", "xiangqi.drill_min_count")
    if xq.teacher_share > 0 and not xq.teacher_games:
        raise DecisionInputError("xiangqi.teacher_share > 0 needs xiangqi.teacher_games",
                                 "xiangqi.teacher_games")
    cfg = config_from_dict(raw.get("train", {}))
    task = raw.get("train", {}).get("data", {}).get("task", "xiangqi")
    if task != "xiangqi":  # omitted: the default ("contracts") is the other recipe's
        raise DecisionInputError(
            f"train.data.task is {task!r}: this driver trains 'xiangqi' (contracts: decision "
            "train)", "data.task",
        )
    fresh = TrainConfig()
    for key in CONTRACT_KEYS:
        section, name = key.split(".")
        if getattr(getattr(cfg, section), name) != getattr(getattr(fresh, section), name):
            raise DecisionInputError(
                f"train.{key} is a setting of the contract recipe (decision train): this driver "
                "does not read it; leave it out", key)
    if xq.sound_depth and cfg.data.option_set_loss_weight <= 0:
        raise DecisionInputError("xiangqi.sound_depth needs data.option_set_loss_weight > 0",
                                 "xiangqi.sound_depth")
    if xq.soft_targets and cfg.data.soft_option_loss_weight <= 0:
        raise DecisionInputError("xiangqi.soft_targets needs data.soft_option_loss_weight > 0",
                                 "xiangqi.soft_targets")
    check_num_segments(cfg, questions(xq))
    return cfg, xq


def questions(xq: XiangqiSection) -> int:
    """The most questions a row asks: the move, and the auxiliary question."""
    return 2 if xq.aux_share > 0 else 1


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def build_tokenizer(games: list[GameRecord], cfg: TrainConfig, xq: XiangqiSection) -> Tokenizer:
    """Byte-level BPE with single-digit tokens, trained on rendered positions and their moves."""
    texts = list(tokenizer_corpus(games, xq.tokenizer_positions, xq.seed + 1))
    return train_tokenizer(texts, cfg.tokenizer.vocab_size)


def validation_examples(games: list[GameRecord], count: int, seed: int) -> list[MoveExample]:
    """A fixed sample of validation positions with more than one legal move."""
    out: list[MoveExample] = []
    for ref in sample_positions(games, count * 2, seed):
        game = games[ref.game]
        board = board_at(game, ref.ply)
        if len(board.legal_moves) > 1:
            out.append(example_at(board, game.moves[ref.ply]))
        if len(out) == count:
            break
    return out


def top1(model: Any, examples: list[MoveExample]) -> float:
    """Share of examples where the model's move, asked as ModelPlayer asks, is the master's."""
    from decision.joint.engine import decide

    model.eval()
    hits = 0
    for ex in examples:
        answer = decide(model, ex.document, [ex.question], mode="joint", threshold=0.9,
                        **decoder_options(MOVE_DECODER))
        hits += answer.answers[0].value == ex.gold
    return hits / max(1, len(examples))


@dataclass(frozen=True)
class MasterDraws:
    """How a run's master draws split: over all plies, over the openings, per drilled position."""

    plies: int
    openings: int
    drilled: int


def master_draws(xq: XiangqiSection) -> MasterDraws:
    """The split of the master draws (all but the ``teacher_share``): ``drill_share`` of them per
    distinct recurring position, ``opening_share`` of the rest from the openings."""
    n_master = xq.train_positions - round(xq.teacher_share * xq.train_positions)
    n_drill = round(xq.drill_share * n_master)
    n_opening = round(xq.opening_share * (n_master - n_drill))
    return MasterDraws(n_master - n_drill - n_opening, n_opening, n_drill)


def master_refs(games: list[GameRecord], xq: XiangqiSection,
                book: MoveBook | None = None) -> list[PositionRef]:
    """The run's draws of master positions: all but the ``teacher_share``, of which
    ``drill_share`` are drawn per distinct recurring position (``book``: the games' own) and
    ``opening_share`` of the rest from the plies before ``opening_plies`` (deterministic in the
    seed)."""
    draws = master_draws(xq)
    refs = sample_positions(games, draws.plies, xq.seed, xq.fragment_weight) \
        if draws.plies else []
    if draws.openings:
        refs = mixed_positions(
            refs, sample_positions(games, draws.openings, xq.seed + 6, xq.fragment_weight,
                                   xq.opening_plies), xq.seed + 7)
    if draws.drilled:
        if book is None:
            raise ValueError("xiangqi.drill_share needs the training games' book")
        refs = mixed_positions(
            refs, book_positions(games, book, xq.drill_min_count, draws.drilled, xq.seed + 8),
            xq.seed + 9)
    return refs


def row_source(xq: XiangqiSection, games: list[GameRecord], tokenizer: Tokenizer,
               soft_targets: dict[int, SoftTarget] | None = None,
               taught: list[GameRecord] | None = None) -> MoveRowSource:
    """The run's training rows (a pure function of the config's ``xiangqi`` section, the
    training games and the tokenizer): what ``train`` feeds the loop and what
    :mod:`apps.xiangqi.distil` labels row by row. ``taught``: the ``teacher_games`` already
    read (``train`` reads them before the run writes a file), else they are read here."""
    n_teacher = round(xq.teacher_share * xq.train_positions)
    book = None
    n_games = len(games)
    if xq.book_min_count:
        t = time.monotonic()
        book = MoveBook.from_games((g.start_fen, g.moves) for g in games)
        log(f"book: {len(book)} positions, {book.recurring(xq.book_min_count)} reached "
            f">= {xq.book_min_count} times, labelled with their most frequent move "
            f"({time.monotonic() - t:.1f} s)")
    refs = master_refs(games, xq, book)
    draws = master_draws(xq)
    if draws.drilled and book is not None:
        log(f"drill: {draws.drilled} of {len(refs)} master draws uniform over the "
            f"{book.recurring(xq.drill_min_count)} positions reached >= "
            f"{xq.drill_min_count} times")
    if draws.openings:
        log(f"openings: {draws.openings} of {len(refs)} master draws from "
            f"plies < {xq.opening_plies}")
    if xq.teacher_games:
        taught = load_games(xq.teacher_games) if taught is None else taught
        log(f"teacher: {len(taught)} labelled positions from {xq.teacher_games}, "
            f"{n_teacher} of {xq.train_positions} draws")
        refs = mixed_positions(
            refs, last_ply_positions(taught, len(games), n_teacher, xq.seed + 3), xq.seed + 4)
        games = games + taught
    return MoveRowSource(games, refs, tokenizer, xq.mirror_share, xq.seed + 5,
                         book, xq.book_min_count, n_games, xq.sound_depth,
                         xq.aux, xq.aux_share, xq.image_share, xq.image_from_ply,
                         soft_targets)


INPUT_FILES = ("train_games", "valid_games", "teacher_games", "soft_targets")


def check_input_files(xq: XiangqiSection) -> None:
    """Refuse, naming its key, an input file of the section that is not there ("" for the
    optional ones: none). Relative paths are taken from the working directory, not from the
    config file. Checked before the games load: a missing ``valid_games`` was found only after
    the training games had been read."""
    for name in INPUT_FILES:
        path = getattr(xq, name)
        if (path or name in ("train_games", "valid_games")) and not Path(path).is_file():
            what = "soft targets" if name == "soft_targets" else "games file"
            raise DecisionInputError(f"cannot read {what} {path} (xiangqi.{name}): no such file",
                                     f"xiangqi.{name}")


def train(config: str | Path, resume: bool = False, max_minutes: float | None = None,
          max_steps: int | None = None, out_dir: str | None = None,
          init_from: str | Path | None = None, device: str | None = None,
          export_to: str | Path | None = None) -> TrainResult:
    """Train (or continue) the run; returns its checkpoint directory and how the loop ended.

    ``init_from`` starts a fresh run (new optimiser and schedule) from a model directory's
    weights and tokenizer, e.g. the shipped ``models/xiangqi``; ``resume`` takes precedence
    when the run directory has a checkpoint (one without trainer state is an error); without
    ``resume``, a directory that already holds a run is refused
    (:func:`~decision.train.run_dir.resume_point`, checked before the games load).

    ``export_to``: once the run has ended (not when a signal stopped it), its checkpoint is
    exported there (:func:`export`) with the run directory still held, so that a run started
    into the directory meanwhile cannot swap the checkpoint under the export.
    """
    cfg, xq = load_player_config(config)
    if out_dir is not None:
        cfg.run.out_dir = out_dir
    if device is not None:
        cfg.run.device = check_device(device)
    check_input_files(xq)
    with hold_run_dir(cfg.run.out_dir):  # until the run and its export end: one run a directory
        result = _train(cfg, xq, resume, max_minutes, max_steps, init_from)
        if export_to is not None and result.loop.signal is None:
            export(result.checkpoint, export_to)
        return result


def _train(cfg: TrainConfig, xq: XiangqiSection, resume: bool, max_minutes: float | None,
           max_steps: int | None, init_from: str | Path | None) -> TrainResult:
    """:func:`train` with its run directory held (:func:`~decision.train.run_dir.hold_run_dir`)."""
    # the run's checks, before the games load (minutes for all of them)
    resume_from = begin_run(cfg, resume, max_minutes, max_steps)
    out = Path(cfg.run.out_dir)
    t0 = time.monotonic()
    games = load_games(xq.train_games)
    valid = load_games(xq.valid_games)
    log(f"games: {len(games)} train, {len(valid)} valid in {time.monotonic() - t0:.1f} s")
    # every file the run reads, read before start_model writes its first (tokenizer.json)
    taught = load_games(xq.teacher_games) if xq.teacher_games else None
    soft_targets = None
    if xq.soft_targets:
        soft_targets = load_soft_targets(xq.soft_targets)
        log(f"soft targets: {len(soft_targets)} rows from {xq.soft_targets}, "
            f"weight {cfg.data.soft_option_loss_weight:g}")
    model, state = start_model(cfg, out, resume_from, init_from,
                               lambda: build_tokenizer(games, cfg, xq), questions(xq))
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.3f}M parameters, vocab {model.config.vocab_size}")
    source = row_source(xq, games, model.tokenizer, soft_targets, taught)
    if xq.aux_share:
        log(f"auxiliary question {xq.aux!r} on {xq.aux_share:.0%} of the master rows")
    if xq.sound_depth:
        log(f"option sets: the target and the moves a depth-{xq.sound_depth} search keeps, "
            f"weight {cfg.data.option_set_loss_weight:g}")
    if xq.mirror_share:
        log(f"mirror: {xq.mirror_share:.0%} of the rows show the position mirrored")
    if xq.image_share:
        log(f"images: {xq.image_share:.0%} of the rows from ply {xq.image_from_ply} show "
            "the position mirrored, colour-swapped or both")
    val = validation_examples(valid, xq.val_positions, xq.seed + 2)
    evals_path = out / EVALS_NAME

    def validate(m: Any, step: int) -> dict[str, Any]:
        t = time.monotonic()
        record = {"top1": round(top1(m, val), 4), "n": len(val),
                  "eval_s": round(time.monotonic() - t, 1)}
        with evals_path.open("a") as f:
            f.write(json.dumps({"step": step, **record}) + "\n")
        return record

    ids = special_ids(model.tokenizer)
    # the xiangqi section is saved with the checkpoint and compared on resume, as cfg is
    hooks = LoopHooks(rows=source.row, pad_token_id=ids.pad, mask_token_id=ids.mask,
                      validate=validate, log=log, sections={"xiangqi": dataclasses.asdict(xq)},
                      not_data_keys=NOT_DATA_KEYS)
    result = train_loop(model, cfg, hooks, out, resume_state=state, max_steps=max_steps,
                        max_minutes=max_minutes)
    log(f"done: step {result.step}, {result.stopped_because}")
    return TrainResult(out / CHECKPOINT_DIR, result)


SCRATCH = ".export.tmp"  # the export is written beside dest first, under this suffix


def check_export(dest: str | Path, run_dir: str | Path) -> Path:
    """``dest`` resolved, if :func:`export` may write the run's model into it
    (:func:`~decision.train.export.check_export_dest`, other files of ``dest`` staying): not the
    run's checkpoint or another of its entries, not a file, and its scratch sibling
    ``DEST.export.tmp``, which the export replaces whole, absent or a model directory."""
    return check_export_dest(dest, run_dir, others_stay=True, scratch=(SCRATCH,))


def export(checkpoint: str | Path, dest: str | Path) -> Path:
    """Write the checkpoint's model in bf16 into ``dest`` (other files there, e.g. README, stay;
    ``dest`` is checked first, :func:`check_export`).

    The model is written whole beside ``dest`` first (``DEST.export.tmp``): a failure or a kill
    while writing leaves ``dest`` as it was. Its files then move in one by one, and ``dest``'s
    config.json goes first and comes back last: a kill between two moves (new weights beside
    the old tokenizer, which loaded without a word) leaves ``dest`` without config.json, a
    model that refuses to load (``missing config.json``) until the next export replaces its
    model files."""
    from decision.model import load_model

    out = check_export(dest, Path(checkpoint).resolve().parent)
    model = load_model(checkpoint, dtype=torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + SCRATCH)
    if tmp.exists() and not (out / "config.json").exists() and any(out.glob("*.safetensors")):
        log(f"{out} was left without config.json by an interrupted export: its model files "
            "are replaced")
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        model.save(tmp)
    except Exception as exc:  # a full disk, an I/O error: dest keeps its files
        raise export_error(out, tmp, checkpoint, exc, "--export-only") from exc
    new = sorted(tmp.iterdir(), key=lambda f: (f.name == "config.json", f.name))
    (out / "config.json").unlink(missing_ok=True)  # from here until its return: no model
    fsync_dir(out)  # gone on the disk before any new file is there
    for old in list(out.glob("*.safetensors")) + [out / f for f in (INDEX_NAME, *MODEL_FILES)]:
        if old.is_file() and not (tmp / old.name).exists():
            old.unlink()
    for file in new:  # config.json last: only a complete set of files is a model
        os.replace(file, out / file.name)
    fsync_dir(out)
    tmp.rmdir()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m apps.xiangqi.train_player",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/xiangqi.json")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--max-minutes", type=float, default=None)
    parser.add_argument("--max-steps", type=int, default=None)
    parser.add_argument("--out-dir", default=None)
    parser.add_argument("--init-from", default=None, metavar="MODEL_DIR",
                        help="start a fresh run from this model's weights and tokenizer "
                             "(e.g. models/xiangqi)")
    parser.add_argument("--export", default=None, help="write the bf16 model here afterwards")
    parser.add_argument("--device", default=None,
                        help="cpu, cuda, cuda:N or auto (default: config run.device)")
    parser.add_argument("--export-only", action="store_true", help="export without training")
    args = parser.parse_args(argv)
    return exit_status(lambda: run(args))


def export_only(run_dir: Path, dest: str) -> None:
    """``--export-only``: export the run's checkpoint with the run directory held as a training
    run holds it (a run started into the directory, or still running there, would otherwise swap
    the checkpoint while it is recovered and read). Another user's run directory cannot be held
    (its lock file is theirs, or there is none and a lock file of ours would then refuse their
    own runs): it is exported without the lock, with a warning."""
    if run_dir.is_dir() and not may_hold_run_dir(run_dir):
        log(f"warning: the run directory {run_dir} is another user's: exported without holding "
            "it (a run its owner starts there meanwhile is not waited for)")
        export(recover_checkpoint(run_dir), dest)
        return
    with hold_run_dir(str(run_dir)):
        export(recover_checkpoint(run_dir), dest)


def run(args: argparse.Namespace) -> int:
    """The command line's run; its errors become the exit status in ``main``."""
    check_flags(args)
    if args.export_only and args.export is None:  # did nothing and exited 0
        raise DecisionInputError("--export-only needs --export DIR", "export-only")
    cfg, _ = load_player_config(args.config)
    run_dir = Path(cfg.run.out_dir if args.out_dir is None else args.out_dir)
    if args.export is not None:  # before training: an export that cannot be written is refused
        check_export(args.export, run_dir)
    if args.export_only:
        export_only(run_dir, args.export)
    else:  # the export is written with the run directory still held (train's export_to)
        result = train(args.config, args.resume, args.max_minutes, args.max_steps,
                       args.out_dir, args.init_from, args.device, export_to=args.export)
        status = interrupted(result, args.export)  # Ctrl-C or SIGTERM: no export, 128 + sig
        if status is not None:
            return status
    if args.export is not None:
        log(f"exported bf16 model to {args.export}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
