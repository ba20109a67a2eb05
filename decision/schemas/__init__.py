"""Answer schemas: pydantic models and their compilation to token automata.

The compilation's names load on first use: it imports torch (seconds), and the schema models
alone (read by batch scoring's gold checks, the contracts app) need none of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from decision.lazy import lazy_attributes
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

_COMPILE_NAMES = ("TokenAutomaton", "TokenizerContext", "compile_answer", "compile_question",
                  "literal_automaton", "tokenizer_context")
__getattr__ = lazy_attributes(__name__, dict.fromkeys(_COMPILE_NAMES, "decision.schemas.compile"))

if TYPE_CHECKING:
    from decision.schemas.compile import (
        TokenAutomaton,
        TokenizerContext,
        compile_answer,
        compile_question,
        literal_automaton,
        tokenizer_context,
    )

