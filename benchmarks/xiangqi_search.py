"""Cost of the blunder check that SearchGuidedPlayer adds to every model move, and of the
repetition rule that every model player applies (depth 0 in the table).

    .venv/bin/python benchmarks/xiangqi_search.py                 # depths 1-3, 120 positions
    .venv/bin/python benchmarks/xiangqi_search.py --positions 300 --depths 2

Times ``search_guided.sound_moves`` (best score, then every legal move against the floor, then
the repetition filter) on validation positions at plies 10, 30 and 60 of the first games of
``../shared/data/xiangqi/valid-games.jsonl.gz``, and prints the median, 90th percentile and
maximum milliseconds per position with the search nodes visited (median). Depth 0 times
``repetition.repetition_safe_moves`` alone (no search: each move and each reply checked for a
third occurrence), what ``ModelPlayer`` adds to a move. One process, one core.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from apps.xiangqi.dataset import data_dir  # noqa: E402
from apps.xiangqi.repetition import repetition_safe_moves  # noqa: E402
from apps.xiangqi.search import SearchConfig, _Search  # noqa: E402
from apps.xiangqi.search_guided import DEFAULT_MARGIN, sound_moves  # noqa: E402
from apps.xiangqi.training import board_at, load_games  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--positions", type=int, default=120)
    parser.add_argument("--depths", type=int, nargs="+", default=[1, 2, 3],
                        help="search depths, each >= 1 (the depth-0 row is always printed)")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    args = parser.parse_args()
    # before the games are read: SearchConfig refuses depth 0 with a traceback after that
    if args.positions < 1 or min(args.depths) < 1:
        parser.error("--positions and every --depths value must be >= 1 (the depth-0 row, the "
                     "repetition rule alone, is always printed)")
    valid = data_dir(REPO_ROOT) / "xiangqi" / "valid-games.jsonl.gz"
    games = load_games(valid, limit=args.positions)
    boards = [board_at(g, p) for g in games for p in (10, 30, 60) if p < len(g.moves)]
    boards = boards[: args.positions]
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"{len(boards)} validation positions, margin {args.margin:g}")
    print("| depth | median ms | p90 ms | max ms | nodes (median, best-move search) |")
    print("|---:|---:|---:|---:|---:|")
    rule = sorted(_ms(repetition_safe_moves, board) for board in boards)
    print(f"| 0 (repetition rule only) | {statistics.median(rule):.1f} "
          f"| {_p90(rule):.1f} | {rule[-1]:.1f} | - |")
    for depth in args.depths:
        config = SearchConfig(depth=depth)
        times, nodes = [], []
        for board in boards:
            times.append(_ms(sound_moves, board, config, args.margin))
            search = _Search(board, config)
            search.negamax(board.turn, depth, float("-inf"), float("inf"), 0)
            nodes.append(search.nodes)
        times.sort()
        print(f"| {depth} | {statistics.median(times):.1f} | {_p90(times):.1f} "
              f"| {times[-1]:.1f} | {int(statistics.median(nodes))} |")
    return 0


def _p90(ordered: list[float]) -> float:
    """The nearest-rank 90th percentile of sorted values."""
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def _ms(function: Callable[..., object], *args: object) -> float:
    """Milliseconds of one ``function(*args)``."""
    t0 = time.perf_counter()
    function(*args)
    return 1000 * (time.perf_counter() - t0)


if __name__ == "__main__":
    raise SystemExit(main())
