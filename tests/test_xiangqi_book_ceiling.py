"""benchmarks/xiangqi_book_ceiling.py: the training games' most frequent move on seen positions."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from apps.xiangqi import Board
from apps.xiangqi.training import load_games

GAME = ["h2e2", "h9g7", "h0g2", "i9h9", "i0h0", "b9c7", "b2b6", "c6c5"]
OTHER = ["h2e2", "h9g7", "b0c2"]  # leaves GAME at ply 2
ALIEN = ["b2e2", "b9c7"]  # no position of it but the start is in GAME


@pytest.fixture
def mod(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("xiangqi_book_ceiling")


def _games(path: Path, *games: list[str]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for moves in games:
            f.write(json.dumps({"start_fen": Board().fen(), "moves": moves,
                                "category": "full"}) + "\n")
    return path


def test_book_is_the_most_frequent_training_move_beside_the_model(
        mod: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    train = _games(tmp_path / "train.jsonl.gz", GAME, GAME, OTHER)
    # every position of the first is in training (at ply 4 training played i0h0, not a0a1);
    # of ALIEN only the start, where training played h2e2
    valid = _games(tmp_path / "valid.jsonl.gz", GAME[:4] + ["a0a1"], ALIEN)
    sample = mod.agreement_sample(load_games(valid), 12, 5)
    results = [{"ply": p.ply, "gold": p.example.gold, "hit": p.ply == 0} for p in sample]
    agreement = tmp_path / "agree.json"
    agreement.write_text(json.dumps({"results": results}))
    assert mod.main(["--agreement", str(agreement), "--positions", "12", "--seed", "5",
                     "--train-games", str(train), "--valid-games", str(valid)]) == 0
    seen = json.loads(capsys.readouterr().out)["seen"]
    expected = [p for p in sample if p.example.gold != ALIEN[1]]  # ALIEN's ply 1 is unseen
    assert 0 < len(expected) < len(sample)
    book = sum(p.example.gold == GAME[p.ply] for p in expected)  # h0g2 2:1 over b0c2 at ply 2
    model = sum(p.ply == 0 for p in expected)
    assert seen["all"] == {"positions": len(expected), "book": round(book / len(expected), 4),
                           "model": round(model / len(expected), 4)}
    assert 0 < book < len(expected)
    # every seen position occurs two or three times in training, all before ply 10
    assert seen["ply 0-9"] == seen["in training 2-4x"] == seen["all"]
    assert set(seen) == {"all", "ply 0-9", "in training 2-4x"}


def test_refuses_an_agreement_file_of_another_sample(mod: ModuleType, tmp_path: Path) -> None:
    games = _games(tmp_path / "g.jsonl.gz", GAME)
    agreement = tmp_path / "agree.json"
    agreement.write_text(json.dumps({"results": [{"ply": 0, "gold": "h2e2", "hit": True}]}))
    with pytest.raises(SystemExit, match="positions"):
        mod.main(["--agreement", str(agreement), "--positions", "3", "--seed", "1",
                  "--train-games", str(games), "--valid-games", str(games)])
