"""Answer schemas: pydantic models and their compilation to token automata.

The compilation's names load on first use: it imports torch (seconds), and the schema models
alone (read by batch scoring's gold checks, the contracts app) need none of it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from decision.schemas.models import (
    AnswerSchema,
    BooleanAnswer,
    ChoiceAnswer,
    IntegerAnswer,
    JsonAnswer,
    NumberAnswer,
    PatternAnswer,
    Question,
)

__all__ = [
    "AnswerSchema",
    "BooleanAnswer",
    "ChoiceAnswer",
    "IntegerAnswer",
    "JsonAnswer",
    "NumberAnswer",
    "PatternAnswer",
    "Question",
    "TokenAutomaton",
    "TokenizerContext",
    "compile_answer",
    "compile_question",
    "literal_automaton",
    "tokenizer_context",
]

_COMPILE_NAMES = {"TokenAutomaton", "TokenizerContext", "compile_answer", "compile_question",
                  "literal_automaton", "tokenizer_context"}

if TYPE_CHECKING:
    from decision.schemas.compile import (
        TokenAutomaton,
        TokenizerContext,
        compile_answer,
        compile_question,
        literal_automaton,
        tokenizer_context,
    )


def __getattr__(name: str) -> Any:
    if name in _COMPILE_NAMES:
        return getattr(importlib.import_module("decision.schemas.compile"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
