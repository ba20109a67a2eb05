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
from apps.xiangqi.training import board_at, load_games

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


def test_rows_are_split_by_ply_at_the_bucket_edges(
        load_benchmark: Callable[[str], ModuleType], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A 24-ply game: every row lands in the bucket of its ply (ply 9 in "ply 0-9", 10 in
    "ply 10-19", 20 in "ply 20-29"), and the buckets add up to "all"."""
    mod = load_benchmark("xiangqi_book_targets")
    board, moves = Board(), []
    for _ in range(24):  # always the first legal move in ICCS order: a fixed, legal game
        move = min(m.iccs() for m in board.legal_moves)
        moves.append(move)
        board.push_iccs(move)
    games = tmp_path / "train.jsonl.gz"
    with gzip.open(games, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"start_fen": Board().fen(), "moves": moves, "category": "full"})
                + "\n")
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"xiangqi": {
        "train_games": str(games), "valid_games": str(games), "train_positions": 200,
        "seed": 3, "book_min_count": 2}}))
    assert mod.main(["--config", str(config), "--rows", "200"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    _, xq = load_player_config(config)
    loaded = load_games(games)
    plies = [r.ply for r in master_refs(loaded, xq)
             if len(board_at(loaded[r.game], r.ply).legal_moves) > 1][:200]
    expected = {f"ply {lo}-{lo + 9}": sum(lo <= p <= lo + 9 for p in plies) for lo in (0, 10, 20)}
    assert {9, 10, 19, 20} <= set(plies)
    assert {name: rows[name]["rows"] for name in expected} == expected
    assert rows["all"]["rows"] == len(plies) == sum(expected.values())
