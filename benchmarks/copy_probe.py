"""Does a model copy a stated number? The notice days of held-out groups replaced at random.

    .venv/bin/python benchmarks/copy_probe.py                     # shipped model, 500 TEST groups
    .venv/bin/python benchmarks/copy_probe.py --model runs/d11/export

In every held-out TEST group (``apps.contracts``, level 2) that asks how many days of notice were
given, the record's "That was N days before ..." gets a random N from each range below, and the
question is asked as an integer in [0, 99999] (a slot wide enough for any of them). A model that
reads the stated number answers the new N; one that has learned a shortcut (the dates around
it, the usual values) answers something else. Same random numbers for every model (seed 0).
"""

from __future__ import annotations

import random
import re

from heldout import decide_in_batches, model_and_groups, parser  # sets up sys.path; first

from decision.evaluate import _requests  # noqa: E402

RANGES = ((1, 90), (100, 999), (1000, 9999))


def main() -> int:
    args = parser(__doc__.splitlines()[0]).parse_args()
    model, groups = model_and_groups(args, ("notice_given_days",))
    rng = random.Random(0)
    print(f"# {args.model or 'models/default'}: {len(groups)} TEST groups asking the days of "
          f"notice (of {args.groups} from seed {args.seed_start}); stated number replaced, "
          "asked in [0, 99999]")
    print("| stated number drawn from | answered the new number |")
    print("|---|---:|")
    for lo, hi in RANGES:
        requests = _requests(groups, "joint")
        targets: list[tuple[str, int] | None] = []
        for request, group in zip(requests, groups, strict=True):
            q = next(q for q in group.questions if q.qtype == "notice_given_days")
            new = rng.randint(lo, hi)
            request["document"], hits = re.subn(rf"\b{q.gold} days? before",
                                                f"{new} days before", request["document"])
            for spec in request["questions"]:
                if spec["id"] == q.id:
                    spec["answer"] = {"type": "integer", "minimum": 0, "maximum": 99999}
            targets.append((q.id, new) if hits == 1 else None)
        right = asked = 0
        decisions = decide_in_batches(model, requests, args.batch_size)
        for decision, target in zip(decisions, targets, strict=True):
            if target is not None:
                asked += 1
                right += decision.by_id()[target[0]].value == target[1]
        print(f"| {lo}-{hi} | {right}/{asked} ({100 * right / max(asked, 1):.0f}%) |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
