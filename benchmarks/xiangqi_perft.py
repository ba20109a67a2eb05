"""Xiangqi move generation speed (perft) and the full legality check of the recorded games.

    .venv/bin/python benchmarks/xiangqi_perft.py               # perft 1-4 and all games
    .venv/bin/python benchmarks/xiangqi_perft.py --depth 3 --no-replay

Perft counts the leaves of the legal move tree from the start position (expected 44, 1,920,
79,666 and 3,290,240 for depths 1-4) and prints nodes per second. The replay plays every
move of every game in ../shared/data/xiangqi (train and valid), checking each is legal, and prints
the numbers of games and moves and the time taken.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from apps.xiangqi import Board, perft  # noqa: E402
from apps.xiangqi.dataset import data_dir, iter_games, start_board  # noqa: E402

EXPECTED = {1: 44, 2: 1_920, 3: 79_666, 4: 3_290_240}


def bench_perft(max_depth: int, repeats: int) -> bool:
    """Print a perft table; returns False if a count differs from the known value."""
    ok = True
    print(f"{'depth':>5} {'nodes':>12} {'expected':>12} {'seconds':>9} {'nodes/s':>11}")
    for depth in range(1, max_depth + 1):
        times = []
        nodes = 0
        for _ in range(repeats if depth < 4 else 1):
            t0 = time.perf_counter()
            nodes = perft(Board(), depth)
            times.append(time.perf_counter() - t0)
        sec = statistics.median(times)
        expected = EXPECTED.get(depth)
        ok &= expected is None or nodes == expected
        print(f"{depth:>5} {nodes:>12,} {expected or 0:>12,} {sec:>9.3f} {nodes / sec:>11,.0f}")
    return ok


def bench_replay(directory: Path) -> bool:
    """Replay every recorded game; print counts, time and how games end by our rules."""
    ok = True
    for name in ("train-games.jsonl.gz", "valid-games.jsonl.gz"):
        path = directory / name
        games = list(iter_games(path))  # read first, so the timing covers only the rules
        t0 = time.perf_counter()
        n_moves = lenient = illegal = 0
        endings: Counter[str] = Counter()
        for game in games:
            board, strict = start_board(game["start_fen"])
            lenient += not strict
            try:
                for move in game["moves"]:
                    board.push_iccs(move)
            except ValueError as err:
                illegal += 1
                print(f"  game {game['game']}: {err}")
                continue
            n_moves += len(game["moves"])
            outcome = board.outcome()
            if outcome is not None:
                agrees = game["result"] in (None, "*") or outcome.result() == game["result"]
                endings[f"{outcome.termination.name}{'' if agrees else ' (result differs)'}"] += 1
        sec = time.perf_counter() - t0
        ok &= illegal == 0
        print(
            f"{name}: {len(games):,} games, {n_moves:,} moves replayed legal in {sec:.1f} s "
            f"({n_moves / sec:,.0f} moves/s); games with an illegal move: {illegal}; "
            f"start positions read leniently: {lenient}"
        )
        print("  final positions that end the game by our rules: " + ", ".join(
            f"{k} {v}" for k, v in endings.most_common()
        ))
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--depth", type=int, default=4, help="deepest perft (default 4)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats below depth 4 (median)")
    parser.add_argument("--no-replay", action="store_true", help="skip the recorded games")
    parser.add_argument("--data", type=Path, default=data_dir(REPO_ROOT) / "xiangqi")
    args = parser.parse_args()
    if args.depth < 1 or args.repeats < 1:
        parser.error("--depth and --repeats must be >= 1")
    print(f"python {platform.python_version()} on {platform.machine()}, {platform.processor()}")
    ok = bench_perft(args.depth, args.repeats)
    if not args.no_replay:
        if not args.data.is_dir():
            print(f"no games at {args.data}: replay skipped")
        else:
            ok &= bench_replay(args.data)
    print("all checks passed" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
