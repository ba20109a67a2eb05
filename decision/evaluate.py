"""``decision eval``: joint vs standalone on the same generated question groups, one checkpoint.

For each group of ``--groups`` consecutive seeds from ``--seed-start`` (use TEST seeds,
apps/contracts/splits.py, for reported numbers), the model answers every question once in joint
mode (all slots in one block) and once in standalone mode (one question per pass), through the
product decoder ``decide_many`` (schema-constrained). The statistics (decision.metrics.summarize):
per-question accuracy with a standard error clustered by group, share of groups fully correct with
a Wilson interval, the independence baseline E[p^k], accuracy per question type beside the
majority baseline, and the paired joint-minus-standalone difference with a bootstrap interval over
groups. Latency: the wall time of each decoded batch divided by its groups (amortised per group).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from decision.errors import DecisionInputError

TASKS = ("contracts",)
MODES = ("joint", "standalone")
MIN_SCOPES = ("row", "slot")
COMMITS = ("token", "answer")


def _requests(groups: Sequence[Any], mode: str, score_options: bool = False
              ) -> list[dict[str, Any]]:
    return [
        {
            "document": g.document,
            "questions": [{"id": q.id, "text": q.text, "answer": q.answer} for q in g.questions],
            "mode": mode,
            "score_options": score_options,
        }
        for g in groups
    ]


def _same(value: Any, gold: Any) -> bool:
    """Typed equality (a bool never equals an int here, unlike Python's ``True == 1``)."""
    return type(value) is type(gold) and value == gold


def warn_unless_test(seed_start: int, groups: int) -> None:
    """Warn on stderr unless the ``groups`` seeds from ``seed_start`` are all TEST seeds
    (apps/contracts/splits.py): reported numbers come from TEST, never from the TRAIN seeds a
    model learnt from nor the VALIDATION seeds that select models. ``decision eval`` and the
    benchmarks that decode held-out groups (benchmarks/heldout.py) say it alike."""
    from apps.contracts.splits import TEST, split_of

    last = seed_start + groups - 1
    if not (seed_start in TEST and last in TEST):  # TEST is one range: both ends in it, all are
        # VALIDATION seeds select models and are no reported number either (only TRAIN warned)
        splits = {split_of(s) for s in (seed_start, last)}
        print(f"warning: seeds {seed_start} to {last} are not all TEST seeds (here: "
              f"{', '.join(sorted(s or 'none' for s in splits))}); reported numbers use TEST "
              f"seeds, {TEST.start} to {TEST.stop - 1}", file=sys.stderr)


def evaluate_groups(
    model: Any,
    groups: Sequence[Any],
    batch_size: int = 16,
    log: Any = None,
    min_scope: str = "row",
    commit: str = "answer",
    score_options: bool = False,
) -> tuple[list[Any], dict[str, list[float]]]:
    """Decode every group in both modes; return metric records and per-group latencies (ms).

    ``min_scope``: the decoder's minimum-progress rule (``EngineConfig.min_scope``): at least one
    token a step per pass ("row", the default) or per answer slot ("slot"); ``commit``: a token
    that rule picks is fixed with the rest of its answer ("answer", the default) or alone
    ("token"); ``score_options``: closed questions answered by scoring their options.
    """
    from decision.joint.engine import EngineConfig
    from decision.metrics import Record

    config = EngineConfig(min_scope=min_scope, commit=commit)

    records: list[Record] = []
    latency: dict[str, list[float]] = {m: [] for m in MODES}
    for mode in MODES:
        for start in range(0, len(groups), batch_size):
            chunk = groups[start : start + batch_size]
            t0 = time.perf_counter()
            decisions = model.decide_many(_requests(chunk, mode, score_options), config=config)
            per_group = (time.perf_counter() - t0) * 1000 / len(chunk)
            latency[mode].extend([per_group] * len(chunk))
            for group, decision in zip(chunk, decisions, strict=True):
                answers = decision.by_id()
                for q in group.questions:
                    value = answers[q.id].value
                    records.append(Record(group.group_id, q.id, _same(value, q.gold), q.qtype,
                                          mode, gold=json.dumps(q.gold), answer=json.dumps(value)))
            if log is not None:
                log(f"{mode}: {min(start + batch_size, len(groups))}/{len(groups)} groups")
    return records, latency


def latency_summary(latency: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {
        mode: {
            "mean_ms": statistics.fmean(v),
            "median_ms": statistics.median(v),
            "p90_ms": sorted(v)[math.ceil(0.9 * len(v)) - 1],  # nearest-rank
        }
        for mode, v in latency.items()
        if v
    }


def run_eval(
    model_dir: str | None,
    seed_start: int,
    groups: int,
    level: int = 2,
    batch_size: int = 16,
    out_dir: str | None = None,
    n_boot: int = 2000,
    min_scope: str = "row",
    commit: str = "answer",
    score_options: bool = False,
) -> tuple[dict[str, Any], str]:
    """Evaluate and return (JSON-ready result, Markdown report); write both when ``out_dir``."""
    if groups < 1:
        raise DecisionInputError("--groups must be >= 1", "groups")
    if seed_start < 0:  # before the model loads, as every other argument
        raise DecisionInputError(f"--seed-start must be >= 0, got {seed_start}", "seed_start")
    if batch_size < 1:
        raise DecisionInputError("--batch-size must be >= 1", "batch_size")
    if min_scope not in MIN_SCOPES:
        raise DecisionInputError(f"--min-scope must be one of {MIN_SCOPES}", "min_scope")
    if commit not in COMMITS:
        raise DecisionInputError(f"--commit must be one of {COMMITS}", "commit")
    out = Path(out_dir) if out_dir else None
    made: list[Path] = []  # the folders made for --out, removed again if the run fails
    if out is not None:  # before the evaluation, not after it (its results lost)
        made = [p for p in (out, *out.parents) if not p.exists()]
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DecisionInputError(f"--out {out_dir}: cannot make the folder: {exc}",
                                     "out") from None
    try:
        return _evaluate(model_dir, seed_start, groups, level, batch_size, out, n_boot,
                         min_scope, commit, score_options)
    except BaseException:
        for folder in made:  # innermost first; a folder something else wrote into stays
            try:
                folder.rmdir()
            except OSError:
                break
        raise


def _evaluate(model_dir: str | None, seed_start: int, groups: int, level: int,
              batch_size: int, out: Path | None, n_boot: int, min_scope: str, commit: str,
              score_options: bool) -> tuple[dict[str, Any], str]:
    """:func:`run_eval` once its arguments are checked and ``out`` (when given) exists."""
    import torch

    from apps.contracts.generator import generate_groups
    from apps.contracts.splits import split_of
    from decision.metrics import strict_json, summarize
    from decision.model import load_model
    from decision.model.checkpoint import weights_fingerprint

    last = seed_start + groups - 1
    splits = {split_of(s) for s in (seed_start, last)}
    warn_unless_test(seed_start, groups)
    model = load_model(model_dir, dtype=torch.float32)
    data = list(generate_groups(seed_start, groups, level))

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    records, latency = evaluate_groups(model, data, batch_size, log, min_scope, commit,
                                       score_options)
    result, report = summarize(records, n_boot=n_boot)
    result["latency_per_group"] = latency_summary(latency)
    result["setup"] = {
        "task": "contracts", "seed_start": seed_start, "groups": groups, "level": level,
        "splits": sorted(s or "none" for s in splits), "model": model_dir or "models/default",
        "model_fingerprint": weights_fingerprint(model),
        "batch_size": batch_size, "questions": len(records) // len(MODES),
        "threads": torch.get_num_threads(), "min_scope": min_scope,
        "commit": commit, "score_options": score_options,
    }
    lat = result["latency_per_group"]
    report = (
        f"Contracts, level {level}, seeds {seed_start}..{seed_start + groups - 1} "
        f"({result['setup']['questions']} questions), model {result['setup']['model']}, "
        f"at least one token a step per {'pass' if min_scope == 'row' else 'answer slot'}"
        + (", with its whole answer" if commit == "answer" else ", alone")
        + ("; closed questions answered by scoring their options" if score_options else "")
        + ".\n\n"
        + report
        + "\n\nLatency per group (batch wall time / groups, batch "
        + f"{batch_size}, CPU threads {torch.get_num_threads()}): "
        + "; ".join(f"{m} mean {v['mean_ms']:.0f} ms, median {v['median_ms']:.0f} ms"
                    for m, v in lat.items())
        + ".\n"
    )
    if out is not None:
        (out / "eval.json").write_text(json.dumps(strict_json(result), indent=2, allow_nan=False))
        (out / "eval.md").write_text(report)
        with (out / "records.jsonl").open("w") as f:
            for r in records:
                f.write(json.dumps(asdict(r)) + "\n")
    return result, report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--task", choices=TASKS, default="contracts")
    parser.add_argument("--seed-start", type=int, required=True)
    parser.add_argument("--groups", type=int, required=True)
    parser.add_argument("--level", type=int, default=2, choices=(1, 2))
    parser.add_argument("--model", default=None, help="checkpoint directory (default: shipped)")
    parser.add_argument("--out", default=None,
                        help="write eval.json, eval.md and records.jsonl (per question and "
                        "mode: gold, answer, correct) here")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--min-scope", choices=MIN_SCOPES, default="row",
                        help="at least one token a step per pass (row, the default) or per "
                             "answer slot (slot)")
    parser.add_argument("--commit", choices=COMMITS, default="answer",
                        help="a token that minimum picks is fixed with the rest of its answer "
                             "(answer, the default) or alone (token)")
    parser.add_argument("--score-options", action="store_true",
                        help="answer choice and boolean questions by scoring every option")


def run(args: argparse.Namespace) -> int:
    if args.threads is not None and args.threads < 1:  # 0 was ignored, -1 a torch traceback
        raise DecisionInputError(f"--threads must be >= 1, got {args.threads}", "threads")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    _, report = run_eval(args.model, args.seed_start, args.groups, args.level, args.batch_size,
                         args.out, min_scope=args.min_scope, commit=args.commit,
                         score_options=args.score_options)
    print(report)
    return 0


def register(subparsers: Any) -> None:
    """Add ``eval`` to the ``decision`` CLI."""
    parser = subparsers.add_parser("eval", help="joint vs standalone accuracy on held-out groups")
    add_arguments(parser)
    parser.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decision.evaluate", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    from decision.cli import exit_status  # the decision CLI's one mapping of errors to statuses

    return exit_status(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
