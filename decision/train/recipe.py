"""The training recipe end to end: tokenizer, model, data, validation, loop, bf16 export.

Run directory (``cfg.run.out_dir``): ``checkpoint/`` (a model directory ``decision.load_model``
reads, plus ``trainer_state.pt`` and ``train_config.json``), ``tokenizer.json`` and
``evals.jsonl`` (one line per validation).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from decision.errors import CheckpointError, DecisionInputError, TrainingError
from decision.files import write_whole
from decision.tokenizer import MAX_QUESTIONS, special_ids, train_tokenizer
from decision.train.checkpoint import (
    CHECKPOINT_DIR,
    CHECKPOINT_OLD,
    CHECKPOINT_TMP,
    STATE_FILE,
    load_trainer_state,
    recover_checkpoint,
)
from decision.train.config import TrainConfig, check_max_steps, check_minutes
from decision.train.data import (
    RowSource,
    ValidationSet,
    check_focus_qtypes,
    check_tokenizer_seeds,
    check_val_groups,
    tokenizer_corpus,
)
from decision.train.loop import LoopHooks, LoopResult, resolve_device, train_loop


@dataclass
class TrainResult:
    checkpoint: Path
    loop: LoopResult


def log(msg: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    print(f"[{stamp}] {msg}", file=sys.stderr, flush=True)


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


EVALS_NAME = "evals.jsonl"  # one validation record a line, beside the checkpoint
# What a run writes into its directory (checkpoint.tmp / .old only while it saves)
RUN_FILES = (CHECKPOINT_DIR, CHECKPOINT_TMP, CHECKPOINT_OLD, "tokenizer.json", EVALS_NAME)


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


def check_no_run(out: Path) -> None:
    """Refuse a fresh run (no ``--resume``) in a directory that already holds one: it would
    overwrite the run's checkpoint and tokenizer and append to its evals.jsonl.

    A lone ``tokenizer.json`` (no checkpoint, no evals.jsonl) is no run: a run that failed
    before its first checkpoint left it, no weights were trained over it, and nothing reads it
    back (a resume takes the checkpoint's own tokenizer), so the new run replaces it."""
    held = [name for name in RUN_FILES if (out / name).exists()]
    if held == ["tokenizer.json"]:
        log(f"{out / 'tokenizer.json'} is from a run that left no checkpoint: it is replaced")
        return
    if held:
        raise DecisionInputError(
            f"{out} already holds a run ({', '.join(held)}): continue it with --resume, or "
            "start a new one in another directory (--out-dir or run.out_dir)", "run.out_dir",
        )


def check_out_dir(out_dir: str) -> None:
    """Refuse a run directory that cannot be made: empty (the working directory; ``--out-dir``
    overrides the config after its checks), a file, under a file, or under a directory that is
    not writable. Such a run failed with a traceback from ``mkdir`` once the tokenizer had been
    trained (and, for the Xiangqi driver, the games read)."""
    if not out_dir.strip():
        raise DecisionInputError("run.out_dir must name a directory, got ''", "run.out_dir")
    out = Path(out_dir)
    first = next((p for p in (out, *out.absolute().parents) if p.exists()), None)
    if first is None:
        return
    if not first.is_dir():
        what = "is a file" if first == out else f"is under {first}, a file"
        raise DecisionInputError(f"run directory {out_dir} {what}, not a directory",
                                 "run.out_dir")
    if not os.access(first, os.W_OK | os.X_OK):
        raise DecisionInputError(f"run directory {out_dir}: {first} is not writable",
                                 "run.out_dir")


RUN_LOCK = ".run.lock"  # the file hold_run_dir locks in a run directory


@contextlib.contextmanager
def hold_run_dir(out_dir: str) -> Iterator[None]:
    """Hold the run directory ``out_dir`` (made if needed) for the ``with`` block: an exclusive
    ``flock`` on its lock file ``RUN_LOCK``, which the OS drops when the process ends however it
    ends (SIGKILL included). A second run started into the same directory (fresh or ``--resume``)
    while one holds it is refused: both passed the checks of :func:`resume_point` before either
    wrote a file, then wrote each other's ``checkpoint.tmp``. The lock file is opened for
    writing (over NFS an exclusive ``flock`` needs it: a directory, opened read-only, gave
    EBADF) and stays (removing it would let a third run lock a new file beside a second that
    holds the old). A fresh directory this call made is removed again when the block fails
    before anything else was written into it. Where the file system has no locks, runs are not
    guarded."""
    check_out_dir(out_dir)
    out = Path(out_dir)
    made = [p for p in (out, *out.absolute().parents) if not p.exists()]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # what check_out_dir cannot tell (a read-only or virtual file system)
        raise DecisionInputError(f"cannot make the run directory {out}: {exc.strerror or exc}",
                                 "run.out_dir") from None
    lock = out / RUN_LOCK
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise DecisionInputError(f"cannot write in the run directory {out}: "
                                 f"{exc.strerror or exc}", "run.out_dir") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                log(f"warning: cannot lock the run directory {out} ({exc.strerror}): a second "
                    "run started into it would not be refused")
            else:
                raise DecisionInputError(
                    f"run directory {out} is in use by another training run (started into the "
                    "same directory, still running): wait for it to end, or give another "
                    "--out-dir", "run.out_dir",
                ) from None
        try:
            yield
        except BaseException:
            # a directory of this run alone, still empty: its lock file goes with it (one the
            # run wrote into keeps it: "the file stays")
            if made and {p.name for p in out.iterdir()} <= {RUN_LOCK}:
                lock.unlink(missing_ok=True)
            for path in made:  # innermost first; only what is still empty
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise
    finally:
        os.close(fd)  # drops the lock


def resume_point(out: Path, resume: bool) -> Path | None:
    """The checkpoint of ``out`` that ``--resume`` continues, or None for a fresh run, checked
    before anything is loaded or written: ``--resume`` over a checkpoint without trainer state
    is an error (it started a fresh run over it), and a fresh run in a directory that already
    holds one is refused (:func:`check_no_run`); ``--resume`` where there is no checkpoint yet
    starts a fresh run."""
    ckpt = recover_checkpoint(out)
    if resume and ckpt.exists():
        if not (ckpt / STATE_FILE).is_file():
            raise CheckpointError(
                f"cannot resume: {ckpt} has no {STATE_FILE} (optimiser, step, data position); "
                f"to train on from its weights, start a new run with --init-from {ckpt} and "
                "another --out-dir"
            )
        return ckpt
    if resume:
        log(f"no checkpoint in {ckpt}: starting a fresh run")
    else:
        check_no_run(out)
    return None


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


def trim_evals(path: Path, step: int) -> None:
    """Drop the records of ``path`` (evals.jsonl) after ``step``, the checkpoint a run resumes
    from: a run killed after a validation but before its next checkpoint wrote them, and the
    resumed run validates those steps again (a second record for the step, or one of another
    config's timeline). Lines that are not a record with a step are kept, except a torn last
    line (no newline: a run killed or out of disk while appending it), which the next record
    would otherwise be written onto."""
    if not path.is_file():
        return
    lines = path.read_text().splitlines(keepends=True)
    torn = bool(lines) and not lines[-1].endswith("\n")

    def later(line: str) -> bool:
        try:
            record = json.loads(line)
        except ValueError:
            return False
        return isinstance(record, dict) and isinstance(record.get("step"), int) \
            and record["step"] > step

    kept = [line for line in lines[:len(lines) - torn] if not later(line)]
    if len(kept) < len(lines):
        write_whole({path: "".join(kept)})  # a kill meanwhile keeps the old file whole
        later_records = len(lines) - torn - len(kept)
        log(f"{path}: dropped {later_records} record(s) after step {step}, the checkpoint's "
            "step (validated again as the run resumes)" + (" and a torn last line" if torn else ""))


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


# The files of a model directory (``checkpoint.save_checkpoint``): all an export may replace.
MODEL_FILE = re.compile(
    r"config\.json|tokenizer\.json|model\.safetensors(\.index\.json)?"
    r"|model-\d+-of-\d+\.safetensors"
)
# The scratch siblings of an export (DEST.tmp, written first; DEST.old, the previous export while
# they swap): what export_checkpoint writes and what check_export_dest checks by default.
EXPORT_TMP, EXPORT_OLD = ".tmp", ".old"


def check_export_dest(
    dest: str | Path,
    run_dir: str | Path,
    *,
    others_stay: bool = False,
    scratch: tuple[str, ...] = (EXPORT_TMP, EXPORT_OLD),
) -> Path:
    """``dest`` resolved, if an export of the run in ``run_dir`` may replace it whole, else a
    ``DecisionInputError``: it must not be the run directory or hold it (``--export .``
    replaced the run directory, checkpoint included), must not be one of the run's own
    entries (``checkpoint/`` ...), and may exist only as a directory of model files (empty, or
    a previous export). The same holds for its ``scratch`` siblings (``.tmp``, ``.old``),
    which the export writes and removes. ``runs/x/export`` inside the run directory is fine.

    ``others_stay``: an export that writes its model files into ``dest`` one by one and leaves
    the rest there (the Xiangqi player's, which keeps a model card beside them): ``dest`` may
    then be any directory, the run directory or one holding it included, but still not one of
    the run's entries nor a file; its scratch siblings are checked as above."""
    target = Path(dest).resolve()
    run = Path(run_dir).resolve()
    if not target.name:
        raise DecisionInputError(f"--export {dest}: the file-system root", "export")
    for path in (target, *(target.with_name(target.name + suffix) for suffix in scratch)):
        shown = dest if path == target else path
        kept = others_stay and path == target  # only model files there are replaced
        if run.is_relative_to(path) and not kept:
            raise DecisionInputError(
                f"--export {dest}: the export replaces {shown} whole, and it holds the run "
                f"directory {run_dir}; export to a new or empty directory, e.g. "
                f"{Path(run_dir) / 'export'}", "export",
            )
        for name in RUN_FILES:
            if path.is_relative_to(run / name):
                raise DecisionInputError(
                    f"--export {dest}: {shown} is the run's own {name}; export to a new or "
                    f"empty directory, e.g. {Path(run_dir) / 'export'}", "export",
                )
        if kept:
            if path.exists() and not path.is_dir():
                raise DecisionInputError(
                    f"--export {dest}: {shown} is a file, not a directory to write the model "
                    "into", "export",
                )
        elif path.exists() or path.is_symlink():
            other = _not_model_files(path)
            if other:
                raise DecisionInputError(
                    f"--export {dest}: {shown} holds {other}, which is not an exported model; "
                    "the export replaces the directory whole: give a new or empty one, or "
                    "a previous export", "export",
                )
    return target


def _not_model_files(path: Path) -> str | None:
    """What in ``path`` is not part of a model directory (None: nothing, it may be replaced)."""
    if not path.is_dir():
        return "a file" if path.exists() else "a broken link"
    for child in sorted(path.iterdir()):
        if not (child.is_file() and MODEL_FILE.fullmatch(child.name)):
            return repr(child.name)
    return None


def export_error(dest: Path, scratch: Path, checkpoint: str | Path, exc: Exception,
                 again: str) -> TrainingError:
    """The one-line error of an export whose files could not be written (``exc``, e.g. a full
    disk) into ``scratch``, which is removed: ``dest`` is as it was, the checkpoint whole, and
    ``again`` says how to export it once more."""
    shutil.rmtree(scratch, ignore_errors=True)
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return TrainingError(
        f"cannot export to {dest}: writing {scratch}: {reason}; {dest} is as it was and the "
        f"checkpoint {checkpoint} is whole: once the disk is fixed (space freed), export it "
        f"again ({again})"
    )


def export_checkpoint(checkpoint: str | Path, out_dir: str | Path) -> Path:
    """Write the checkpoint's model in bf16 (config.json, safetensors, tokenizer.json) only.

    It takes no lock: a caller exporting a run's own checkpoint holds the run directory
    (:func:`hold_run_dir`), as ``decision train --export`` does (:func:`train`'s ``export``).
    ``out_dir`` is checked first (:func:`check_export_dest`, the checkpoint's parent taken as
    the run directory): it is replaced whole, so only a new directory, an empty one or a
    previous export is taken."""
    from decision.model import load_model

    dest = check_export_dest(out_dir, Path(checkpoint).resolve().parent)
    model = load_model(checkpoint, dtype=torch.bfloat16)
    # Written beside ``dest`` and swapped in: an interrupted export leaves the previous one whole.
    tmp = dest.with_name(dest.name + EXPORT_TMP)
    old = dest.with_name(dest.name + EXPORT_OLD)
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        model.save(tmp)
    except Exception as exc:  # a full disk, an I/O error
        raise export_error(dest, tmp, checkpoint, exc,
                           "decision.train.recipe.export_checkpoint") from exc
    if dest.exists():
        if old.exists():
            shutil.rmtree(old)
        os.replace(dest, old)
    os.replace(tmp, dest)
    if old.exists():
        shutil.rmtree(old)
    return dest
