"""Two Xiangqi players on the same validation positions: B minus A in top-1 agreement, paired.

    .venv/bin/python benchmarks/compare_xiangqi_agreement.py A.json B.json [A2.json B2.json ...]

Reads the JSON that ``python -m apps.xiangqi.evaluate ... --out FILE agreement`` writes for each
player (the same ``--positions`` and ``--seed``, so the same positions in the same order) and
prints the difference of their top-1 agreement over all positions and over those never seen in
training, with the positions only one of them gets right and a 95 % interval for paired
proportions (``decision.metrics.paired_hits_difference``). Given several pairs (the two players
on several samples), it prints each pair and then all of them pooled, one interval over every
position of every sample.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decision.metrics import paired_hits_difference  # noqa: E402


def _results(path: Path) -> list[dict[str, Any]]:
    results = json.loads(path.read_text()).get("results")
    if not results:
        raise SystemExit(f"{path}: no per-position results (written by evaluate agreement --out "
                         "since 2026-12-02)")
    return results


def _print(label: str, a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    unseen = [i for i, r in enumerate(a) if not r["seen"]]
    for name, idx in ((label, range(len(a))), ("never in training", unseen)):
        d = paired_hits_difference([a[i]["hit"] for i in idx], [b[i]["hit"] for i in idx])
        print(f"{name:>17}: n {d.n}, A {100 * d.a_rate:.1f} %, B {100 * d.b_rate:.1f} %,"
              f" B - A {100 * d.difference:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}] points"
              f" (B alone right {d.b_only}, A alone right {d.a_only})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", type=Path, nargs="+", metavar="A.json B.json",
                        help="pairs of agreement files: A then B, for each sample")
    args = parser.parse_args(argv)
    if len(args.files) % 2:
        parser.error("give the files in pairs: A.json B.json [A2.json B2.json ...]")
    pooled_a: list[dict[str, Any]] = []
    pooled_b: list[dict[str, Any]] = []
    for path_a, path_b in zip(args.files[::2], args.files[1::2], strict=True):
        a, b = _results(path_a), _results(path_b)
        if [(r["ply"], r["gold"]) for r in a] != [(r["ply"], r["gold"]) for r in b]:
            raise SystemExit(f"{path_a} and {path_b} score different positions (use the same "
                             "--positions and --seed)")
        if len(args.files) > 2:
            print(f"{path_a.name} -> {path_b.name}")
        _print("all", a, b)
        pooled_a += a
        pooled_b += b
    if len(args.files) > 2:
        print("pooled")
        _print("all", pooled_a, pooled_b)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
