"""What the training games played in each position: a move book keyed by position.

A :class:`MoveBook` counts, for every position that occurs in a set of games (placement and
side to move, :func:`apps.xiangqi.agreement.position_key`'s Zobrist hash), the moves played
there. Its :meth:`MoveBook.most_common` is the move played most often (ties broken by first
occurrence in the games' order). Training uses it to give a position that recurs in the
training games one consistent target, the masters' most frequent move there, instead of
whichever master's move the draw happened to pick (``xiangqi.book_min_count``,
:class:`apps.xiangqi.training.MoveRowSource`); ``benchmarks/xiangqi_book_ceiling.py`` uses it
to ask how often that move is a validation master's.

Counts live in sorted numpy arrays looked up by binary search (the 2.2M training positions:
1.6M distinct, ~50 MB; built in ~16 s, almost all of it replaying the games).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from apps.xiangqi.core import Move
from apps.xiangqi.dataset import start_board

FILES = "abcdefghi"


def move_index(iccs: str) -> int:
    """An ICCS move (``h2e2``) as one integer in [0, 8100): from-square * 90 + to-square."""
    move = iccs.lower()
    src = FILES.index(move[0]) * 10 + int(move[1])
    dst = FILES.index(move[2]) * 10 + int(move[3])
    return src * 90 + dst


def move_text(index: int) -> str:
    """The inverse of :func:`move_index`."""
    src, dst = divmod(int(index), 90)
    return f"{FILES[src // 10]}{src % 10}{FILES[dst // 10]}{dst % 10}"


@dataclass(frozen=True)
class BookEntry:
    """A position's most frequent move, how often it was played, and all moves played there."""

    move: str
    count: int
    total: int


class MoveBook:
    """Per position, the most frequent move of a set of games and how often it and any move
    were played there."""

    def __init__(self, keys: np.ndarray, moves: np.ndarray) -> None:
        """``keys[i]`` (uint64) is a position, ``moves[i]`` (:func:`move_index`) the move
        played there, in the games' order (the order breaks ties)."""
        if keys.shape != moves.shape:
            raise ValueError("keys and moves must have the same length")
        n = len(keys)
        empty = np.zeros(0, dtype=np.int64)
        if n == 0:
            self._keys = np.zeros(0, dtype=np.uint64)
            self._moves, self._counts, self._totals, self._firsts = empty, empty, empty, empty
            return
        # the (position, move) pairs, with how often and where first each was played
        by_pair = np.lexsort((moves, keys))
        pk, pm = keys[by_pair], moves[by_pair]
        starts = np.flatnonzero(np.concatenate(([True], (pk[1:] != pk[:-1]) | (pm[1:] != pm[:-1]))))
        pair_count = np.diff(np.append(starts, n))
        pair_first = np.minimum.reduceat(by_pair, starts)
        pair_key, pair_move = pk[starts], pm[starts]
        # per position: the pair played most often, the earliest first among equals
        best_first = np.lexsort((pair_first, -pair_count, pair_key))
        sk = pair_key[best_first]
        heads = np.flatnonzero(np.concatenate(([True], sk[1:] != sk[:-1])))
        self._keys = sk[heads]
        self._moves = pair_move[best_first][heads].astype(np.int64)
        self._counts = pair_count[best_first][heads].astype(np.int64)
        self._totals = np.add.reduceat(pair_count[best_first], heads).astype(np.int64)
        self._firsts = np.minimum.reduceat(pair_first[best_first], heads).astype(np.int64)

    @classmethod
    def from_games(cls, games: Iterable[tuple[str, Sequence[str]]]) -> MoveBook:
        """Count the moves of games given as ``(start FEN, ICCS moves)`` pairs."""
        keys = array("Q")  # packed while replaying: a list of 2.2M ints is ~150 MB
        moves = array("H")
        for fen, played in games:
            board, _ = start_board(fen)
            for iccs in played:
                keys.append(board.zobrist_hash())
                moves.append(move_index(iccs))
                board.push(Move.from_iccs(iccs))
        return cls(np.frombuffer(keys, dtype=np.uint64), np.frombuffer(moves, dtype=np.uint16))

    def __len__(self) -> int:
        """Distinct positions in the book."""
        return len(self._keys)

    def most_common(self, key: int) -> BookEntry | None:
        """The position's most frequent move, or None when no game reached it."""
        i = int(np.searchsorted(self._keys, np.uint64(key)))
        if i == len(self._keys) or int(self._keys[i]) != key:
            return None
        return BookEntry(move_text(self._moves[i]), int(self._counts[i]), int(self._totals[i]))

    def recurring(self, min_count: int) -> int:
        """How many positions were reached at least ``min_count`` times."""
        return int(np.count_nonzero(self._totals >= min_count))

    def first_occurrences(self, min_count: int) -> np.ndarray:
        """Where each position reached at least ``min_count`` times first occurs: indices into
        the games' plies in order (the ``i`` of ``keys[i]``), ascending."""
        return np.sort(self._firsts[self._totals >= min_count])
