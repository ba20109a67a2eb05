"""Question and answer-schema models: a discriminated union on ``type``.

Every answer kind knows three things: the regular language of its answer text (``regex``), the
token budget of its slot (``budget``) and how to turn the decoded text into a typed value
(``parse``). Compilation to a token automaton lives in ``decision.schemas.compile``.
"""

from __future__ import annotations

import json
import re
from abc import abstractmethod
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, field_validator, model_validator

from decision.schemas.ranges import integer_range_dfa, integer_range_regex
from decision.schemas.regex_guard import VERBOSE_FLAGS

MAX_OPTIONS = 256
MAX_SLOT_TOKENS = 256
DEFAULT_INTEGER_BOUND = 10**9 - 1
_RUST_META = set("\\.+*?()|[]{}^$#&-~")


def escape_literal(text: str) -> str:
    """Escape ``text`` for the regex syntax outlines-core uses (Rust ``regex``)."""
    return "".join("\\" + ch if ch in _RUST_META else ch for ch in text)


class _Answer(BaseModel):
    """Base of the answer schemas (pydantic's metaclass is an ABCMeta: abstract methods hold)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @abstractmethod
    def regex(self) -> str:
        """The regular language of the answer text."""

    @abstractmethod
    def budget(self, count_tokens: Any) -> int:
        """Slot length in tokens; ``count_tokens(text)`` gives a text's token count."""

    @abstractmethod
    def parse(self, text: str) -> Any:
        """The typed value of an answer text (which matches ``regex``)."""

    def options(self) -> list[str] | None:
        """Answer texts of a closed set (choice/boolean), else ``None``."""
        return None

    def char_dfa(self) -> tuple[list[dict[str, int]], list[bool]] | None:
        """A character DFA of the answer language built without outlines-core, if there is one."""
        return None


