"""The run summary next to the predictions: ``OUT.summary.json`` and ``OUT.summary.md``
(``summary_paths``).

Metrics come from ``decision.metrics.summarize`` over every prediction with a gold answer (per
mode; joint and standalone side by side, with their paired difference, under ``--mode both``).
They are computed from the predictions *file*, so a resumed run reports the whole file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from decision.files import write_whole
from decision.metrics import Record, strict_json, summarize
from decision.scoring.gold import gold_key
from decision.scoring.output import PredictionRow, beside
from decision.scoring.runner import ScoreResult


def records(rows: list[PredictionRow]) -> list[Record]:
    """One metrics record per prediction that has a gold answer; the answer type is its qtype."""
    return [
        Record(
            group_id=row.group_id,
            question_id=row.question_id,
            correct=bool(row.correct),
            qtype=row.answer_type,
            mode=row.mode,
            gold=gold_key(row.answer_type, row.gold),  # TRUE and true: one gold
        )
        for row in rows
        if row.correct is not None
    ]


def summary_paths(out_path: Path) -> tuple[Path, Path]:
    """``OUT.csv`` -> ``OUT.summary.json`` and ``OUT.summary.md`` (``output.beside``)."""
    return beside(out_path, "summary.json"), beside(out_path, "summary.md")


def build_summary(
    result: ScoreResult, model_name: str, input_path: Path, out_path: Path
) -> tuple[dict[str, Any], str]:
    """The JSON-ready summary and its Markdown rendering."""
    rows = result.predictions
    scored_groups = {row.group_id for row in rows}
    recs = records(rows)
    metrics, metrics_md = summarize(recs) if recs else (None, "")
    data: dict[str, Any] = {
        "input": str(input_path),
        "predictions": str(out_path),
        "model": model_name,
        "modes": list(result.modes),
        "groups_in_input": len(result.groups),
        "groups_scored": len(scored_groups),
        "groups_kept_from_before": result.resumed,
        "predictions_written": len(rows),
        "predictions_with_gold": len(recs),
        "skipped": [p.as_dict() for p in result.problems],
        "metrics": metrics,
    }
    lines = [
        f"# Scoring summary: {input_path.name}",
        "",
        f"- model: `{model_name}`; modes: {', '.join(result.modes)}",
        f"- groups: {len(scored_groups)} scored of {len(result.groups)} read "
        f"({result.resumed} kept from an earlier run)",
        f"- predictions: {len(rows)} ({len(recs)} with gold) in `{out_path.name}`",
        f"- rows or groups skipped: {len(result.problems)}",
        "",
    ]
    if metrics is None:
        lines += ["No gold answers: no accuracy metrics.", ""]
    else:
        lines += ["## Accuracy", "", metrics_md, ""]
    if result.problems:
        lines += ["## Skipped", "", "| line | group | reason |", "|---:|---|---|"]
        for p in result.problems:
            lines.append(f"| {p.line} | {_cell(p.group_id or '')} | {_cell(p.reason)} |")
        lines.append("")
    return data, "\n".join(lines)


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell: a ``|`` or a line break in it (a group id may hold
    either) would split the row."""
    return text.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def write_summary(
    result: ScoreResult, out_path: Path, model_name: str, input_path: Path
) -> tuple[Path, Path]:
    """Write both summary files; returns their paths.

    Each is written whole to ``NAME.part`` and then renamed over ``NAME``: a run killed while it
    writes them leaves the summary it had before (a resumed run's, say) whole, never a torn or
    empty one.
    """
    data, markdown = build_summary(result, model_name, input_path, out_path)
    json_path, md_path = summary_paths(out_path)
    text = json.dumps(strict_json(data), indent=2, allow_nan=False) + "\n"
    write_whole({json_path: text, md_path: markdown})
    return json_path, md_path
