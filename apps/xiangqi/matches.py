"""Matches of the model player against the baseline players.

:func:`play_match` plays games of :class:`~apps.xiangqi.model_player.ModelPlayer` (or
:class:`~apps.xiangqi.search_guided.SearchGuidedPlayer`) against
:class:`~apps.xiangqi.players.RandomPlayer` or :class:`~apps.xiangqi.players.GreedyPlayer` with
:func:`~apps.xiangqi.players.play_game`, half with each colour, each game in its own thread, the
model moves batched (:class:`~apps.xiangqi.batching.BatchingModel`). Score = wins + draws / 2; a
game stopped by the ply limit is unfinished and counted as a draw (reported separately). The
command line is :mod:`apps.xiangqi.evaluate`.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from apps.xiangqi.agreement import player_label
from apps.xiangqi.batching import BatchingModel
from apps.xiangqi.board import Board
from apps.xiangqi.core import BLACK, RED
from apps.xiangqi.model_player import ModelPlayer
from apps.xiangqi.players import GreedyPlayer, Player, RandomPlayer, material, play_game
from apps.xiangqi.pooling import SymmetryPooling
from apps.xiangqi.search import SearchConfig
from apps.xiangqi.search_guided import DEFAULT_MARGIN, SearchGuidedPlayer
from decision.errors import DecisionInputError
from decision.progress import Progress


@dataclass
class MatchResult:
    opponent: str
    games: int
    max_plies: int
    wins: int
    draws: int  # finished draws (repetition, no-capture limit)
    unfinished: int  # stopped at max_plies, counted as draws in the score
    losses: int
    score: float  # (wins + (draws + unfinished) / 2) / games
    player: str  # "policy" (the model alone) or "policy+search (depth d, margin m)", pooled?
    overrides: int  # model moves the search vetoed and replaced
    mean_material: float  # model's material minus the opponent's at the end (soldier units)
    model_moves: int
    seconds: float
    results: list[dict[str, Any]]


def _opponent(name: str, seed: int) -> Player:
    if name == "random":
        return RandomPlayer(seed)
    if name == "greedy":
        return GreedyPlayer(seed)
    raise DecisionInputError(f"opponent must be 'random' or 'greedy', got {name!r}", "opponent")


def play_match(model: Any, opponent: str, games: int, max_plies: int = 150, seed: int = 0,
               concurrency: int = 50, progress: str | Path | None = None,
               search: SearchConfig | None = None, margin: float = DEFAULT_MARGIN,
               pooling: SymmetryPooling | None = None,
               bar: Progress | None = None) -> MatchResult:
    """``games`` games of ModelPlayer vs ``opponent`` (even index: the model plays red).

    ``search``: play :class:`SearchGuidedPlayer` (the model's moves with blunders vetoed by a
    material search) instead of the model alone. ``pooling``: the player asks in the
    position's images (apps/xiangqi/pooling.py).

    ``progress``: a JSON-lines file that gets each game's record as soon as it ends, so a match
    stopped early still leaves its finished games. ``bar``: updated as each game ends. A Ctrl-C
    (or a game's error) stops the match within a model move: games in play are abandoned.
    """
    if games < 1 or max_plies < 1:
        raise DecisionInputError("games and max_plies must be >= 1", "games")
    finished = [0]
    lock = threading.Lock()
    stopping = threading.Event()
    # games that can ask at once: every running game until fewer than `concurrency` are left
    batching = BatchingModel(model, expected=lambda: min(concurrency, games - finished[0]),
                             max_batch=concurrency)

    def one(i: int) -> dict[str, Any]:
        model_red = i % 2 == 0
        me = (ModelPlayer(batching, name="xiangqi-model", pooling=pooling) if search is None
              else SearchGuidedPlayer(batching, name="xiangqi-model", search=search,
                                      margin=margin, pooling=pooling))
        other = _opponent(opponent, seed + i)
        red, black = (me, other) if model_red else (other, me)
        try:
            result, moves = play_game(red, black, max_plies=max_plies)
        finally:
            with lock:
                finished[0] += 1  # played out or not, it asks the model no more
        if bar is not None and not stopping.is_set():
            with lock:
                bar.update(1)
        mine = "1-0" if model_red else "0-1"
        theirs = "0-1" if model_red else "1-0"
        outcome = ("win" if result == mine else "loss" if result == theirs
                   else "draw" if result == "1/2-1/2" else "unfinished")
        model_moves = sum(1 for k in range(len(moves)) if (k % 2 == 0) == model_red)
        final = Board()
        for move in moves:
            final.push_iccs(move)  # replayed: every move of the game is checked legal again
        record = {"game": i, "model": "red" if model_red else "black", "result": result,
                  "overrides": getattr(me, "overrides", 0),
                  "outcome": outcome, "plies": len(moves), "model_moves": model_moves,
                  "material": material(final, RED if model_red else BLACK),
                  "moves": " ".join(moves)}
        if progress is not None:
            with lock, Path(progress).open("a") as f:
                f.write(json.dumps(record) + "\n")
        return record

    t0 = time.monotonic()
    pool = ThreadPoolExecutor(max_workers=min(concurrency, games))
    try:
        futures = [pool.submit(one, i) for i in range(games)]
        results = [future.result() for future in futures]
    except BaseException:
        # A Ctrl-C (or a game's error) stops the match now: the games not started are dropped
        # and those in play fail at their next model move, instead of playing to their end.
        stopping.set()
        pool.shutdown(wait=False, cancel_futures=True)
        batching.close(abandon=True)
        raise
    finally:
        pool.shutdown(wait=True)
        batching.close()
    count = {k: sum(r["outcome"] == k for r in results)
             for k in ("win", "draw", "unfinished", "loss")}
    return MatchResult(
        opponent=opponent, games=games, max_plies=max_plies, wins=count["win"],
        draws=count["draw"], unfinished=count["unfinished"], losses=count["loss"],
        score=(count["win"] + (count["draw"] + count["unfinished"]) / 2) / games,
        player=player_label(search, margin, pooling),
        overrides=sum(r["overrides"] for r in results),
        mean_material=sum(r["material"] for r in results) / games,
        model_moves=sum(r["model_moves"] for r in results),
        seconds=round(time.monotonic() - t0, 1), results=results,
    )