def is_unicode_text(text: str) -> bool:
    """Whether ``text`` has a UTF-8 encoding, i.e. no lone surrogate (JSON's ``"\\ud800"``
    decodes to one), which the tokenizer cannot read."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def is_json_data(value: Any) -> bool:
    """Whether ``value`` is data as ``json.loads`` gives it: the compile cache keys a schema by
    its JSON text, where a tuple reads as a list, so ``{"enum": (1, 2)}``, refused, was
    remembered as the refusal of ``{"enum": [1, 2]}``. Iterative (no depth limit to hit); a
    container inside itself (a cycle) is not JSON, one shared by two places is."""
    todo: list[tuple[Any, bool]] = [(value, False)]
    path: set[int] = set()  # the containers being walked, from the root to the current one
    while todo:
        item, leaving = todo.pop()
        if leaving:
            path.discard(id(item))
        elif isinstance(item, (dict, list)):
            if id(item) in path:
                return False
            if isinstance(item, dict) and not all(isinstance(key, str) for key in item):
                return False
            path.add(id(item))
            todo.append((item, True))
            todo.extend((child, False) for child in (
                item.values() if isinstance(item, dict) else item))
        elif item is not None and not isinstance(item, (str, int, float)):  # bool is an int
            return False
    return True


class ChoiceAnswer(_Answer):
    """One of 1..256 distinct, non-empty option strings."""

    type: Literal["choice"] = "choice"
    options_: list[StrictStr] = Field(alias="options", min_length=1, max_length=MAX_OPTIONS)

    @field_validator("options_")
    @classmethod
    def _distinct(cls, options: list[str]) -> list[str]:
        if any(not option for option in options):
            raise ValueError("options must be non-empty strings")
        if not all(is_unicode_text(option) for option in options):
            raise ValueError("options must be Unicode text (one holds a lone surrogate)")
        if len(set(options)) != len(options):
            raise ValueError("options must be distinct")
        return options

    def regex(self) -> str:
        return "(" + "|".join(escape_literal(o) for o in self.options_) + ")"

    def budget(self, count_tokens: Any) -> int:
        return max(count_tokens(o) for o in self.options_)

    def parse(self, text: str) -> str:
        return text

    def options(self) -> list[str]:
        return list(self.options_)


class BooleanAnswer(_Answer):
    """``yes`` or ``no``, returned as ``True``/``False``."""

    type: Literal["boolean"] = "boolean"

    def regex(self) -> str:
        return "(yes|no)"

    def budget(self, count_tokens: Any) -> int:
        return max(count_tokens("yes"), count_tokens("no"))

    def parse(self, text: str) -> bool:
        return text == "yes"

    def options(self) -> list[str]:
        return ["yes", "no"]


class IntegerAnswer(_Answer):
    """A decimal integer in ``[minimum, maximum]`` (inclusive; enforced exactly)."""

    type: Literal["integer"] = "integer"
    minimum: int = Field(default=-DEFAULT_INTEGER_BOUND, ge=-(10**18), le=10**18, strict=True)
    maximum: int = Field(default=DEFAULT_INTEGER_BOUND, ge=-(10**18), le=10**18, strict=True)

    @model_validator(mode="after")
    def _ordered(self) -> IntegerAnswer:
        if self.minimum > self.maximum:
            raise ValueError(f"minimum {self.minimum} is above maximum {self.maximum}")
        return self

    def regex(self) -> str:
        return integer_range_regex(self.minimum, self.maximum)

    def char_dfa(self) -> tuple[list[dict[str, int]], list[bool]]:
        # exact and instant for any bounds; the regex route takes minutes on 18-digit bounds
        return integer_range_dfa(self.minimum, self.maximum)

    def budget(self, count_tokens: Any) -> int:
        # digits are one token each and every byte is a token: characters bound the tokens
        return max(len(str(self.minimum)), len(str(self.maximum)))

    def parse(self, text: str) -> int:
        return int(text)


class NumberAnswer(_Answer):
    """A decimal number (optional sign and fraction) of at most ``max_tokens`` tokens."""

    type: Literal["number"] = "number"
    max_tokens: int = Field(default=12, ge=1, le=64, strict=True)

    def regex(self) -> str:
        return r"-?(0|[1-9][0-9]*)(\.[0-9]+)?"

    def budget(self, count_tokens: Any) -> int:
        return self.max_tokens

    def parse(self, text: str) -> float:
        return float(text)


class PatternAnswer(_Answer):
    """Text matching ``regex`` in full, in at most ``max_tokens`` tokens."""

    type: Literal["pattern"] = "pattern"
    pattern: str = Field(alias="regex", min_length=1, max_length=1000, strict=True)
    max_tokens: int = Field(default=16, ge=1, le=MAX_SLOT_TOKENS, strict=True)

    def regex(self) -> str:
        # outlines-core cannot build a verbose-mode regex that ends inside a ``#`` comment
        # ("(?x)[a-z]+ # letters"); a newline ends the comment, and verbose mode ignores it
        if _GLOBAL_VERBOSE.match(self.pattern) and not self.pattern.endswith("\\"):
            return self.pattern + "\n"
        return self.pattern

    def budget(self, count_tokens: Any) -> int:
        return self.max_tokens

    def parse(self, text: str) -> str:
        return text


# inline flags at the start that turn verbose mode on for the whole regex
_GLOBAL_VERBOSE = re.compile(VERBOSE_FLAGS + r"\)")


class JsonAnswer(_Answer):
    """A JSON value following ``json_schema`` (the subset outlines-core turns into a regex)."""

    type: Literal["json"] = "json"
    json_schema: dict[str, Any] = Field(alias="schema")
    max_tokens: int = Field(default=48, ge=1, le=MAX_SLOT_TOKENS, strict=True)

    @field_validator("json_schema")
    @classmethod
    def _json_data(cls, schema: dict[str, Any]) -> dict[str, Any]:
        if not is_json_data(schema):
            raise ValueError("the schema must be JSON data: objects with string keys, lists, "
                             "strings, numbers, booleans and null (no tuples, sets or bytes)")
        return schema

    def regex(self) -> str:
        from decision.schemas.json_subset import json_regex

        return json_regex(self.json_schema)

    def budget(self, count_tokens: Any) -> int:
        return self.max_tokens

    def parse(self, text: str) -> Any:
        return json.loads(text)


AnswerSchema = Annotated[
    ChoiceAnswer | BooleanAnswer | IntegerAnswer | NumberAnswer | PatternAnswer | JsonAnswer,
    Field(discriminator="type"),
]


class Question(BaseModel):
    """A question about the document and the schema of its answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=200)
    text: str = Field(min_length=1, max_length=20_000)
    answer: AnswerSchema

    def schema_key(self) -> str:
        """Canonical JSON of the answer schema (the compile cache key)."""
        return json.dumps(self.answer.model_dump(by_alias=True), sort_keys=True)


def matches(answer: _Answer, text: str) -> bool:
    """Whether ``text`` is in the answer's language (Python ``re``; used by tests and checks)."""
    return re.fullmatch(answer.regex(), text) is not None
