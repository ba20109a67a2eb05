"""Reading the recorded games of the Chinese Chess Practical Dataset (../shared/data/xiangqi).

One game per line of a gzip JSON-lines file: ``game``, ``category``, ``result``, ``start_fen``
(Pikafish FEN) and ``moves`` (ICCS). See ../shared/data/README.md; the data is CC BY 4.0,
(c) 2026 Yu-Han Tseng.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from apps.xiangqi.board import Board
from apps.xiangqi.errors import InvalidFen


def data_dir(repo_root: str | Path) -> Path:
    """Where the shared data lives: ``../shared/data``, beside the repository checkout."""
    return Path(repo_root).resolve().parent / "shared" / "data"


def iter_games(path: str | Path) -> Iterator[dict[str, Any]]:
    """The game records of one ``*-games.jsonl.gz`` file, in file order."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def start_board(start_fen: str) -> tuple[Board, bool]:
    """The board of a recorded start position and whether it passed strict validation.

    A few hand-made diagrams put a piece on a point no game can reach (a converted diagram with an
    elephant on g1); those are read with ``strict=False`` so their moves can still be checked.
    """
    try:
        return Board(start_fen), True
    except InvalidFen:
        return Board(start_fen, strict=False), False


def replay(game: dict[str, Any]) -> Board:
    """Play every move of a game record, checking each is legal (raises IllegalMove otherwise)."""
    board, _ = start_board(game["start_fen"])
    for move in game["moves"]:
        board.push_iccs(move)
    return board
