"""Answer schemas: pydantic models and their compilation to token automata."""

from decision.schemas.compile import (
    TokenAutomaton,
    TokenizerContext,
    compile_answer,
    compile_question,
    literal_automaton,
    tokenizer_context,
)
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
