"""Two Xiangqi players on the same validation positions: B minus A in top-1 agreement, paired.

    .venv/bin/python benchmarks/compare_xiangqi_agreement.py A.json B.json

Reads the JSON that ``python -m apps.xiangqi.evaluate ... --out FILE agreement`` writes for each
player (the same ``--positions`` and ``--seed``, so the same positions in the same order) and
prints the difference of their top-1 agreement over all positions and over those never seen in
training, with the positions only one of them gets right and a 95 % interval for paired
proportions (normal approximation: se = sqrt(b + c - (b - c)^2 / n) / n).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decision.metrics import Z95  # noqa: E402


def paired_top1_difference(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """B - A on positions scored by both; ``b_only``/``a_only``: hits of one player alone."""
    pairs = list(zip(a, b, strict=True))
    n = max(1, len(pairs))  # an empty subset reports zeros
    b_only = sum(1 for x, y in pairs if y["hit"] and not x["hit"])
    a_only = sum(1 for x, y in pairs if x["hit"] and not y["hit"])
    diff = (b_only - a_only) / n
    se = math.sqrt(max(0.0, b_only + a_only - (b_only - a_only) ** 2 / n)) / n
    return {"n": len(pairs), "a_top1": sum(x["hit"] for x in a) / n,
            "b_top1": sum(y["hit"] for y in b) / n,
            "difference": diff, "ci95": (diff - Z95 * se, diff + Z95 * se),
            "b_only": b_only, "a_only": a_only}


def _results(path: Path) -> list[dict[str, Any]]:
    results = json.loads(path.read_text()).get("results")
    if not results:
        raise SystemExit(f"{path}: no per-position results (written by evaluate agreement --out "
                         "since 2026-12-02)")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    a, b = _results(args.a), _results(args.b)
    if [(r["ply"], r["gold"]) for r in a] != [(r["ply"], r["gold"]) for r in b]:
        raise SystemExit("the two files score different positions (use the same --positions "
                         "and --seed)")
    unseen = [i for i, r in enumerate(a) if not r["seen"]]
    for label, idx in (("all", range(len(a))), ("never in training", unseen)):
        d = paired_top1_difference([a[i] for i in idx], [b[i] for i in idx])
        lo, hi = d["ci95"]
        print(f"{label:>17}: n {d['n']}, A {100 * d['a_top1']:.1f} %, B {100 * d['b_top1']:.1f} %,"
              f" B - A {100 * d['difference']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] points"
              f" (B alone right {d['b_only']}, A alone right {d['a_only']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
