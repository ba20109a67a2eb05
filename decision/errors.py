"""Errors the library raises on purpose, so callers (CLI, HTTP service) can report them cleanly."""

from __future__ import annotations


class DecisionError(Exception):
    """Base class of every error this library raises on purpose."""


class DecisionInputError(DecisionError, ValueError):
    """Bad input from a caller: the message says what is wrong and ``field`` names where.

    ``field`` is a dotted path into the request (``"questions.3.answer.options"``) or ``None``
    when the error concerns the request as a whole. The service answers these with HTTP 422.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class SchemaError(DecisionInputError):
    """An answer schema that is invalid, unsupported, or compiles to too large an automaton."""


class CompileBusyError(SchemaError):
    """A schema whose automaton did not finish compiling because the machine was too busy (the
    wall-time safety net, not the CPU limit, stopped it): not remembered, a retry may succeed.
    The service answers it 503 with ``Retry-After``."""


class DecodeAbandonedError(DecisionError):
    """``decide_many`` stopped early: its ``abandoned`` callback said that every request of the
    batch was given up (the service's callers timed out), so nobody waits for the answers."""


class CheckpointError(DecisionError):
    """A checkpoint that cannot be loaded; the message names the file and tensor at fault."""


class TrainingError(DecisionError):
    """A training run that cannot go on (a non-finite loss); the message says at which step."""
