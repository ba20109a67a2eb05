"""What the yes / no / "not stated" rules answer: gold against answer, per question type.

    .venv/bin/python benchmarks/rule_confusion.py                     # shipped model, joint
    .venv/bin/python benchmarks/rule_confusion.py --model runs/d12/export --mode standalone

Decodes the held-out TEST groups (``apps.contracts``, level 2) and counts, for every question
type whose answer is a choice among yes / no / "not stated", each (gold, answer) pair. It tells a
rule the model applies from one it answers with the type's usual value.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from heldout import decide_in_batches, model_and_groups, parser  # sets up sys.path; first

from decision.evaluate import _requests  # noqa: E402

OUTCOMES = ("yes", "no", "not stated")


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--mode", choices=("joint", "standalone"), default="joint")
    args = p.parse_args()
    model, groups = model_and_groups(args)
    counts: dict[str, Counter[tuple[str, str]]] = defaultdict(Counter)
    decisions = decide_in_batches(model, _requests(groups, args.mode), args.batch_size)
    for group, decision in zip(groups, decisions, strict=True):
        answers = decision.by_id()
        for q in group.questions:
            if q.answer.get("type") == "choice" and set(q.answer["options"]) == set(OUTCOMES):
                counts[q.qtype][(q.gold, answers[q.id].value)] += 1
    print(f"# {args.model or 'models/default'}, {args.mode}: {len(groups)} TEST groups from seed "
          f"{args.seed_start}; cells: gold -> answer")
    head = [f"{g} -> {a}" for g in OUTCOMES for a in OUTCOMES]
    print("| question type | " + " | ".join(head) + " |")
    print("|---|" + "---:|" * len(head))
    for qtype in sorted(counts):
        cells = [str(counts[qtype][(g, a)]) for g in OUTCOMES for a in OUTCOMES]
        print(f"| {qtype} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
