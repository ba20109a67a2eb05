"""Does a model read a number whatever the slot width? Integer questions asked with other bounds.

    .venv/bin/python benchmarks/integer_bounds.py                  # shipped model, 500 TEST groups
    .venv/bin/python benchmarks/integer_bounds.py --model runs/d10/export --groups 200

Decodes held-out TEST groups (``apps.contracts``, level 2) jointly, once per bound setting: each
question of the listed types is asked with its own schema, then with other ``[minimum,
maximum]`` bounds that still hold every gold answer of the type (a wider or narrower answer
slot; the question text and document are unchanged). Prints the accuracy of each type under
each setting. A model that reads the number from the text answers the same whatever the bounds.
"""

from __future__ import annotations

from collections import defaultdict

from heldout import decide_in_batches, model_and_groups, parser  # sets up sys.path; first

from decision.evaluate import _requests  # noqa: E402

# type -> bound settings; the first is the generator's own schema
BOUNDS: dict[str, list[tuple[int, int]]] = {
    "due_day": [(1, 31), (1, 1000)],
    "notice_given_days": [(0, 90), (0, 1000), (0, 99999)],
    "late_fee_amount": [(0, 1000), (0, 999), (0, 999999)],
    "monthly_payment": [(0, 10000), (0, 9999), (0, 99999)],
}


def main() -> int:
    args = parser(__doc__.splitlines()[0]).parse_args()
    model, groups = model_and_groups(args, BOUNDS)
    right: dict[tuple[str, tuple[int, int]], list[bool]] = defaultdict(list)
    for setting in range(max(len(b) for b in BOUNDS.values())):
        requests = _requests(groups, "joint")
        asked: list[list[tuple[int, int] | None]] = []
        for request, group in zip(requests, groups, strict=True):
            row = []
            for q, spec in zip(group.questions, request["questions"], strict=True):
                bounds = BOUNDS.get(q.qtype, [])
                if setting < len(bounds):
                    lo, hi = bounds[setting]
                    spec["answer"] = {"type": "integer", "minimum": lo, "maximum": hi}
                    row.append(bounds[setting])
                else:
                    row.append(None)
            asked.append(row)
        decisions = decide_in_batches(model, requests, args.batch_size)
        for group, decision, row in zip(groups, decisions, asked, strict=True):
            answers = decision.by_id()
            for q, bounds in zip(group.questions, row, strict=True):
                if bounds is not None:
                    right[(q.qtype, bounds)].append(answers[q.id].value == q.gold)
    print(f"# {args.model or 'models/default'}, {len(groups)} TEST groups with these types "
          f"(of {args.groups} from seed {args.seed_start}), joint mode")
    print("| question type | bounds | correct | accuracy |")
    print("|---|---|---:|---:|")
    for (qtype, (lo, hi)), marks in sorted(right.items(), key=lambda kv: (kv[0][0], kv[0][1][1])):
        mark = " (its own)" if (lo, hi) == BOUNDS[qtype][0] else ""
        print(f"| {qtype} | [{lo}, {hi}]{mark} | {sum(marks)}/{len(marks)} | "
              f"{100 * sum(marks) / len(marks):.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
