"""Measure the Xiangqi player: agreement with master moves and matches against baseline players.

``python -m apps.xiangqi.evaluate --model models/xiangqi agreement --positions 2000``
``python -m apps.xiangqi.evaluate --model models/xiangqi match --opponent random --games 100``

* **Agreement**: top-1 agreement of the decoded move with the master's on a fixed sample of
  validation positions (positions with one legal move are skipped: nothing to decide), also
  for the positions never seen in training: board and side to move (the FEN's first two fields)
  do not occur anywhere in the training games. Positions are compared by the rules engine's
  64-bit Zobrist hash of placement + side to move, which is equal exactly for equal FEN board and
  side up to hash collisions (probability ~ 2.2M / 2^64, negligible).
* **Matches**: games of :class:`~apps.xiangqi.model_player.ModelPlayer` against
  :class:`~apps.xiangqi.players.RandomPlayer` or :class:`~apps.xiangqi.players.GreedyPlayer` with
  :func:`~apps.xiangqi.players.play_game`, half with each colour. Score = wins + draws / 2; a game
  stopped by the ply limit is unfinished and counted as a draw (reported separately).

Both use the service's decision path (``decision.joint.engine``: the prompt ``position_document``
+ ``move_question``, constrained ``choice`` decoding). For speed, concurrent decisions are batched
with ``decide_many`` (:class:`BatchingModel`): each game runs in its own thread with its own
``ModelPlayer``, whose ``model.decide`` calls are gathered into one batch.

The result (printed, and written with ``--out``) carries a ``setup`` block (:func:`run_setup`):
the model directory and its weights' fingerprint, the games files and their SHA-256, the seed,
the decoding options and the command line, so that a number can be traced to what made it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import torch

from apps.xiangqi.board import Board
from apps.xiangqi.core import BLACK, RED, Move
from apps.xiangqi.model_player import (
    DEFAULT_MARGIN,
    MOVE_DECODER,
    MOVE_DECODERS,
    ModelPlayer,
    SearchGuidedPlayer,
    check_margin,
    decide_request,
    guided_pick,
    repetition_safe_moves,
    sound_moves,
)
from apps.xiangqi.players import GreedyPlayer, Player, RandomPlayer, material, play_game
from apps.xiangqi.pooling import (
    SymmetryPooling,
    image_questions,
    pooled_pick,
    pooled_probabilities,
)
from apps.xiangqi.render import move_question
from apps.xiangqi.search import SearchConfig
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

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "xiangqi"


# ---------------------------------------------------------------------- batching


class BatchingClosed(RuntimeError):
    """A decision asked of a :class:`BatchingModel` that was closed (a match being stopped)."""


class BatchingModel:
    """``decide`` with DecisionModel's signature; concurrent calls are answered by one batch.

    A collector thread takes the first waiting request, then gathers more until ``expected()``
    requests are waiting (the games that can ask now) or ``wait_s`` passes, and answers them all
    with ``decide_many`` (the same engine ``decide`` uses).
    """

    def __init__(self, model: Any, expected: Callable[[], int] | None = None,
                 max_batch: int = 64, wait_s: float = 0.5) -> None:
        self.model = model
        self.tokenizer = model.tokenizer
        self.expected = expected or (lambda: max_batch)
        self.max_batch = max_batch
        self.wait_s = wait_s
        self.batches: list[int] = []  # size of every batch run
        self._queue: queue.Queue[tuple[dict[str, Any], Future[Any]] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self._abandon = False
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()

    def decide(self, document: str, questions: list[Any], mode: str = "joint",
               threshold: float = 0.9, return_probabilities: bool = False,
               commit: str | None = None, score_options: bool = False) -> Any:
        fut: Future[Any] = Future()
        request = {"document": document, "questions": questions, "mode": mode,
                   "threshold": threshold, "return_probabilities": return_probabilities,
                   "commit": commit, "score_options": score_options}
        with self._lock:  # nothing is queued behind the collector's end
            if self._closed:
                raise BatchingClosed("the batching model is closed")
            self._queue.put((request, fut))
        return fut.result()

    def close(self, abandon: bool = False) -> None:
        """Stop the collector once the requests queued so far are answered; ``abandon``: fail
        them instead (BatchingClosed), and the batch being decided, if any, is the last one.
        Every later ``decide`` fails at once, so threads still playing end promptly."""
        with self._lock:
            self._abandon = self._abandon or abandon
            if not self._closed:
                self._closed = True
                self._queue.put(None)
        self._thread.join()

    def _collect(self) -> None:
        from decision.joint.engine import decide_many

        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            deadline = time.monotonic() + self.wait_s
            while len(batch) < min(self.max_batch, max(1, self.expected())):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    item = self._queue.get(timeout=left)
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)
                    break
                batch.append(item)
            if self._abandon:
                for _, fut in batch:
                    fut.set_exception(BatchingClosed("the batching model was closed"))
                continue
            self.batches.append(len(batch))
            try:
                results = decide_many(self.model, [r for r, _ in batch])
            except Exception as exc:  # noqa: BLE001 - handed to every waiting caller
                for _, fut in batch:
                    fut.set_exception(exc)
                continue
            for (_, fut), result in zip(batch, results, strict=True):
                fut.set_result(result)


# ---------------------------------------------------------------------- agreement


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


def _player_label(search: SearchConfig | None, margin: float,
                  pooling: SymmetryPooling | None = None) -> str:
    """How the moves were chosen, as recorded in the results."""
    label = "policy" if search is None else (
        f"policy+search (depth {search.depth}, margin {margin:g})")
    if pooling is not None:
        label += f", {len(pooling.images)} images pooled from ply {pooling.from_ply}"
    return label


def _phase(ply: int) -> str:
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
        phases.setdefault(_phase(r["ply"]), []).append(r["hit"])
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
        player=_player_label(search, margin, pooling), results=results,
    )


# ---------------------------------------------------------------------- matches


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
        player=_player_label(search, margin, pooling),
        overrides=sum(r["overrides"] for r in results),
        mean_material=sum(r["material"] for r in results) / games,
        model_moves=sum(r["model_moves"] for r in results),
        seconds=round(time.monotonic() - t0, 1), results=results,
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


# ---------------------------------------------------------------------- command line


def _load(path: str, device: str = "cpu") -> Any:
    from decision import load_model

    return load_model(path, device=device, dtype=torch.float32)


def _margin(text: str) -> float:
    """``--margin``: a finite number of soldier units >= 0."""
    try:
        return check_margin(float(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _ply(text: str) -> int:
    """``--pool-from-ply``: a whole number of plies >= 0."""
    try:
        ply = int(text)
    except ValueError:
        ply = -1
    if ply < 0:
        raise argparse.ArgumentTypeError(f"a ply must be a whole number >= 0, got {text!r}")
    return ply


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m apps.xiangqi.evaluate",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/xiangqi")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="where the model runs: cpu or cuda[:N]")
    parser.add_argument("--out", default=None, help="write the result as JSON here")
    sub = parser.add_subparsers(dest="command", required=True)
    agr = sub.add_parser("agreement")
    agr.add_argument("--positions", type=int, default=2000)
    agr.add_argument("--seed", type=int, default=2026)
    agr.add_argument("--batch-size", type=int, default=32)
    agr.add_argument("--train-games", default=str(DATA / "train-games.jsonl.gz"))
    agr.add_argument("--valid-games", default=str(DATA / "valid-games.jsonl.gz"))
    agr.add_argument("--baselines", action="store_true",
                     help="only the model-free references on the same positions")
    agr.add_argument("--timing", type=int, default=0,
                     help="also time this many unbatched decisions (ModelPlayer's call)")
    agr.add_argument("--keys-cache", default="runs/xiangqi-train-keys.npy",
                     help="where the training positions' keys are kept between runs")
    agr.add_argument("--search-depth", type=int, default=0,
                     help="score the moves SearchGuidedPlayer plays at this depth (0: the model's)")
    agr.add_argument("--margin", type=_margin, default=DEFAULT_MARGIN)
    agr.add_argument("--decoder", choices=MOVE_DECODERS, default=MOVE_DECODER,
                     help="how the move is asked (the player's: %(default)s)")
    keys = sub.add_parser("keys", help="compute and cache the training positions' keys")
    keys.add_argument("--train-games", default=str(DATA / "train-games.jsonl.gz"))
    keys.add_argument("--keys-cache", default="runs/xiangqi-train-keys.npy")
    mat = sub.add_parser("match")
    mat.add_argument("--opponent", choices=("random", "greedy"), required=True)
    for command in (agr, mat):  # --out also after the subcommand (SUPPRESS: no default there)
        command.add_argument("--out", default=argparse.SUPPRESS,
                             help="write the result as JSON here")
    mat.add_argument("--games", type=int, default=100)
    mat.add_argument("--max-plies", type=int, default=150)
    mat.add_argument("--seed", type=int, default=0)
    mat.add_argument("--concurrency", type=int, default=50)
    mat.add_argument("--progress", default=None, help="JSON lines: each game as it ends")
    mat.add_argument("--search-depth", type=int, default=0,
                     help="veto the model's blunders with a material search this deep (0: off)")
    mat.add_argument("--margin", type=_margin, default=DEFAULT_MARGIN,
                     help="soldier units below the best searched move that a move may lose")
    for command in (agr, mat):
        command.add_argument("--quiet", action="store_true",
                             help="no progress bar on stderr (positions or games done, rate, "
                                  "time left)")
        command.add_argument("--pool-from-ply", type=_ply, default=None, metavar="PLY",
                             help="ask in the position's four images from this ply on and "
                                  "average (apps/xiangqi/pooling.py; default: as is only; the "
                                  "served model alone pools from 20)")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # recorded in the result's setup
    from decision.cli import exit_status  # the decision CLI's one mapping of errors to statuses

    return exit_status(lambda: _run(parser, args), "apps.xiangqi.evaluate: ", detail=True)


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """The parsed command; a Ctrl-C ends it with status 130 (:func:`decision.cli.exit_status`),
    after a match says where the games it finished are."""
    torch.set_num_threads(args.threads)
    if args.command == "keys":
        keys = cached_training_keys(args.train_games, args.keys_cache)
        print(f"{len(keys)} distinct training positions in {args.keys_cache}")
        return 0
    if args.command == "agreement" and args.baselines:  # no model needed
        baselines = {"baselines": baseline_agreement(load_games(args.valid_games),
                                                     args.positions, args.seed),
                     "setup": run_setup(args)}
        print(json.dumps(baselines))
        _write_out(args.out, baselines)
        return 0
    model = _load(args.model, args.device)
    search = SearchConfig(depth=args.search_depth) if args.search_depth else None
    pooling = None if args.pool_from_ply is None else SymmetryPooling(args.pool_from_ply)
    if pooling is not None and args.command == "agreement" and args.decoder != "score":
        parser.error("--pool-from-ply needs --decoder score (it averages option probabilities)")
    setup = run_setup(args, model)
    if args.command == "agreement":
        sample = agreement_sample(load_games(args.valid_games), args.positions, args.seed)
        seen = cached_training_keys(args.train_games, args.keys_cache)
        bar = Progress(len(sample), label="agreement", unit="positions", enabled=not args.quiet)
        try:
            result: Any = agreement(model, sample, seen, args.batch_size, search, args.margin,
                                    args.decoder, pooling, bar)
        finally:
            bar.close()
        if args.timing:
            timing = move_timing(model, sample[: args.timing], args.decoder, pooling)
            print(json.dumps({"unbatched_move": timing}))
    else:
        bar = Progress(args.games, label=f"match vs {args.opponent}", unit="games",
                       enabled=not args.quiet and args.games >= 1)
        try:
            result = play_match(model, args.opponent, args.games, args.max_plies, args.seed,
                                args.concurrency, args.progress, search, args.margin, pooling,
                                bar)
        except KeyboardInterrupt:
            bar.close()
            if args.progress:
                print(f"match stopped: the games finished so far are in {args.progress}",
                      file=sys.stderr)
            raise
        finally:
            bar.close()
    summary = {k: v for k, v in asdict(result).items() if k != "results"}
    summary["setup"] = setup
    record = {**summary, "results": result.results}
    print(json.dumps(summary, indent=2))
    _write_out(args.out, record)
    return 0


def run_setup(args: argparse.Namespace, model: Any = None) -> dict[str, Any]:
    """What made a result (its ``setup`` block, printed and written with ``--out``): the model
    directory as given and the fingerprint of its weights as loaded (``weights_fingerprint``;
    both null where no model played: ``--baselines``), the games files with their SHA-256, the
    seed and sizes, the decoding options and the command line. An option the run did not use
    is null (``margin`` without a search; a baseline's decoder, search and pooling)."""
    from decision.model.checkpoint import weights_fingerprint

    played = model is not None
    search = played and args.search_depth > 0
    setup: dict[str, Any] = {
        "command": args.command,
        "model": args.model if played else None,
        "model_fingerprint": weights_fingerprint(model) if played else None,
        "device": args.device, "threads": torch.get_num_threads(), "seed": args.seed,
    }
    if args.command == "agreement":
        setup.update({
            "baselines": not played, "positions": args.positions,
            "batch_size": args.batch_size if played else None,
            "valid_games": args.valid_games, "valid_games_sha256": games_sha256(args.valid_games),
            "train_games": args.train_games if played else None,
            "train_games_sha256": games_sha256(args.train_games) if played else None,
            "decoder": args.decoder if played else None,
        })
    else:
        setup.update({"opponent": args.opponent, "games": args.games,
                      "max_plies": args.max_plies, "concurrency": args.concurrency})
    setup.update({
        "search_depth": args.search_depth if played else None,
        "margin": args.margin if search else None,
        "pool_from_ply": args.pool_from_ply if played else None,
        "argv": list(args.argv),
    })
    return setup


def _write_out(out: str | None, record: dict[str, Any]) -> None:
    """The ``--out`` JSON file, if one was asked for."""
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(record, indent=2))

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
