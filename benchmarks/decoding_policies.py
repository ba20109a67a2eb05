"""Joint-mode accuracy and block forwards per group under unmasking policies, one checkpoint.

    .venv/bin/python benchmarks/decoding_policies.py        # the policies of docs/benchmarks.md
    .venv/bin/python benchmarks/decoding_policies.py --groups 200 --policy 0.9:row:token 0.9:slot

Each policy is ``THRESHOLD:MIN_SCOPE[:COMMIT]`` (as in ``EngineConfig``: the "at least one a
step" rule per pass, ``row``, or per answer slot, ``slot``; a token it picks fixed with the rest
of its answer, ``answer``, the default, or alone, ``token``). Every policy decodes the same
held-out TEST groups (``apps.contracts``, level 2) with the same checkpoint; standalone at the
default policy is printed first as the reference. Prints per-question accuracy, the share of
groups fully correct and the mean number of block forwards a group's joint pass took.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from apps.contracts.generator import generate_groups  # noqa: E402
from apps.contracts.splits import TEST  # noqa: E402
from decision import load_model  # noqa: E402
from decision.evaluate import _requests, _same  # noqa: E402
from decision.joint.engine import EngineConfig  # noqa: E402

DEFAULT_POLICIES = ("0.9:row:answer", "0.9:row:token", "0.7:row:token", "0.5:row:token",
                    "0.9:slot:token")


def run(model: object, groups: list, mode: str, threshold: float, scope: str, commit: str,
        batch_size: int) -> tuple[float, float, float]:
    """(per-question accuracy, groups fully correct, mean steps per group) for one policy."""
    config = EngineConfig(min_scope=scope, commit=commit)  # type: ignore[arg-type]
    correct: list[bool] = []
    whole: list[bool] = []
    steps: list[int] = []
    for start in range(0, len(groups), batch_size):
        chunk = groups[start : start + batch_size]
        requests = _requests(chunk, mode)
        for request in requests:
            request["threshold"] = threshold
        for group, decision in zip(chunk, model.decide_many(requests, config=config), strict=True):
            answers = decision.by_id()
            marks = [_same(answers[q.id].value, q.gold) for q in group.questions]
            correct += marks
            whole.append(all(marks))
            steps.append(decision.steps)
    return statistics.fmean(correct), statistics.fmean(whole), statistics.fmean(steps)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="checkpoint directory (default: shipped)")
    parser.add_argument("--seed-start", type=int, default=TEST.start)
    parser.add_argument("--groups", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=25)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--policy", nargs="+", default=list(DEFAULT_POLICIES))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    policies = []
    for text in args.policy:
        threshold, scope, commit = (text.split(":") + ["answer"])[:3]
        if scope not in ("row", "slot") or commit not in ("answer", "token"):
            parser.error(f"policy {text!r}: want THRESHOLD:row|slot[:answer|token]")
        policies.append((float(threshold), scope, commit))
    model = load_model(args.model)
    groups = list(generate_groups(args.seed_start, args.groups, level=2))
    print(f"# {args.groups} TEST groups from seed {args.seed_start}, model "
          f"{args.model or 'models/default'}, batch {args.batch_size}, threads {args.threads}")
    print("| mode | threshold | at least one a step per | commit | per question | groups fully "
          "correct | block forwards per group |")
    print("|---|---:|---|---|---:|---:|---:|")
    for mode, (threshold, scope, commit) in [("standalone", (0.9, "row", "answer"))] + [
        ("joint", p) for p in policies
    ]:
        acc, whole, steps = run(model, groups, mode, threshold, scope, commit, args.batch_size)
        per = "pass" if scope == "row" else "slot"
        print(f"| {mode} | {threshold:g} | {per} | {commit} | {100 * acc:.1f}% | "
              f"{100 * whole:.1f}% | {steps:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
