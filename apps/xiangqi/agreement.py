"""Top-1 agreement of the model's move with the master's on validation positions.

The sample (:func:`agreement_sample`) is a fixed draw of validation positions with more than one
legal move; each is asked as the player asks it (:func:`move_request`, :func:`pooled_requests`),
in batches of ``decide_many``, and scored for all positions and for those never seen in training
(:func:`cached_training_keys`: positions compared by the rules engine's Zobrist hash of placement
+ side to move). Beside it: the model-free references on the same positions
(:func:`baseline_agreement`) and the time of one unbatched move (:func:`move_timing`). The
command line is :mod:`apps.xiangqi.evaluate`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from apps.xiangqi.board import Board
from apps.xiangqi.core import Move
from apps.xiangqi.model_player import MOVE_DECODER, ModelPlayer, decide_request
from apps.xiangqi.players import GreedyPlayer
from apps.xiangqi.pooling import (
    SymmetryPooling,
    image_questions,
    pooled_pick,
    pooled_probabilities,
)
from apps.xiangqi.render import move_question
from apps.xiangqi.repetition import repetition_safe_moves
from apps.xiangqi.search import SearchConfig
from apps.xiangqi.search_guided import DEFAULT_MARGIN, guided_pick, sound_moves
from apps.xiangqi.symmetry import Symmetry
from apps.xiangqi.training import (
    GameRecord,
    MoveExample,
    board_at,
    example_at,
    iter_positions,
    load_games,
    sample_positions,
)
from decision.errors import DecisionInputError
from decision.metrics import wilson_interval
from decision.progress import Progress


def position_key(board: Board) -> int:
    """Placement + side to move (the FEN's first two fields), as the Zobrist hash."""
    return board.zobrist_hash()


def training_keys(games: Iterable[GameRecord]) -> set[int]:
    """Keys of every position (before each move, and the final one) of the training games."""
    keys: set[int] = set()
    for game in games:
        board = None
        for board, _ in iter_positions(game):
            keys.add(position_key(board))
        if board is not None:
            keys.add(position_key(board))
    return keys


def games_sha256(games_path: str | Path) -> str:
    """The SHA-256 of a games file's bytes (what the keys cache and a result's ``setup`` record
    of the games they came from)."""
    try:
        return hashlib.sha256(Path(games_path).read_bytes()).hexdigest()
    except OSError as exc:  # as load_games says it
        raise DecisionInputError(f"cannot read games file {games_path}: {exc}", "games") from None


def cached_training_keys(games_path: str | Path, cache: str | Path | None) -> set[int]:
    """:func:`training_keys`, stored as a sorted uint64 ``.npy`` at ``cache`` once computed,
    with the SHA-256 of the games file beside it (``CACHE.source.json``): a cache of other games
    (or one without that record) is computed again, never read as these games' keys."""
    import numpy as np

    if cache is None:
        return training_keys(load_games(games_path))
    digest = games_sha256(games_path)
    source = Path(f"{cache}.source.json")
    if Path(cache).is_file() and source.is_file():
        try:
            recorded = json.loads(source.read_text()).get("games_sha256")
        except (OSError, ValueError, AttributeError):
            recorded = None
        if recorded == digest:
            return {int(k) for k in np.load(cache)}
    keys = training_keys(load_games(games_path))
    Path(cache).parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, np.array(sorted(keys), dtype=np.uint64))
    source.write_text(json.dumps({"games": Path(games_path).name, "games_sha256": digest}))
    return keys


@dataclass
class AgreementResult:
    positions: int
    top1: float
    unseen_positions: int
    unseen_top1: float | None
    # 95 % Wilson intervals of the two agreements (decision.metrics.wilson_interval)
    top1_interval: tuple[float, float] | None
    unseen_top1_interval: tuple[float, float] | None
    legal: int  # decoded moves that were legal options
    seconds: float
    by_phase: dict[str, dict[str, float]] = field(default_factory=dict)
    player: str = "policy"
    # one per sample position, in sample order (ply, gold, move played, hit, seen in training,
    # key: the position's Zobrist key, since 2026-12-07): what a paired comparison of two models
    # on the same sample needs (benchmarks/compare_xiangqi_agreement.py checks the positions)
    results: list[dict[str, Any]] = field(default_factory=list)


class SamplePosition(NamedTuple):
    """A validation position: the rendered example, its key, its ply and the board itself."""

    example: MoveExample
    key: int
    ply: int
    board: Board


def agreement_sample(games: Sequence[GameRecord], count: int, seed: int
                     ) -> list[SamplePosition]:
    """A fixed sample of validation positions with more than one legal move."""
    out: list[SamplePosition] = []
    for ref in sample_positions(games, count * 2, seed):
        game = games[ref.game]
        board = board_at(game, ref.ply)
        if len(board.legal_moves) > 1:
            out.append(SamplePosition(example_at(board, game.moves[ref.ply]), position_key(board),
                                      ref.ply, board))
        if len(out) == count:
            break
    return out


def player_label(search: SearchConfig | None, margin: float,
                  pooling: SymmetryPooling | None = None) -> str:
    """How the moves were chosen, as recorded in the results."""
    label = "policy" if search is None else (
        f"policy+search (depth {search.depth}, margin {margin:g})")
    if pooling is not None:
        label += f", {len(pooling.images)} images pooled from ply {pooling.from_ply}"
    return label


def game_phase(ply: int) -> str:
    return "opening (ply < 20)" if ply < 20 else "middle (20-79)" if ply < 80 else "late (80+)"


