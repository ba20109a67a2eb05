"""CLI: write generated contract groups to a batch-scoring CSV (with gold answers).

    python -m apps.contracts.generate --seed-start 20000000 --groups 500 --level 2 --out test.csv

The seed range must lie inside one split (apps/contracts/splits.py); the split is printed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator

from apps.contracts.csv_format import write_groups
from apps.contracts.generator import LEVELS, generate_groups
from apps.contracts.splits import SPLITS, split_of
from apps.contracts.types import Group
from decision.errors import DecisionInputError


def _with_progress(groups: Iterator[Group], total: int, every: int) -> Iterator[Group]:
    start = time.monotonic()
    for done, group in enumerate(groups, start=1):
        yield group
        if done % every == 0 or done == total:
            rate = done / max(time.monotonic() - start, 1e-9)
            print(f"  {done}/{total} groups ({rate:.0f}/s)", file=sys.stderr, flush=True)


def range_split(first: int, last: int) -> str | None:
    """The one split holding every seed of ``first..last`` (None: the range is outside all).

    Raises DecisionInputError when the range touches two splits, or a split and seeds outside
    every split (e.g. a range starting and ending outside the splits but spanning one).
    """
    split = split_of(first)
    touched = [s.name for s in SPLITS.values() if first < s.stop and last >= s.start]
    if touched != ([split] if split else []) or split_of(last) != split:
        names = " and ".join(dict.fromkeys([split or "none", *touched, split_of(last) or "none"]))
        raise DecisionInputError(f"seeds {first}..{last} straddle splits ({names}); keep a file "
                                 "inside one split", "groups")
    return split


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write generated contract groups as CSV.")
    parser.add_argument("--seed-start", type=int, required=True, help="first seed")
    parser.add_argument("--groups", type=int, required=True, help="number of groups (seeds)")
    parser.add_argument("--level", type=int, default=2, choices=LEVELS,
                        help="1: only the relevant clauses; 2: full documents (default)")
    parser.add_argument("--out", required=True, help="CSV file to write")
    args = parser.parse_args(argv)
    try:
        if args.groups < 1:
            raise DecisionInputError("--groups must be at least 1", "groups")
        if args.seed_start < 0:
            raise DecisionInputError("--seed-start must be >= 0", "seed_start")
        first, last = args.seed_start, args.seed_start + args.groups - 1
        split = range_split(first, last)
        print(f"seeds {first}..{last} (split: {split or 'none'}), level {args.level}",
              file=sys.stderr)
        groups = generate_groups(first, args.groups, args.level)
        if args.groups >= 1000:
            groups = _with_progress(groups, args.groups, max(1000, args.groups // 20))
        rows = write_groups(groups, args.out)
    except DecisionInputError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    except OSError as exc:  # a missing folder, a directory, no permission, a full disk
        print(f"error: cannot write {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.groups} groups, {rows} questions to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
