"""Measure the Xiangqi player: agreement with master moves and matches against baseline players.

``python -m apps.xiangqi.evaluate --model models/xiangqi agreement --positions 2000``
``python -m apps.xiangqi.evaluate --model models/xiangqi match --opponent random --games 100``

The command line; the measurements are :mod:`apps.xiangqi.agreement` and
:mod:`apps.xiangqi.matches`.

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
with ``decide_many`` (:class:`~apps.xiangqi.batching.BatchingModel`): each game runs in its own
thread with its own ``ModelPlayer``, whose ``model.decide`` calls are gathered into one batch.

The result (printed, and written with ``--out``) carries a ``setup`` block (:func:`run_setup`):
the model directory and its weights' fingerprint, the games files and their SHA-256, the seed,
the decoding options and the command line, so that a number can be traced to what made it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from apps.xiangqi.agreement import (
    agreement,
    agreement_sample,
    baseline_agreement,
    cached_training_keys,
    games_sha256,
    move_timing,
)
from apps.xiangqi.matches import play_match
from apps.xiangqi.model_player import MOVE_DECODER, MOVE_DECODERS
from apps.xiangqi.pooling import SymmetryPooling
from apps.xiangqi.search import SearchConfig
from apps.xiangqi.search_guided import DEFAULT_MARGIN, check_margin
from apps.xiangqi.training import load_games
from decision.progress import Progress

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "xiangqi"


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
