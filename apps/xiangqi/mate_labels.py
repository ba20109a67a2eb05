"""Mate labels for the Xiangqi player: the positions of its own games where it could force a win.

Against the random mover the model alone ends far ahead in material but mates slowly: in 100
games played to 300 plies it had a mate in one on 614 of its moves and played one on 93
(docs/xiangqi-model.md). Its games are the positions to teach from (the DAgger argument of
``apps/xiangqi/teacher.py``), and the label here is exact: the move that forces the opponent out
of legal moves soonest (:func:`apps.xiangqi.mate.mating_moves`), not a searched guess.

Reads the game records of ``python -m apps.xiangqi.evaluate match --out F`` (the model's colour
and its moves) and writes one record per labelled position in the format of
``apps/xiangqi/teacher.py`` (the game's moves so far, then the label; category ``"mate"``, the
model's own move beside it), which ``xiangqi.teacher_games`` reads for training.

    python -m apps.xiangqi.mate_labels runs/gen.json [more.json ...] --moves 2 \\
        --out runs/mates.jsonl.gz

Play those matches with ``--seed`` away from 0-99, the evaluation matches' opponents.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from apps.xiangqi.board import Board
from apps.xiangqi.core import Move
from apps.xiangqi.fen import STARTING_FEN
from apps.xiangqi.mate import mating_moves

MATE_CATEGORY = "mate"


def fastest_mate(board: Board, moves: int, preferred: Move | None = None
                 ) -> tuple[Move, int] | None:
    """The move that forces a win in the fewest of the mover's moves (at most ``moves``):
    ``preferred`` if it is one of the fastest, else the first in ``board.legal_moves`` order
    among them; ``None`` when there is none."""
    found = mating_moves(board, moves)
    if not found:
        return None
    best = min(found.values())
    if preferred is not None and found.get(preferred) == best:
        return preferred, best
    return next(m for m in board.legal_moves if found.get(m) == best), best


def game_labels(game: dict[str, Any], moves: int, name: str) -> Iterator[dict[str, Any]]:
    """The labelled positions of one match game (a record of ``evaluate match``): each position
    where the model was to move and could force a win within ``moves`` of its moves."""
    model_red = {"red": True, "black": False}[game["model"]]
    board = Board(game.get("start_fen") or STARTING_FEN)  # matches start from the usual position
    start = board.fen()
    played: list[str] = []
    for iccs in game["moves"].split():
        if board.turn == model_red:
            # the model's own move stays the label where it is one of the fastest wins
            mate = fastest_mate(board, moves, board.parse_iccs(iccs))
            if mate is not None:
                yield {
                    "game": f"{name}-{game['game']}-{len(played)}",
                    "category": MATE_CATEGORY,
                    "result": None,
                    "event": f"mate in {mate[1]}",
                    "mate_in": mate[1],
                    "start_fen": start,
                    "moves": [*played, mate[0].iccs()],
                    "student": iccs,
                }
        board.push_iccs(iccs)
        played.append(iccs)


def match_games(paths: Iterable[str | Path]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(file stem, game record) for every game of the given ``evaluate match`` outputs: the
    ``--out`` JSON, or the ``--progress`` JSON lines that a match stopped early leaves."""
    for path in map(Path, paths):
        text = path.read_text()
        games = ([json.loads(line) for line in text.splitlines() if line.strip()]
                 if path.suffix == ".jsonl" else json.loads(text)["results"])
        for game in games:
            yield path.stem, game


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m apps.xiangqi.mate_labels",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("matches", nargs="+",
                        help="outputs of `evaluate match`: --out JSON or --progress .jsonl")
    parser.add_argument("--moves", type=int, default=2,
                        help="label wins forced within this many of the model's moves")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    if args.moves < 1:
        parser.error("--moves must be >= 1")
    out = Path(args.out)
    if out.exists():
        parser.error(f"{out} exists; give another --out")
    missing = [m for m in args.matches if not Path(m).is_file()]
    if missing:  # before --out is created, so a typo leaves no empty output behind
        parser.error(f"no such match file: {', '.join(missing)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    t0, positions, missed, games = time.monotonic(), 0, 0, 0
    # per mate length: positions, and those where the model's move was one of the fastest wins
    found: dict[int, list[int]] = {n: [0, 0] for n in range(1, args.moves + 1)}
    with gzip.open(out, "wt", encoding="utf-8") as f:
        for games, (name, game) in enumerate(match_games(args.matches), start=1):
            for record in game_labels(game, args.moves, name):
                f.write(json.dumps(record) + "\n")
                positions += 1
                played = record["student"] == record["moves"][-1]
                missed += not played
                found[record["mate_in"]][0] += 1
                found[record["mate_in"]][1] += played
            print(f"game {games}: {positions} labelled positions, the model's move another in "
                  f"{missed}; {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    print(json.dumps({"games": games, "positions": positions, "mates": {
        str(n): {"positions": p, "model_played": k,
                 "share": round(k / p, 4) if p else None} for n, (p, k) in found.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
