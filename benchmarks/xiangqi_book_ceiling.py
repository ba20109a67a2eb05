"""How much of the agreement on positions seen in training a lookup of the training games gets.

    .venv/bin/python benchmarks/xiangqi_book_ceiling.py --agreement AGREE.json \
        [--positions 10000] [--seed 41]

A validation position is "seen" when the same placement and side to move occurs in a training
game (``apps.xiangqi.agreement.position_key``; the agreement's "unseen" split is its complement).
For each seen position of the agreement sample (the same ``--positions`` and ``--seed`` as the
``evaluate agreement`` run that wrote ``AGREE.json``) this asks whether the move the training
games played there most often (``apps.xiangqi.book.MoveBook``, ties broken by first occurrence)
is the master's move, beside the model's answer from ``AGREE.json``. It is a
reference for what memorising the training games could give, not a player: the book has no
move for the unseen positions. Prints JSON: seen positions, book and model agreement on them,
by ply (tens) and by how often the position occurs in training.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apps.xiangqi.agreement import SamplePosition, agreement_sample  # noqa: E402
from apps.xiangqi.book import MoveBook  # noqa: E402
from apps.xiangqi.evaluate import DATA  # noqa: E402
from apps.xiangqi.training import load_games  # noqa: E402

# (last ply or training count of the bucket, its label); the last bucket takes the rest
PLY_BUCKETS = ((9, "ply 0-9"), (19, "ply 10-19"), (29, "ply 20-29"), (None, "ply 30+"))
COUNT_BUCKETS = ((1, "in training 1x"), (4, "in training 2-4x"), (19, "in training 5-19x"),
                 (None, "in training 20+x"))


def _bucket(value: int, buckets: tuple[tuple[int | None, str], ...]) -> str:
    return next(label for last, label in buckets if last is None or value <= last)


def _rate(hits: int, n: int) -> float | None:
    return round(hits / n, 4) if n else None


def ceiling(sample: Sequence[SamplePosition], book: MoveBook,
            results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Book and model agreement on the seen positions of ``sample`` (``results``: the
    agreement run's per-position records, in sample order)."""
    if len(results) != len(sample):
        raise SystemExit(f"the agreement file has {len(results)} positions, the sample "
                         f"{len(sample)}: give the --positions and --seed of its run")
    table: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # n, book hits, model hits

    def add(name: str, book: bool, model: bool) -> None:
        row = table[name]
        row[0] += 1
        row[1] += book
        row[2] += model

    for position, result in zip(sample, results, strict=True):
        gold = position.example.gold
        if result["gold"] != gold or result["ply"] != position.ply:
            raise SystemExit("the agreement file's positions are not this sample's: give the "
                             "--positions and --seed of its run")
        entry = book.most_common(position.key)
        if entry is None:
            continue
        model = bool(result["hit"])
        for name in ("all", _bucket(position.ply, PLY_BUCKETS),
                     _bucket(entry.total, COUNT_BUCKETS)):
            add(name, entry.move == gold, model)
    return {name: {"positions": n, "book": _rate(b, n), "model": _rate(m, n)}
            for name, (n, b, m) in table.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agreement", type=Path, required=True,
                        help="the --out file of an 'evaluate agreement' run")
    parser.add_argument("--positions", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--train-games", type=Path, default=DATA / "train-games.jsonl.gz")
    parser.add_argument("--valid-games", type=Path, default=DATA / "valid-games.jsonl.gz")
    args = parser.parse_args(argv)
    if args.positions < 1:
        parser.error("--positions must be >= 1")
    try:
        results = json.loads(args.agreement.read_text(encoding="utf-8"))["results"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"--agreement {args.agreement}: not the --out file of an 'evaluate "
                         f"agreement' run ({type(exc).__name__}: {exc})") from None
    sample = agreement_sample(load_games(args.valid_games), args.positions, args.seed)
    book = MoveBook.from_games((g.start_fen, g.moves) for g in load_games(args.train_games))
    record = {"positions": len(sample), "seed": args.seed, "agreement": str(args.agreement),
              "seen": ceiling(sample, book, results)}
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    from decision.cli import exit_status  # a missing games file: one line, not a traceback

    raise SystemExit(exit_status(main, "xiangqi_book_ceiling.py: "))
