"""What a predictions file is made with, kept beside it (``OUT.run.json``), so that ``--resume``
continues only the same run: resumed with another model, input or decoding options, the file
would mix two runs' answers under one summary without a word.

The record holds the model's weights fingerprint (and its name), the input file's SHA-256, the
mode and the decoding options; a resume that differs in any of them is refused. It holds too the
batch size in groups and the device: a resume with others goes on with a warning, as its answers
may differ in the last digits from those of one uninterrupted run (padded batches, other
kernels), but are the same model's. A file from before records (none beside it) resumes with a
warning that nothing could be checked.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from decision.errors import DecisionInputError
from decision.files import write_whole
from decision.scoring.output import beside
from decision.serve.api import DecideOptions

# The keys compared on --resume, and how a difference is named in the refusal.
_CHECKED = {"model_fingerprint": "another model", "input_sha256": "other input file contents",
            "mode": "another mode", "options": "other decoding options"}
# The keys that only warn on --resume: the same answers up to rounding.
_NOTED = {"batch_groups": "batch size in groups", "device": "device"}


def run_record_path(out_path: Path) -> Path:
    """``OUT.csv`` -> ``OUT.run.json`` (``output.beside``, as the summary is named)."""
    return beside(out_path, "run.json")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run_record(engine: Any, input_path: Path, mode: str, options: DecideOptions,
               batch_groups: int) -> dict[str, Any]:
    """The record of a run: the engine's ``fingerprint`` (its name where it has none) and its
    ``device`` (None where it has none)."""
    return {
        "model": engine.name,
        "model_fingerprint": getattr(engine, "fingerprint", engine.name),
        "input": str(input_path),
        "input_sha256": file_sha256(input_path),
        "mode": mode,
        "options": options.model_dump(mode="json"),
        "batch_groups": batch_groups,
        "device": getattr(engine, "device", None),
    }


def check_or_write(out_path: Path, record: dict[str, Any], *, resume: bool) -> str | None:
    """Before a run writes a prediction: on ``resume`` of an existing file, refuse a record that
    differs (naming what); else (a new file, or one replaced) write the record. Returns the
    warning to show when the file has no record to check."""
    path = run_record_path(out_path)
    if resume and out_path.is_file() and out_path.stat().st_size > 0:
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return (f"warning: {out_path} has no run record ({path.name}; written before "
                    "records were kept): the model and input it was started with cannot be "
                    "checked")
        except (OSError, ValueError) as exc:
            raise DecisionInputError(f"{path}: cannot read the run record: {exc}", "out") from None
        changed = [label for key, label in _CHECKED.items()
                   if not isinstance(kept, dict) or kept.get(key) != record[key]]
        if changed:
            raise DecisionInputError(
                f"{out_path} was started with {' and '.join(changed)} ({path.name}): "
                "resuming would mix two runs' answers; resume with the same, or pass "
                "--overwrite to start again", "resume",
            )
        # a record from before these keys were kept has none of them: nothing to compare
        noted = [f"{label} {kept[key]!r} (now {record[key]!r})" for key, label in _NOTED.items()
                 if key in kept and kept[key] != record[key]]
        if noted:
            return (f"warning: {out_path} was started with {' and '.join(noted)}: the answers "
                    "written from here on may differ in the last digits from those one "
                    "uninterrupted run would give")
        return None
    try:
        write_whole({path: json.dumps(record, indent=2) + "\n"})
    except OSError as exc:
        raise DecisionInputError(f"{path}: cannot write: {exc.strerror}", "out") from None
    return None
