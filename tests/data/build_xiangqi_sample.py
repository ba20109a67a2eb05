"""Rebuild ``xiangqi-games-sample.jsonl.gz`` from the shared CCPD games (see README.md here).

The sample keeps the replay tests running where ``../shared/data`` is absent (a fresh clone):
every 29th validation game, every validation game that ends in a checkmate our engine sees, and
from training the first two games of each non-master-game category (positions set up mid-game)
plus the diagrams that need lenient reading. Records are copied unchanged, in source order.

    .venv/bin/python tests/data/build_xiangqi_sample.py
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

from apps.xiangqi.dataset import data_dir, iter_games, replay, start_board

HERE = Path(__file__).resolve().parent
SAMPLE = HERE / "xiangqi-games-sample.jsonl.gz"
MASTER_GAMES = "對局"


def _is_recorded_mate(game: dict) -> bool:
    return game["result"] in ("1-0", "0-1") and replay(game).is_checkmate()


def select(valid: list[dict], train: list[dict]) -> list[dict]:
    """The sampled records, validation first, each list in its file order."""
    chosen = [g for i, g in enumerate(valid) if i % 29 == 0 or _is_recorded_mate(g)]
    per_category: dict[str, int] = defaultdict(int)
    for game in train:
        lenient = not start_board(game["start_fen"])[1]
        other = game["category"] != MASTER_GAMES and per_category[game["category"]] < 2
        if other:
            per_category[game["category"]] += 1
        if other or lenient:
            chosen.append(game)
    return chosen


def main() -> None:
    xiangqi = data_dir(HERE.parents[1]) / "xiangqi"
    valid = list(iter_games(xiangqi / "valid-games.jsonl.gz"))
    train = list(iter_games(xiangqi / "train-games.jsonl.gz"))
    games = select(valid, train)
    # mtime=0 keeps the file byte-identical across rebuilds.
    with open(SAMPLE, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        for game in games:
            gz.write((json.dumps(game, ensure_ascii=False) + "\n").encode("utf-8"))
    moves = sum(len(g["moves"]) for g in games)
    print(f"wrote {len(games)} games, {moves} moves to {SAMPLE} ({SAMPLE.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
