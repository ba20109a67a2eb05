"""``decision xiangqi``: perft counts, a game in the terminal, and the game server on its own.

* ``decision xiangqi perft --depth 3 [--fen FEN] [--divide]``: count legal move sequences.
* ``decision xiangqi play --model-side black [--model auto|default|random|greedy|PATH]``: play the
  model in the terminal (moves in ICCS, e.g. ``h2e2``; ``undo``, ``moves``, ``quit``).
* ``decision xiangqi serve [--db PATH] [--port 8000]``: only the game API and web board
  (``decision serve`` includes them too, next to ``/decide``).

Kept light at import time: the model is loaded only when a command needs it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TextIO

from apps.xiangqi.board import Board
from apps.xiangqi.core import COLOR_NAMES
from apps.xiangqi.errors import XiangqiError
from apps.xiangqi.fen import STARTING_FEN
from decision.errors import DecisionInputError


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``xiangqi`` and its own subcommands to the ``decision`` parser."""
    parser = subparsers.add_parser(
        "xiangqi", help="Xiangqi: perft, play the model in the terminal, serve the web board",
        description="Xiangqi (Chinese chess) against the decision model.",
    )
    sub = parser.add_subparsers(dest="xiangqi_command", metavar="ACTION", required=True)

    perft = sub.add_parser("perft", help="count legal move sequences to a depth")
    perft.add_argument("--depth", type=int, default=3, help="plies (default 3)")
    perft.add_argument("--fen", default=STARTING_FEN, help="position (default: start)")
    perft.add_argument("--divide", action="store_true", help="count per first move")
    perft.set_defaults(func=run_perft)

    play = sub.add_parser("play", help="play against the model in the terminal")
    play.add_argument("--model-side", choices=("red", "black", "none"), default="black")
    play.add_argument("--model", default=None,
                      help="auto (default), default, random, greedy, or a checkpoint directory")
    play.add_argument("--fen", default=STARTING_FEN, help="start position (default: start)")
    play.add_argument("--device", default="cpu")
    play.set_defaults(func=run_play)

    serve = sub.add_parser("serve", help="serve only the game API and the web board")
    serve.add_argument("--db", default=None, help="SQLite file (default: the data dir)")
    serve.add_argument("--model", default=None, help="as for play")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(func=run_serve)


