"""The ``decision`` command: a small dispatcher over subcommands that live in their own modules.

Each module in ``COMMAND_MODULES`` exposes ``register(subparsers)``, which adds its subparser and
sets ``func`` (``argparse.Namespace -> int`` exit status) as a default. Add a command with one
line. Keep those modules light at import time (import torch inside ``func``): ``decision --help``
imports all of them.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from decision.errors import CheckpointError, DecisionError, DecisionInputError

COMMAND_MODULES: list[str] = [
    "decision.serve.command",  # decision serve
    "decision.serve.decide_command",  # decision decide
    "decision.scoring.command",  # decision score
    "apps.xiangqi.cli",  # decision xiangqi
    "decision.train.cli",  # decision train
    "decision.evaluate",  # decision eval
    "apps.contracts.demo",  # decision contracts demo
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="decision",
        description="Joint-mode structured decisions from a block-diffusion language model.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand, its errors as one line that names it (:func:`exit_status`)."""
    try:
        parser = build_parser()  # imports every subcommand's module: torch, FastAPI (seconds)
        args = parser.parse_args(argv)
    except KeyboardInterrupt:  # a Ctrl-C meanwhile, before exit_status's: one line, too
        print("decision: interrupted", file=sys.stderr)
        return 130
    return exit_status(lambda: args.func(args), f"decision {args.command}: ", detail=True)


def exit_status(command: Callable[[], int], prefix: str = "", *, detail: bool = False) -> int:
    """``command()``'s exit status, an error the library raises on purpose as one line on
    stderr: 2 for bad input (a config, an argument) or a checkpoint that cannot be loaded, 1 for
    another (a training run that diverged, TrainingError), 130 for Ctrl-C (outside the training
    loop, which stops with a checkpoint), and 141 (128 + SIGPIPE, as a shell reports a program
    a closed pipe stopped) without a word when the reader of stdout went away (``| head``), 1 with
    one line for a write that a full disk refused (stdout or a file). Each
    line starts with ``prefix``; ``detail`` adds the input's field (``error (field): ...``) and
    says ``cannot load the model`` of a checkpoint, as ``decision COMMAND`` does, where
    ``python -m decision.train`` and ``python -m apps.xiangqi.train_player`` say ``error: ...``
    of both."""
    with _CtrlCNote() as ctrl_c:
        try:
            status = command()
            if sys.stdout is not None:  # None when started with stdout closed (>&-)
                sys.stdout.flush()  # a closed pipe fails here, not in the interpreter's last one
            return status
        except BrokenPipeError:
            if not _stdout_reader_gone():  # another pipe (a FIFO named as --out): an error
                raise
            _drop_stdout()
            return 141
        except KeyboardInterrupt:
            print(f"{prefix}interrupted", file=sys.stderr)
            return 130
        except Exception as exc:
            if ctrl_c.seen:  # a Ctrl-C that native code turned into another error
                print(f"{prefix}interrupted", file=sys.stderr)
                return 130
            if isinstance(exc, OSError) and exc.errno in _DISK_FULL:  # stdout or a file
                where = f"{exc.filename}: " if exc.filename else ""
                print(f"{prefix}error: cannot write: {where}{exc.strerror}", file=sys.stderr)
                return 1
            if not isinstance(exc, DecisionError):
                raise
            return _report(exc, prefix, detail)


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)  # a write that failed for want of space


def _report(exc: DecisionError, prefix: str, detail: bool) -> int:
    """An error the library raises on purpose, as one line on stderr; its exit status."""
    if isinstance(exc, DecisionInputError):
        # the field, unless the message starts with it already (the request's validation
        # says "options.threshold: ...": "error (options.threshold): options.threshold: ...")
        named = exc.field and exc.message.startswith(f"{exc.field}:")
        where = f" ({exc.field})" if detail and exc.field and not named else ""
        print(f"{prefix}error{where}: {exc.message}", file=sys.stderr)
        return 2
    if isinstance(exc, CheckpointError):
        said = "cannot load the model" if detail else "error"
        print(f"{prefix}{said}: {exc}", file=sys.stderr)
        return 2
    print(f"{prefix}error: {exc}", file=sys.stderr)  # e.g. a diverged training run
    return 1


class _CtrlCNote:
    """Notes a Ctrl-C (SIGINT) while a command runs, where Python's default handler is in place
    (the main thread). Native code can turn the KeyboardInterrupt into another error on its way
    back: safetensors reads a tensor through Python, and a Ctrl-C that lands there came back as
    "cannot load the model" of a sound checkpoint (status 2). A command that fails after a
    Ctrl-C was interrupted."""

    def __init__(self) -> None:
        self.seen = False
        self._installed = False

    def _on_sigint(self, signum: int, frame: Any) -> None:
        self.seen = True
        raise KeyboardInterrupt

    def __enter__(self) -> _CtrlCNote:
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            signal.signal(signal.SIGINT, self._on_sigint)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed and signal.getsignal(signal.SIGINT) == self._on_sigint:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (poll reports an error on the write
    end); True where that cannot be told, as before this check."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no stdout, no descriptor, no poll
        return True


def _drop_stdout() -> None:
    """Point stdout at the null device, so that what is still buffered is not written again
    (at exit) to the pipe that refused it."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # no stdout, or none with a descriptor
        pass


if __name__ == "__main__":
    sys.exit(main())
