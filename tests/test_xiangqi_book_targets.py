"""benchmarks/xiangqi_book_targets.py: the share of a run's rows that the book relabels."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from apps.xiangqi import Board
from apps.xiangqi.train_player import load_player_config, master_refs
from apps.xiangqi.training import load_games

# three games from the start: h2e2 twice, b2e2 once; after h2e2 the replies differ
GAMES = [["h2e2", "h9g7", "h0g2"], ["h2e2", "b9c7", "b0c2"], ["b2e2", "h9g7", "h0g2"]]


def test_counts_recurring_and_relabelled_rows(
        load_benchmark: Callable[[str], ModuleType], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    mod = load_benchmark("xiangqi_book_targets")
    games = tmp_path / "train.jsonl.gz"
    with gzip.open(games, "wt", encoding="utf-8") as f:
        for moves in GAMES:
            f.write(json.dumps({"start_fen": Board().fen(), "moves": moves,
                                "category": "full"}) + "\n")
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"xiangqi": {
        "train_games": str(games), "valid_games": str(games), "train_positions": 60,
        "seed": 4, "book_min_count": 2}}))
    assert mod.main(["--config", str(config), "--rows", "60"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["min_count"] == 2 and record["book_positions"] == 6
    assert record["book_recurring"] == 2  # the start (3 times) and after h2e2 (twice)
    rows = record["rows"]["all"]
    assert rows["rows"] == 60 and set(record["rows"]) == {"all", "ply 0-9"}
    # ply 0 recurs and b2e2's game is relabelled h2e2; ply 1 recurs after h2e2 only, where the
    # book keeps the first game's h9g7 (1:1, first occurrence) and relabels the second's b9c7
    _, xq = load_player_config(config)
    refs = [(r.game, r.ply) for r in master_refs(load_games(games), xq)]
    recurring = sum(p == 0 or (p == 1 and g < 2) for g, p in refs)
    relabelled = sum((g, p) in ((2, 0), (1, 1)) for g, p in refs)
    assert 0 < relabelled < recurring < 60
    assert (rows["recurring"], rows["relabelled"]) == (round(recurring / 60, 4),
                                                       round(relabelled / 60, 4))
