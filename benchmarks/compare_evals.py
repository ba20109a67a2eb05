"""Two checkpoints on the same held-out questions: B minus A, paired, per mode.

    .venv/bin/python benchmarks/compare_evals.py runs/d11-eval runs/d12-eval

Reads the ``records.jsonl`` that ``decision eval --out DIR`` writes for each checkpoint (the same
seeds and groups) and prints, for joint and standalone, B - A per question and in groups fully
correct with bootstrap intervals over groups (2,000 draws, 95 %), and per question type.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decision.metrics import Record, accuracy_by_qtype, paired_difference  # noqa: E402


def _records(directory: Path) -> dict[str, list[Record]]:
    by_mode: dict[str, list[Record]] = defaultdict(list)
    with open(directory / "records.jsonl") as f:
        for line in f:
            record = Record(**json.loads(line))  # as decision eval wrote it (asdict)
            by_mode[record.mode].append(record)
    return by_mode


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", type=Path, help="eval directory of checkpoint A (the baseline)")
    p.add_argument("b", type=Path, help="eval directory of checkpoint B")
    args = p.parse_args()
    a, b = _records(args.a), _records(args.b)
    print(f"# B = {args.b}, A = {args.a}; B - A, paired, 95 % bootstrap over groups")
    print("| mode | per question | groups fully correct |\n|---|---|---|")
    for mode in ("joint", "standalone"):
        d = paired_difference(b[mode], a[mode])
        print(f"| {mode} | {100 * d.question.value:+.1f} [{100 * d.question.low:+.1f}, "
              f"{100 * d.question.high:+.1f}] | {100 * d.group.value:+.1f} "
              f"[{100 * d.group.low:+.1f}, {100 * d.group.high:+.1f}] |")
    print("\n| question type | joint A | joint B | standalone A | standalone B | n |")
    print("|---|---:|---:|---:|---:|---:|")
    stats = [accuracy_by_qtype(side[mode]) for mode in ("joint", "standalone") for side in (a, b)]
    for qtype, first in stats[0].items():
        cells = " | ".join(f"{100 * s[qtype].accuracy:.1f}%" for s in stats)
        print(f"| {qtype} | {cells} | {first.n} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
