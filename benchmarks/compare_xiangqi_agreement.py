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

Before a pair's rows it names the two models and their weights' fingerprints (the ``setup`` that
``evaluate --out`` records), and says in a ``note:`` line what else differs between the two
setups (decoder, search depth, margin, pooling, games files, device; run settings such as threads
apart): comparing decoders on purpose is fine, mixing a decoder change into a model comparison
unseen is not. A file without a setup (written before evaluate recorded one) is said to be so
(on stderr when neither file has one, the output otherwise as before).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decision.metrics import paired_hits_difference  # noqa: E402
from decision.setups import setup_lines  # noqa: E402


def _document(path: Path) -> dict[str, Any]:
    document = json.loads(path.read_text())
    if not isinstance(document, dict) or not document.get("results"):
        raise SystemExit(f"{path}: no per-position results (written by evaluate agreement --out "
                         "since 2026-12-02)")
    return document


def _print_setups(path_a: Path, path_b: Path, a: dict[str, Any], b: dict[str, Any]) -> None:
    """The models and what else differs (:func:`setup_lines`); two files without a setup: a note
    on stderr, and the players where their labels differ."""
    setup_a, setup_b = a.get("setup"), b.get("setup")
    if setup_a is None and setup_b is None:
        print(f"note: {path_a} and {path_b} record no setup (written before evaluate recorded "
              "one): their models and decoding options are not checked", file=sys.stderr)
        lines = []
    else:
        lines = setup_lines(setup_a, setup_b, "written before its setup was")
    if (setup_a is None or setup_b is None) and a.get("player") != b.get("player"):
        lines.append(f"note: the players differ: {a.get('player')!r} in A, "
                     f"{b.get('player')!r} in B")
    for line in lines:
        print(f"{line.split(': ', 1)[0]:>17}: {line.split(': ', 1)[1]}")


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
    documents: list[tuple[dict[str, Any], dict[str, Any]]] = []
    seen_files: list[tuple[Path, Path]] = []
    seen_samples: list[list[tuple[Any, ...]]] = []
    for path_a, path_b in zip(args.files[::2], args.files[1::2], strict=True):
        files = (path_a.resolve(), path_b.resolve())
        if files in seen_files:
            raise SystemExit(f"{path_a} {path_b}: the same pair of files is given twice "
                             "(pooling would count its positions twice)")
        doc_a, doc_b = _document(path_a), _document(path_b)
        a, b = doc_a["results"], doc_b["results"]
        sample = [x[-3:] for x in _check_pair(path_a, path_b, a, b)]  # (ply, gold, seen)
        if sample in seen_samples:
            earlier_a, earlier_b, _, _ = pairs[seen_samples.index(sample)]
            raise SystemExit(f"{path_a} {path_b} score the same positions as {earlier_a} "
                             f"{earlier_b} (the same sample twice: pooling would count its "
                             "positions twice)")
        seen_files.append(files)
        seen_samples.append(sample)
        pairs.append((path_a, path_b, a, b))
        documents.append((doc_a, doc_b))
    pooled_a: list[dict[str, Any]] = []
    pooled_b: list[dict[str, Any]] = []
    for (path_a, path_b, a, b), (doc_a, doc_b) in zip(pairs, documents, strict=True):
        if len(pairs) > 1:
            print(f"{path_a.name} -> {path_b.name}")
        _print_setups(path_a, path_b, doc_a, doc_b)
        _print("all", a, b)
        pooled_a += a
        pooled_b += b
    if len(pairs) > 1:
        print("pooled")
        _print("all", pooled_a, pooled_b)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
