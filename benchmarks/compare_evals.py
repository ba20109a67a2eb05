"""Two checkpoints on the same held-out questions: B minus A, paired, per mode.

    .venv/bin/python benchmarks/compare_evals.py runs/d11-eval runs/d12-eval

Reads the ``records.jsonl`` that ``decision eval --out DIR`` writes for each checkpoint (the same
seeds and groups) and prints, for joint and standalone, B - A per question and in groups fully
correct with bootstrap intervals over groups (2,000 draws, 95 %; Newcombe's paired interval where
fewer than 10 groups hold a difference) and the discordant counts (right only in B / only in A),
and per question type. The two directories must hold the same modes and, in each, the same
(group_id, question_id) with the same gold and question type; otherwise it stops and says how A
and B differ.

Under the header it names the two models and their weights' fingerprints (``eval.json``'s
``setup``, beside ``records.jsonl``), and says in a ``# note:`` line what else differs between
the two setups (decoding options such as ``commit``, ``score_options`` and ``min_scope``, seeds,
level; run settings such as threads and batch size apart): comparing decoders on purpose is fine,
mixing a decoder change into a checkpoint comparison unseen is not. A directory without an
``eval.json`` setup is said to be so.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decision.metrics import (  # noqa: E402
    Estimate,
    Record,
    accuracy_by_qtype,
    paired_difference,
)
from decision.setups import setup_lines  # noqa: E402

MODES = ("joint", "standalone")


def _records(directory: Path, side: str) -> dict[str, list[Record]]:
    by_mode: dict[str, list[Record]] = defaultdict(list)
    path = directory / "records.jsonl"
    if not path.is_file():
        raise SystemExit(f"{side} ({directory}): no records.jsonl (written by decision eval --out)")
    with open(path) as f:
        for line in f:
            record = Record(**json.loads(line))  # as decision eval wrote it (asdict)
            by_mode[record.mode].append(record)
    return by_mode


def _setup(directory: Path) -> dict[str, Any] | None:
    """``eval.json``'s ``setup`` beside the records, or None where there is none."""
    try:
        setup = json.loads((directory / "eval.json").read_text()).get("setup")
    except (OSError, ValueError, AttributeError):
        return None
    return setup if isinstance(setup, dict) else None


def _check(a: dict[str, list[Record]], b: dict[str, list[Record]], dir_a: Path, dir_b: Path
           ) -> list[str]:
    """The modes both cover; stop with a message naming A and B where they differ."""
    names = f"A ({dir_a}) and B ({dir_b})"
    modes = [m for m in MODES if m in a or m in b]
    for mode in modes:
        if mode not in a or mode not in b:
            has, lacks = ("A", "B") if mode in a else ("B", "A")
            raise SystemExit(f"{names}: {has} has {mode} records and {lacks} has none")
    if not modes:
        raise SystemExit(f"{names}: no joint or standalone records")
    for mode in modes:
        ka = {(r.group_id, r.question_id): r for r in a[mode]}
        kb = {(r.group_id, r.question_id): r for r in b[mode]}
        if len(ka) != len(a[mode]) or len(kb) != len(b[mode]):
            side = "A" if len(ka) != len(a[mode]) else "B"
            raise SystemExit(f"{names}: {side} has a (group_id, question_id) twice in {mode}")
        if ka.keys() != kb.keys():
            only_a, only_b = sorted(ka.keys() - kb.keys()), sorted(kb.keys() - ka.keys())
            raise SystemExit(f"{names} cover different {mode} questions: {len(only_a)} only in A "
                             f"(e.g. {only_a[:3]}), {len(only_b)} only in B (e.g. {only_b[:3]})")
        for field in ("gold", "qtype"):
            differ = sorted(k for k in ka if getattr(ka[k], field) != getattr(kb[k], field))
            if differ:
                k = differ[0]
                raise SystemExit(f"{names}: {len(differ)} {mode} questions have a different "
                                 f"{field}, e.g. {k}: {getattr(ka[k], field)!r} in A, "
                                 f"{getattr(kb[k], field)!r} in B (not the same questions)")
    return modes


def _cell(e: Estimate, discordant: tuple[int, int], method: str) -> str:
    how = "" if method == "bootstrap" else ", Newcombe"
    return (f"{100 * e.value:+.1f} [{100 * e.low:+.1f}, {100 * e.high:+.1f}] "
            f"({discordant[0]} / {discordant[1]}{how})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", type=Path, help="eval directory of checkpoint A (the baseline)")
    p.add_argument("b", type=Path, help="eval directory of checkpoint B")
    args = p.parse_args(argv)
    a, b = _records(args.a, "A"), _records(args.b, "B")
    modes = _check(a, b, args.a, args.b)
    print(f"# B = {args.b}, A = {args.a}; B - A, paired, 95 % bootstrap over groups "
          "(right only in B / only in A)")
    for line in setup_lines(_setup(args.a), _setup(args.b), "no eval.json with a setup"):
        print(f"# {line}")
    print("| mode | per question | groups fully correct |\n|---|---|---|")
    for mode in modes:
        d = paired_difference(b[mode], a[mode])
        print(f"| {mode} | {_cell(d.question, d.question_discordant, d.question_method)} | "
              f"{_cell(d.group, d.group_discordant, d.group_method)} |")
    heads = [f"{mode} {side}" for mode in modes for side in ("A", "B")]
    print(f"\n| question type | {' | '.join(heads)} | n |")
    print("|---|" + "---:|" * (len(heads) + 1))
    stats = [accuracy_by_qtype(side[mode]) for mode in modes for side in (a, b)]
    for qtype, first in stats[0].items():
        cells = " | ".join(f"{100 * s[qtype].accuracy:.1f}%" for s in stats)
        print(f"| {qtype} | {cells} | {first.n} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
