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

import statistics

from heldout import model_and_groups, parser  # sets up sys.path; first

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
    options = parser(__doc__.splitlines()[0], threads=1)
    options.add_argument("--policy", nargs="+", default=list(DEFAULT_POLICIES))
    args = options.parse_args()
    policies = []
    for text in args.policy:
        parts = text.split(":")
        threshold, scope, commit = (parts + ["answer"])[:3] if len(parts) in (2, 3) else ("",) * 3
        try:
            value = float(threshold)
        except ValueError:
            value = float("nan")
        if (not 0.0 < value <= 1.0 or scope not in ("row", "slot")
                or commit not in ("answer", "token")):
            options.error(f"policy {text!r}: want THRESHOLD:row|slot[:answer|token], "
                          "THRESHOLD in (0, 1]")
        policies.append((value, scope, commit))
    model, groups = model_and_groups(args)
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
