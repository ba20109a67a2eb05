"""How many of a run's training rows the book targets relabel (``xiangqi.book_min_count``).

    .venv/bin/python benchmarks/xiangqi_book_targets.py \
        --config configs/xiangqi-stage32-book-targets.json [--rows 4000] [--min-count N]

Draws the run's master positions as ``train_player`` does (its config's seed, opening and drill
shares, fragment weight; :func:`apps.xiangqi.train_player.master_refs`), takes the first
``--rows`` of them that ask a question (more than one legal move, as :class:`MoveRowSource`
does) and counts how many stand on a position the training games reach at least
``--min-count`` times (default: the config's ``book_min_count``, or 2 when it is 0) and how
many of those the book's most frequent move relabels (the drawn game played another move), by
ply. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apps.xiangqi.book import MoveBook  # noqa: E402
from apps.xiangqi.train_player import load_player_config, master_refs  # noqa: E402
from apps.xiangqi.training import board_at, book_target, load_games  # noqa: E402

PLY_BUCKETS = ((9, "ply 0-9"), (19, "ply 10-19"), (29, "ply 20-29"), (None, "ply 30+"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--min-count", type=int, default=None)
    args = parser.parse_args(argv)
    if args.rows < 1:
        parser.error("--rows must be >= 1")
    _, xq = load_player_config(args.config)
    min_count = args.min_count or xq.book_min_count or 2
    games = load_games(xq.train_games)
    book = MoveBook.from_games((g.start_fen, g.moves) for g in games)
    table: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # rows, recurring, relabelled
    rows = 0
    for ref in master_refs(games, xq, book):
        board = board_at(games[ref.game], ref.ply)
        if len(board.legal_moves) < 2:
            continue
        entry = book.most_common(board.zobrist_hash())
        recurring = entry is not None and entry.total >= min_count
        played = games[ref.game].moves[ref.ply]
        relabelled = book_target(book, board, played, min_count) != played  # as training does
        bucket = next(label for last, label in PLY_BUCKETS if last is None or ref.ply <= last)
        for name in ("all", bucket):
            table[name][0] += 1
            table[name][1] += recurring
            table[name][2] += relabelled
        rows += 1
        if rows == args.rows:
            break
    print(json.dumps({
        "config": str(args.config), "min_count": min_count,
        "book_positions": len(book), "book_recurring": book.recurring(min_count),
        "rows": {name: {"rows": n, "recurring": round(r / n, 4), "relabelled": round(c / n, 4)}
                 for name in ["all", *(label for _, label in PLY_BUCKETS)] if name in table
                 for n, r, c in [table[name]]},
    }, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
