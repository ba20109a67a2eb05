"""Teacher labels for the Xiangqi player: the student's own positions, the blunder check's move.

Imitating masters never shows the model the positions its own mistakes lead to, nor what to
play there (the DAgger argument, Ross, Gordon and Bagnell, AISTATS 2011). Here the student
(``models/xiangqi`` alone, :class:`ModelPlayer`) plays games against the random mover and the
greedy player; at each of its positions with more than one legal move the teacher, the same
model behind the material search (:class:`SearchGuidedPlayer`), names its move, and the game
goes on with the student's own move, so the labelled positions are the ones the student reaches.

Each labelled position is written as a game record in the format of ``*-games.jsonl.gz``
(``apps/xiangqi/dataset.py``): the moves of the game so far, then the teacher's move, with
category ``"teacher"`` and the student's move beside it; the training driver reads such a file
through ``xiangqi.teacher_games`` and trains on the last ply of each record.

    python -m apps.xiangqi.teacher --model models/xiangqi --games 40 --seed 7000 \\
        --out runs/teacher/labels-7000.jsonl.gz [--max-minutes 30]

Opponents are seeded ``seed + game``: keep ``seed`` away from 0-99, the evaluation matches'.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from apps.xiangqi.board import Board
from apps.xiangqi.core import BLACK, RED, Move
from apps.xiangqi.players import GreedyPlayer, RandomPlayer
from apps.xiangqi.search_guided import SearchGuidedPlayer

TEACHER_CATEGORY = "teacher"
OPPONENTS = ("random", "greedy")


def label(teacher: SearchGuidedPlayer, board: Board) -> tuple[Move, Move]:
    """The student's move (the model alone) and the teacher's (the model behind the search),
    from one decode of the position."""
    answer, taught = teacher.own_and_guided(board)
    return answer.move, taught


def collect(
    teacher: SearchGuidedPlayer, games: int, seed: int, max_plies: int = 100,
    deadline: float | None = None,
) -> Iterator[list[dict[str, Any]]]:
    """The labelled positions of each game in turn. Game ``g`` is against
    ``OPPONENTS[g % 2]`` seeded ``seed + g``, the student Red in even games; stops before a game
    that would start after ``deadline`` (``time.monotonic()``)."""
    for g in range(games):
        if deadline is not None and time.monotonic() >= deadline:
            return
        kind = OPPONENTS[g % len(OPPONENTS)]
        opponent = RandomPlayer(seed + g) if kind == "random" else GreedyPlayer(seed + g)
        student_color = RED if g % 2 == 0 else BLACK
        board = Board()
        start = board.fen()
        moves: list[str] = []
        records: list[dict[str, Any]] = []
        while board.outcome() is None and len(moves) < max_plies:
            if board.turn == student_color and len(board.legal_moves) > 1:
                own, taught = label(teacher, board)
                records.append({
                    "game": f"teacher-{seed}-{g}-{len(moves)}",
                    "category": TEACHER_CATEGORY,
                    "result": None,
                    "event": f"student vs {kind} {seed + g}",
                    "start_fen": start,
                    "moves": [*moves, taught.iccs()],
                    "student": own.iccs(),
                })
                move = own  # the student's game goes on: its own positions are the point
            elif board.turn == student_color:
                move = board.legal_moves[0]
            else:
                move = opponent.choose(board.copy())
            board.push(move)
            moves.append(move.iccs())
        yield records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m apps.xiangqi.teacher",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/xiangqi")
    parser.add_argument("--games", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7000)
    parser.add_argument("--max-plies", type=int, default=100)
    parser.add_argument("--search-depth", type=int, default=3)
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="start no game after this long (the file keeps every finished game)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.games < 1 or args.max_plies < 1 or args.search_depth < 1:
        parser.error("--games, --max-plies and --search-depth must be >= 1")
    import torch

    from apps.xiangqi.search import SearchConfig
    from decision import load_model

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    if out.exists():
        parser.error(f"{out} exists; give another --out")
    out.parent.mkdir(parents=True, exist_ok=True)
    teacher = SearchGuidedPlayer(load_model(args.model), "teacher",
                                 search=SearchConfig(depth=args.search_depth))
    deadline = None if args.max_minutes is None else time.monotonic() + 60 * args.max_minutes
    t0, positions, differ = time.monotonic(), 0, 0
    # gzip members per game: a file cut short by a kill still reads up to its last whole game
    for g, records in enumerate(collect(teacher, args.games, args.seed, args.max_plies, deadline)):
        with gzip.open(out, "at", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record) + "\n")
        positions += len(records)
        differ += sum(r["student"] != r["moves"][-1] for r in records)
        print(f"game {g + 1}/{args.games}: {len(records)} positions; {positions} in all, "
              f"teacher differs on {differ} ({differ / max(1, positions):.0%}); "
              f"{time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
