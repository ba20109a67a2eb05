"""``decision score``: batch-score a question-group CSV into predictions and a summary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "score", help="score a question-group CSV (predictions + summary)",
        description="Decide every group of INPUT.csv, write predictions to OUT.csv group by "
        "group, and a summary (OUT.summary.json, OUT.summary.md) with accuracy metrics when "
        "the CSV has gold answers.",
    )
    p.add_argument("input", metavar="INPUT.csv", help="group_id,document,question_id,question,"
                   "answer_type,options,gold")
    p.add_argument("--out", required=True, metavar="OUT.csv", help="predictions file")
    p.add_argument("--mode", choices=["joint", "standalone", "both"], default="joint",
                   help="joint: a group's questions in one pass; standalone: one question a "
                   "pass; both: a row of each for every question (default: %(default)s)")
    existing = p.add_mutually_exclusive_group()
    existing.add_argument("--resume", action="store_true",
                          help="continue an interrupted run: keep the groups complete in OUT.csv")
    existing.add_argument("--overwrite", action="store_true",
                          help="replace an existing OUT.csv (without --resume or --overwrite, "
                          "an existing non-empty OUT.csv is refused)")
    p.add_argument("--strict", action="store_true",
                   help="stop at the first malformed row instead of skipping it")
    p.add_argument("--model", metavar="DIR", default=None,
                   help="checkpoint directory (default: the shipped models/default)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--batch-groups", type=int, default=8,
                   help="groups decided together in one batch (default: %(default)s)")
    p.add_argument("--threshold", type=float, default=0.9)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from decision.errors import DecisionInputError
    from decision.scoring.runner import check_paths, score_csv
    from decision.scoring.summary import write_summary
    from decision.serve.api import DecideOptions
    from decision.serve.engine import ModelEngine

    try:
        options = DecideOptions(threshold=args.threshold, max_steps=args.max_steps)
    except ValidationError as exc:
        err = exc.errors()[0]
        flag = "--" + str(err["loc"][0]).replace("_", "-")  # --max-steps, as it is typed
        raise DecisionInputError(f"{flag}: {err['msg']}", str(err["loc"][0])) from None
    input_path, out_path = Path(args.input), Path(args.out)
    if input_path.is_dir():
        raise DecisionInputError(f"{input_path}: is a folder; the input is one CSV file of "
                                 "question groups", "input")
    if not input_path.is_file():
        raise DecisionInputError(f"{input_path}: no such file", "input")
    check_paths(input_path, out_path, resume=args.resume, overwrite=args.overwrite)
    engine = ModelEngine.load(args.model, device=args.device)
    try:
        result = score_csv(
            input_path, out_path, engine, mode=args.mode, resume=args.resume,
            overwrite=args.overwrite, strict=args.strict,
            batch_groups=args.batch_groups, options=options, show_progress=not args.no_progress,
        )
        # in the try: interrupted while the summary is written, the run says how to finish it
        json_path, md_path = write_summary(result, out_path, engine.name, input_path)
    except KeyboardInterrupt:
        print(f"decision score: interrupted; the groups done so far are in {out_path}: "
              f"{_how_to_continue(args)} to continue", file=sys.stderr)
        return 130
    except OSError as exc:
        if exc.filename is None:  # not a file's write (the predictions' name theirs)
            raise
        # a full disk, an I/O error, a disk remounted read-only: the groups written whole are
        # kept (a torn last group is cut off by --resume), so say where and how to go on
        print(f"decision score: error: cannot write {exc.filename}: {exc.strerror}; the groups "
              f"done so far are in {out_path}: {_how_to_continue(args)} to continue",
              file=sys.stderr)
        return 1
    print(
        f"scored {result.scored} groups ({result.resumed} kept from before, "
        f"{len(result.problems)} rows/groups skipped); predictions {out_path}; "
        f"summary {json_path} and {md_path}",
        file=sys.stderr,
    )
    return 0


def _how_to_continue(args: argparse.Namespace) -> str:
    """How to continue a run that stopped: with ``--resume``, as the same command or not."""
    if args.resume:
        return "run the same command again"
    if args.overwrite:
        return "run it again with --resume instead of --overwrite"
    return "run it again with --resume"
