"""benchmarks/xiangqi_document_length.py: token counts of the player's documents."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from tokenizers import Tokenizer

from apps.xiangqi import Board
from apps.xiangqi.render import position_document

MODEL = Path(__file__).resolve().parents[1] / "models" / "xiangqi"
GAME = ["h2e2", "h9g7", "h0g2", "i9h9", "i0h0", "b9c7", "b2b6", "c6c5"]


@pytest.fixture
def mod(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("xiangqi_document_length")


def test_counts_match_the_documents_the_player_reads(
        mod: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    games = tmp_path / "valid-games.jsonl.gz"
    with gzip.open(games, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"start_fen": Board().fen(), "moves": GAME, "category": "full"}) + "\n")
    assert mod.main(["--valid-games", str(games), "--positions", "5", "--seed", "3"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["positions"] == 5
    tokenizer = Tokenizer.from_file(str(MODEL / "tokenizer.json"))
    possible = set()
    board = Board()
    for move in GAME:
        possible.add(len(tokenizer.encode(position_document(board)).ids))
        board.push_iccs(move)
    document = result["document"]
    assert document["max"] in possible
    assert min(possible) <= document["mean"] <= max(possible)
    # the parts are pieces of the document: each shorter than the whole
    assert 0 < result["legal_moves_line"]["max"] < document["max"]
    assert result["tactics_lines"]["max"] < document["max"]
    assert result["question_text"]["mean"] > 0


def test_refuses_no_positions(mod: ModuleType) -> None:
    with pytest.raises(SystemExit):
        mod.main(["--positions", "0"])
