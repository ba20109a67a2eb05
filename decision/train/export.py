"""The export of a run's checkpoint: its model alone in bf16 (config.json, safetensors,
tokenizer.json), written beside the destination and swapped in, and the check of a destination
before a run trains (never the run directory, one of its entries, nor a directory of other
files, since an export replaces it whole).

Apart from the recipe because it is a job of its own on a finished checkpoint: ``decision train
--export`` runs it once training ends, and the Xiangqi driver's export shares its checks and its
error line.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import torch

from decision.errors import DecisionInputError, TrainingError
from decision.train.run_dir import RUN_FILES

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
    (:func:`~decision.train.run_dir.hold_run_dir`), as ``decision train --export`` does
    (:func:`~decision.train.recipe.train`'s ``export``).
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