def move_request(position: SamplePosition, probabilities: bool = False,
                 decoder: str = MOVE_DECODER) -> dict[str, Any]:
    """The question the player asks about ``position`` as a ``decide_many`` request: its
    options leave out a move that ends the game by repetition at once (``ModelPlayer``)."""
    question = move_question(position.board, repetition_safe_moves(position.board))
    return decide_request(position.example.document, question,
                          return_probabilities=probabilities, decoder=decoder)


def pooled_requests(position: SamplePosition, pooling: SymmetryPooling,
                    decoder: str = MOVE_DECODER) -> tuple[tuple[Symmetry, ...],
                                                          list[dict[str, Any]]]:
    """The images ``pooling`` asks for ``position`` and their ``decide_many`` requests (the
    player's question in each image, probabilities on: ``ModelPlayer`` with ``pooling``)."""
    images = pooling.images_of(position.board)
    asked = image_questions(position.board, repetition_safe_moves(position.board), images)
    return images, [decide_request(q.document, q.question, return_probabilities=True,
                                   decoder=decoder) for q in asked]


def agreement(model: Any, sample: Sequence[SamplePosition], seen: set[int],
              batch_size: int = 32, search: SearchConfig | None = None,
              margin: float = DEFAULT_MARGIN, decoder: str = MOVE_DECODER,
              pooling: SymmetryPooling | None = None,
              bar: Progress | None = None) -> AgreementResult:
    """Decode every sample position (batched ``decide_many``) and compare with the gold move.

    ``search``: the move is the one :class:`SearchGuidedPlayer` would play (blunders vetoed).
    ``decoder``: how the move is asked (``model_player.MOVE_DECODERS``); the player's by default.
    ``pooling``: asked in the position's images as ``ModelPlayer(pooling=...)`` asks
    (apps/xiangqi/pooling.py); ``batch_size`` then counts positions, not images.
    ``bar``: updated with each batch's positions.
    """
    from decision.joint.engine import decide_many

    t0 = time.monotonic()
    legal = 0
    results: list[dict[str, Any]] = []
    for start in range(0, len(sample), batch_size):
        chunk = sample[start : start + batch_size]
        if pooling is None:
            requests = [move_request(p, search is not None, decoder) for p in chunk]
            answers = [(d.answers[0].value, d.answers[0].option_probabilities)
                       for d in decide_many(model, requests)]
        else:
            asked = [pooled_requests(p, pooling, decoder) for p in chunk]
            decisions = iter(decide_many(model, [r for _, rs in asked for r in rs]))
            answers = []
            for images, _ in asked:
                own = [next(decisions).answers[0].option_probabilities or {} for _ in images]
                pooled = pooled_probabilities(images, own)
                answers.append((pooled_pick(pooled, own[0]), pooled))
        for (ex, key, ply, board), (move, probabilities) in zip(chunk, answers, strict=True):
            legal += move in ex.question["answer"]["options"]
            if search is not None:
                sound = sound_moves(board, search, margin)
                move = guided_pick(Move.from_iccs(move), probabilities, sound).iccs()
            results.append({"ply": ply, "gold": ex.gold, "move": move, "hit": move == ex.gold,
                            "seen": key in seen, "key": key})
        if bar is not None:
            bar.update(len(chunk))
    phases: dict[str, list[bool]] = {}
    for r in results:
        phases.setdefault(game_phase(r["ply"]), []).append(r["hit"])
    unseen = [r["hit"] for r in results if not r["seen"]]
    n = len(sample)
    hits = sum(r["hit"] for r in results)
    return AgreementResult(
        positions=n, top1=hits / max(1, n),
        unseen_positions=len(unseen), unseen_top1=sum(unseen) / len(unseen) if unseen else None,
        top1_interval=wilson_interval(hits, n) if n else None,
        unseen_top1_interval=wilson_interval(sum(unseen), len(unseen)) if unseen else None,
        legal=legal, seconds=round(time.monotonic() - t0, 1),
        by_phase={k: {"n": len(v), "top1": sum(v) / len(v)} for k, v in sorted(phases.items())},
        player=player_label(search, margin, pooling), results=results,
    )


def baseline_agreement(games: Sequence[GameRecord], count: int, seed: int) -> dict[str, Any]:
    """Model-free references on the positions :func:`agreement_sample` draws (same arguments):
    the expected top-1 of a uniformly random legal move (mean of 1 / options) and the top-1 of
    the one-ply greedy material player."""
    greedy = GreedyPlayer(0)
    n = hits = 0
    uniform = 0.0
    for ref in sample_positions(games, count * 2, seed):
        game = games[ref.game]
        board = board_at(game, ref.ply)
        legal = board.legal_moves
        if len(legal) > 1:
            n += 1
            uniform += 1 / len(legal)
            hits += greedy.choose(board).iccs() == game.moves[ref.ply]
        if n == count:
            break
    return {"positions": n, "uniform_random_top1": round(uniform / max(1, n), 4),
            "greedy_top1": round(hits / max(1, n), 4)}


def move_timing(model: Any, sample: Sequence[SamplePosition], decoder: str = MOVE_DECODER,
                pooling: SymmetryPooling | None = None) -> dict[str, Any]:
    """Wall and CPU seconds of one unbatched move of ``ModelPlayer`` with ``decoder`` and
    ``pooling`` (mean), and how many of the positions were asked in more than one image."""
    player = ModelPlayer(model, decoder=decoder, pooling=pooling)
    wall = cpu = 0.0
    pooled = 0
    for position in sample:
        w, c = time.perf_counter(), time.process_time()
        player.choose_with_info(position.board)
        wall += time.perf_counter() - w
        cpu += time.process_time() - c
        pooled += pooling is not None and len(pooling.images_of(position.board)) > 1
    n = max(1, len(sample))
    return {"positions": len(sample), "pooled_positions": pooled,
            "wall_s": round(wall / n, 3), "cpu_s": round(cpu / n, 3)}
