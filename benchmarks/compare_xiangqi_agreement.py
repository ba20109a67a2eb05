"""Two Xiangqi players on the same validation positions: B minus A in top-1 agreement, paired.

    .venv/bin/python benchmarks/compare_xiangqi_agreement.py A.json B.json [A2.json B2.json ...]

Reads the JSON that ``python -m apps.xiangqi.evaluate ... --out FILE agreement`` writes for each
player (the same ``--positions`` and ``--seed``, so the same positions in the same order) and
prints the difference of their top-1 agreement over all positions and over those never seen in
training, with the positions only one of them gets right and a 95 % interval for paired
proportions (``decision.metrics.paired_hits_difference``). Given several pairs (the two players
on several samples), it prints each pair and then all of them pooled, one interval over every
position of every sample.

The two files of a pair must score the same positions in the same order with the same
"seen in training" flags: per position (key, ply, gold, seen), the key (the position's Zobrist
key, saved since 2026-12-07) where both files have it, else (ply, gold, seen). A sample given
twice (the same positions as an earlier pair) is refused, since pooling would count it twice.
A subset with no positions (e.g. none unseen) prints "no positions".
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


def _identity(rows: list[dict[str, Any]], with_key: bool) -> list[tuple[Any, ...]]:
    """What must agree between the two files of a pair, position by position."""
    return [((r["key"],) if with_key else ()) + (r["ply"], r["gold"], bool(r["seen"]))
            for r in rows]


def _check_pair(path_a: Path, path_b: Path, a: list[dict[str, Any]], b: list[dict[str, Any]]
                ) -> list[tuple[Any, ...]]:
    """Refuse a pair whose files score different positions; return the positions' identity."""
    with_key = all("key" in r for r in a) and all("key" in r for r in b)
    ids_a, ids_b = _identity(a, with_key), _identity(b, with_key)
    if ids_a != ids_b:
        what = "(key, ply, gold, seen)" if with_key else "(ply, gold, seen)"
        if len(a) != len(b):
            detail = f"{len(a)} and {len(b)} positions"
        else:
            i = next(i for i, (x, y) in enumerate(zip(ids_a, ids_b, strict=True)) if x != y)
            detail = f"position {i}: {ids_a[i]} in A, {ids_b[i]} in B"
        raise SystemExit(f"{path_a} (A) and {path_b} (B) score different positions, compared by "
                         f"{what}: {detail} (use the same --positions, --seed and "
                         "training games)")
    return ids_a


def _print(label: str, a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    unseen = [i for i, r in enumerate(a) if not r["seen"]]  # the same flags in b (checked)
    for name, idx in ((label, range(len(a))), ("never in training", unseen)):
        if not idx:
            print(f"{name:>17}: no positions")
            continue
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
    pairs: list[tuple[Path, Path, list[dict[str, Any]], list[dict[str, Any]]]] = []
    seen_files: list[tuple[Path, Path]] = []
    seen_samples: list[list[tuple[Any, ...]]] = []
    for path_a, path_b in zip(args.files[::2], args.files[1::2], strict=True):
        files = (path_a.resolve(), path_b.resolve())
        if files in seen_files:
            raise SystemExit(f"{path_a} {path_b}: the same pair of files is given twice "
                             "(pooling would count its positions twice)")
        a, b = _results(path_a), _results(path_b)
        sample = [x[-3:] for x in _check_pair(path_a, path_b, a, b)]  # (ply, gold, seen)
        if sample in seen_samples:
            earlier_a, earlier_b, _, _ = pairs[seen_samples.index(sample)]
            raise SystemExit(f"{path_a} {path_b} score the same positions as {earlier_a} "
                             f"{earlier_b} (the same sample twice: pooling would count its "
                             "positions twice)")
        seen_files.append(files)
        seen_samples.append(sample)
        pairs.append((path_a, path_b, a, b))
    pooled_a: list[dict[str, Any]] = []
    pooled_b: list[dict[str, Any]] = []
    for path_a, path_b, a, b in pairs:
        if len(pairs) > 1:
            print(f"{path_a.name} -> {path_b.name}")
        _print("all", a, b)
        pooled_a += a
        pooled_b += b
    if len(pairs) > 1:
        print("pooled")
        _print("all", pooled_a, pooled_b)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
