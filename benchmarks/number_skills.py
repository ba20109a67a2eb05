"""Number skills on held-out documents: copying a stated number, comparing two, counting the
days between two stated dates, and the days an event took from its two dates.

    .venv/bin/python benchmarks/number_skills.py          # shipped model, 500 TEST groups
    .venv/bin/python benchmarks/number_skills.py --model runs/d12/export

On each held-out TEST document (``apps.contracts``, level 2) the questions of the training
recipe's synthetic rows (``decision.train.data``) are asked, drawn with a fixed seed so every
model gets the same ones:

- **copy**: "Which number comes right after "<cue>"?" for a value the document states once,
  in a slot of random width (``copy_question(hard=True)``), scored by the number's digit count;
- **compare**: "Is the number after "<a>" at least the number after "<b>"?" (two values of the
  same digit count where the document has them), asked alone (standalone) and in one joint pass
  with the two copy questions it derives from; the difference is paired over documents;
- **days between**: "How many days after <date> is <date>?" for two dates of the document at
  most 60 days apart (``days_between_question``), scored by the size of the difference;
- **days taken from two dates**: the group's question of the days a return or a report took, on
  documents that give only the event's two dates, asked alone and in one joint pass with the day
  of the month of each date (``event_day_questions``).

The documents are held out; the question templates are the ones copy, compare (stage 10 on),
days-between (stage 13 on) and event-day rows (stage 14 on) train on, so for a model trained
with them this measures the skill on unseen documents, and for one trained without them,
transfer.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from heldout import decide_in_batches, model_and_groups, parser  # sets up sys.path; first

from decision.evaluate import _requests, _same  # noqa: E402
from decision.metrics import Record, paired_difference  # noqa: E402
from decision.train.data import (  # noqa: E402
    answer_text,
    compare_question,
    copy_question,
    days_between_question,
    event_day_questions,
    event_line,
)


def _answers(model, groups, mode: str, batch_size: int) -> list[dict[str, object]]:
    return [{a.id: a.value for a in decision.answers}
            for decision in decide_in_batches(model, _requests(groups, mode), batch_size)]


def _score_by_bucket(model, groups, batch_size: int,
                     bucket: Callable[[int], int]) -> tuple[Counter[int], Counter[int]]:
    """Right and asked counts per ``bucket(gold)`` of one-question groups, decoded standalone."""
    right: Counter[int] = Counter()
    asked: Counter[int] = Counter()
    for group, answers in zip(groups, _answers(model, groups, "standalone", batch_size),
                              strict=True):
        (q,) = group.questions
        asked[bucket(q.gold)] += 1
        right[bucket(q.gold)] += _same(answers[q.id], q.gold)
    return right, asked


def _print_buckets(title: str, right: Counter[int], asked: Counter[int],
                   label: Callable[[int], str]) -> None:
    print(f"\n| {title} | answered it |\n|---|---:|")
    for b in sorted(asked):
        print(f"| {label(b)} | {right[b]}/{asked[b]} ({100 * right[b] / asked[b]:.0f}%) |")


def _alone_vs_with_sources(model, rows, batch_size: int, title: str, joint_label: str,
                           sources_label: str) -> None:
    """The last question of each row asked alone (standalone) and in one joint pass with the
    questions before it, which it derives from; the difference paired over documents."""
    if not rows:  # a small --groups can hold none: say so instead of dividing by zero
        print(f"\n| {title} | correct |\n|---|---:|\n| none in these groups | 0/0 |")
        return
    alone = [replace(g, questions=[g.questions[-1]]) for g in rows]
    records: dict[str, list[Record]] = {"joint": [], "standalone": []}
    sources_right = 0
    for mode, batch in (("joint", rows), ("standalone", alone)):
        for group, answers in zip(batch, _answers(model, batch, mode, batch_size), strict=True):
            q = group.questions[-1]
            records[mode].append(Record(group.group_id, title, _same(answers[q.id], q.gold),
                                        mode=mode))
            if mode == "joint":
                sources_right += all(_same(answers[s.id], s.gold) for s in group.questions[:-1])
    n = len(rows)
    print(f"\n| {title} | correct |\n|---|---:|")
    for mode, label in (("standalone", "alone (standalone)"), ("joint", joint_label)):
        ok = sum(r.correct for r in records[mode])
        print(f"| {label} | {ok}/{n} ({100 * ok / n:.1f}%) |")
    top = Counter(answer_text(g.questions[-1].gold) for g in rows).most_common(1)[0][1]
    paired = paired_difference(records["joint"], records["standalone"])
    diff = paired.question
    # with few discordant documents the interval is Newcombe's, not the bootstrap's
    method = ("bootstrap over documents" if paired.question_method == "bootstrap"
              else "Newcombe, few discordant documents")
    print(f"\nmost common answer {100 * top / n:.1f}%; {sources_label} in the joint pass "
          f"{sources_right}/{n}; joint - standalone {100 * diff.value:+.1f} pts "
          f"[{100 * diff.low:+.1f}, {100 * diff.high:+.1f}] ({method})")


def main() -> int:
    args = parser(__doc__.splitlines()[0]).parse_args()
    model, groups = model_and_groups(args)
    rng = random.Random(0)
    copies = [c for g in groups if (c := copy_question(g, rng, hard=True)) is not None]
    compares = [c for g in groups if (c := compare_question(g, rng, with_sources=True)) is not None]
    print(f"# {args.model or 'models/default'}: {len(groups)} TEST groups from seed "
          f"{args.seed_start}")

    right, asked = _score_by_bucket(model, copies, args.batch_size, lambda gold: len(str(gold)))
    _print_buckets("copy: digits of the stated value", right, asked, str)

    _alone_vs_with_sources(model, compares, args.batch_size, "compare",
                           "with its two copy questions (joint)", "both numbers copied right")
    between = [b for g in groups if (b := days_between_question(g, rng)) is not None]
    right, asked = _score_by_bucket(model, between, args.batch_size,
                                    lambda gold: min(gold // 10, 3))
    _print_buckets("days between two stated dates", right, asked,
                   lambda b: "30-60" if b == 3 else f"{10 * b}-{10 * b + 9}")
    total = sum(right.values())
    print(f"| all | {total}/{len(between)} ({100 * total / max(len(between), 1):.0f}%) |")
    events = [e for g in groups if (e := event_day_questions(g, rng)) is not None
              and "took" not in event_line(g.document, e.questions[-1])[0]]
    _alone_vs_with_sources(model, events, args.batch_size,
                           "days taken, the document giving only the two dates",
                           "with the day of the month of each date (joint)", "both days read right")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