def run_perft(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Print the perft count (and per-move counts with ``--divide``) and the time taken."""
    from apps.xiangqi.perft import divide, perft

    out = out or sys.stdout
    if args.depth < 0:  # one line with the command's prefix, as every other bad input
        raise DecisionInputError(f"--depth must be >= 0, got {args.depth}", "depth")
    board = Board(args.fen)
    start = time.perf_counter()
    if args.divide and args.depth >= 1:
        counts = divide(board, args.depth)
        for move, count in sorted(counts.items()):
            print(f"{move}: {count}", file=out)
        total = sum(counts.values())
    else:
        total = perft(board, args.depth)
    seconds = time.perf_counter() - start
    print(f"perft({args.depth}) = {total}  [{seconds:.2f} s]", file=out)
    return 0


def _print_position(board: Board, out: TextIO) -> None:
    print(board, file=out)
    status = f"{COLOR_NAMES[board.turn]} to move"
    if board.is_check():
        status += ", in check"
    print(status, file=out)


def run_play(
    args: argparse.Namespace,
    inp: TextIO | None = None,
    out: TextIO | None = None,
    player_factory: Callable[[], object] | None = None,
) -> int:
    """A game in the terminal: you type ICCS moves, the model answers for its side."""
    from apps.xiangqi.model_player import choose_move
    from apps.xiangqi.player_settings import (
        check_player_setting,
        player_from_setting,
        setting_loads_model,
    )

    if player_factory is None:
        check_player_setting(args.model)  # before the game, not at the model's first move
    inp = inp or sys.stdin
    out = out or sys.stdout
    board = Board(args.fen)
    player = None

    def model() -> object:
        nonlocal player
        if player is None:
            if player_factory is None and setting_loads_model(args.model):
                print("loading the model...", file=out)
            player = (player_factory or (lambda: player_from_setting(args.model, args.device)))()
        return player

    print("moves in ICCS (e.g. h2e2); 'undo', 'moves', 'quit'", file=out)
    while True:
        _print_position(board, out)
        outcome = board.outcome()
        if outcome is not None:
            print(f"game over: {outcome.result()} ({outcome.termination.name.lower()})",
                  file=out)
            return 0
        side = COLOR_NAMES[board.turn]
        if args.model_side == side:
            choice = choose_move(model(), board.copy())  # type: ignore[arg-type]
            note = f" (confidence {choice.confidence:.2f})" if choice.confidence else ""
            print(f"model plays {choice.move.iccs()} = {board.wxf(choice.move)}{note}", file=out)
            board.push(choice.move)
            continue
        out.write(f"{side}> ")
        out.flush()
        line = inp.readline()
        if not line:  # end of input
            print("", file=out)
            return 0
        text = line.strip()
        if text in ("quit", "exit", "q"):
            return 0
        if text == "moves":
            print(" ".join(m.iccs() for m in board.legal_moves), file=out)
            continue
        if text == "undo":
            _undo(board, args.model_side, out)
            continue
        if not text:
            continue
        try:
            move = board.push_iccs(text)
        except XiangqiError as e:
            print(f"not played: {e.message}", file=out)
            continue
        board.pop()
        wxf = board.wxf(move)
        board.push(move)
        print(f"you play {move.iccs()} = {wxf}", file=out)


def _undo(board: Board, model_side: str, out: TextIO) -> None:
    """Take back a move; against the model, its reply and your move before it."""
    if not board.move_stack:
        print("nothing to undo", file=out)
        return
    board.pop()
    if model_side != "none" and COLOR_NAMES[board.turn] == model_side and board.move_stack:
        board.pop()


def run_serve(args: argparse.Namespace) -> int:
    """Run the game server (the API and the board at /xiangqi) with uvicorn."""
    import uvicorn

    from apps.xiangqi.api import create_app
    from apps.xiangqi.player_settings import check_player_setting, player_from_setting

    if not 0 <= args.port <= 65535:  # else a traceback from the socket once the server starts
        raise DecisionInputError(f"--port must be from 0 to 65535, got {args.port}", "port")
    check_player_setting(args.model)  # a bad setting: exit 2 now, not a 503 at the first move
    app = create_app(args.db, lambda: player_from_setting(args.model))
    print(f"Xiangqi board at {board_url(args.host, args.port)}", file=sys.stderr)
    # The app has no start-up or shutdown work (create_app sets up its store): with the lifespan
    # protocol off, a forced quit (a second Ctrl-C) does not log the lifespan task's cancellation
    # as an error traceback.
    uvicorn.run(app, host=args.host, port=args.port, lifespan="off")
    return 0


def board_url(host: str, port: int) -> str:
    """The board's address as a browser takes it: an IPv6 host in brackets; port 0 (the system
    picks one, which uvicorn's start-up line names) is said as such."""
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    if port == 0:
        return f"http://{shown}:<the port uvicorn names below>/xiangqi/"
    return f"http://{shown}:{port}/xiangqi/"


def main(argv: list[str] | None = None) -> int:
    """``python -m apps.xiangqi.cli ...``: the same commands without the ``decision`` front."""
    parser = argparse.ArgumentParser(prog="decision")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["xiangqi", *(sys.argv[1:] if argv is None else argv)])
    from decision.cli import exit_status  # the decision CLI's one mapping of errors to statuses

    return exit_status(lambda: int(args.func(args)), "decision xiangqi: ", detail=True)


if __name__ == "__main__":
    sys.exit(main())
