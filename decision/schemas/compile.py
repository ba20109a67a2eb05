"""Compile answer schemas to token automata over a tokenizer's vocabulary, cached: the entry
points (``compile_answer``, ``compile_question``, ``compile_regex``) and the caches of automata
and refusals.

The parts live beside it: the tokenizer's byte view in ``context``, the automata and their
construction in ``automata``, outlines-core's (guarded) index of a regex in ``regex_index``. The
names code outside ``decision.schemas`` imports from here are re-exported below; the compile
limits (``regex_index.COMPILE_*``) are not, so that a setting meant for them lands there.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from decision.errors import CompileBusyError, SchemaError
from decision.schemas.automata import (
    TokenAutomaton,
    automaton_bytes,
    char_dfa_automaton,
    literal_automaton,
    shortest_answer,
    transitions_automaton,
)
from decision.schemas.context import TokenizerContext, tokenizer_context
from decision.schemas.json_subset import json_regex
from decision.schemas.models import (
    MAX_SLOT_TOKENS,
    JsonAnswer,
    PatternAnswer,
    Question,
    _Answer,
)
from decision.schemas.regex_guard import check_regex
from decision.schemas.regex_index import EMPTY_LANGUAGE, regex_transitions

__all__ = [
    "GUARD_CHOICES_OVER_CHARS",
    "TokenAutomaton",
    "TokenizerContext",
    "automaton_bytes",
    "char_dfa_automaton",
    "compile_answer",
    "compile_question",
    "compile_regex",
    "literal_automaton",
    "shortest_answer",
    "tokenizer_context",
]

# A choice's regex (its options' alternation) longer than this compiles under the guard too: it
# does not blow up, but grows linearly, and 256 options of 256 tokens (a 460 KB body) took ~12 s
# and ~640 MB in the service's own process before the state limit refused it. A short one stays
# in process (the guard's fork costs ~20 ms).
GUARD_CHOICES_OVER_CHARS = 4096
# The caches of automata and of refusals keep at most this many schemas each ...
_CACHE_SIZE = 512
# ... and at most this many bytes of automata: one at the edge limit holds ~48 MB of tensors, so
# 512 distinct large schemas would otherwise keep gigabytes.
_CACHE_BYTES = 256 << 20

_automata: OrderedDict[tuple[str, str], TokenAutomaton] = OrderedDict()
# Schemas refused: (message, field below the question's answer field). A regex that ran into the
# compile time limit is refused again at once instead of holding a validation thread 10 s more.
_refused: OrderedDict[tuple[str, str], tuple[str, str]] = OrderedDict()
_lock = threading.Lock()
_automata_bytes = 0  # the size of ``_automata``'s tensors (``automaton_bytes``)


def compile_regex(
    regex: str,
    ctx: TokenizerContext,
    budget: int,
    field_name: str = "answer",
    guarded: bool = True,
    cpu_limit: int | None = None,
) -> TokenAutomaton:
    """Token automaton of ``regex`` (``guarded``: in a child process with a CPU-time limit,
    default ``regex_index.COMPILE_CPU_LIMIT_S``)."""
    initial, transitions, finals = regex_transitions(regex, ctx, field_name, guarded, cpu_limit)
    if not finals:
        raise SchemaError("the answer language is empty over this vocabulary", field_name)
    return transitions_automaton(initial, transitions, finals, ctx.special.eos, budget, field_name)


def compile_answer(
    answer: _Answer, ctx: TokenizerContext, field_name: str = "answer"
) -> TokenAutomaton:
    """The cached token automaton of an answer schema over ``ctx``'s vocabulary; a schema
    refused once is refused again from the cache (the error's field under ``field_name``),
    except a compile the busy machine starved (``CompileBusyError``), which is tried again."""
    key = (ctx.fingerprint, Question.model_construct(answer=answer).schema_key())
    with _lock:
        hit = _automata.get(key)
        if hit is not None:
            _automata.move_to_end(key)
            return hit
        refused = _refused.get(key)
        if refused is not None:
            _refused.move_to_end(key)
            raise SchemaError(refused[0], field_name + refused[1])
    try:
        automaton = _compile_answer(answer, ctx, field_name)
    except SchemaError as exc:
        field = exc.field or ""
        remembered = not isinstance(exc, CompileBusyError)
        if remembered and (field == field_name or field.startswith(field_name + ".")):
            _remember(_refused, key, (exc.message, field[len(field_name):]))
        raise
    _remember_automaton(key, automaton)
    return automaton


def _remember_automaton(key: tuple[str, str], automaton: TokenAutomaton) -> None:
    """Keep ``automaton`` in the LRU cache, dropping the oldest past ``_CACHE_SIZE`` entries or
    ``_CACHE_BYTES`` (the newest is kept whatever its size: its request is using it)."""
    global _automata_bytes
    with _lock:
        old = _automata.pop(key, None)
        if old is not None:
            _automata_bytes -= automaton_bytes(old)
        _automata[key] = automaton
        _automata_bytes += automaton_bytes(automaton)
        while len(_automata) > 1 and (len(_automata) > _CACHE_SIZE
                                      or _automata_bytes > _CACHE_BYTES):
            _, dropped = _automata.popitem(last=False)
            _automata_bytes -= automaton_bytes(dropped)


def _remember(cache: OrderedDict[tuple[str, str], Any], key: tuple[str, str], value: Any) -> None:
    """Put ``value`` in the LRU ``cache``, dropping the oldest entries past ``_CACHE_SIZE``."""
    with _lock:
        cache[key] = value
        while len(cache) > _CACHE_SIZE:
            cache.popitem(last=False)


def _compile_answer(answer: _Answer, ctx: TokenizerContext, field_name: str) -> TokenAutomaton:
    if isinstance(answer, JsonAnswer):  # its schema errors name the question's field
        regex = json_regex(answer.json_schema, f"{field_name}.schema")
    else:
        regex = answer.regex()
    user_regex = isinstance(answer, PatternAnswer)
    if user_regex:
        check_regex(regex, f"{field_name}.regex")
    budget = answer.budget(ctx.count_tokens)
    if budget > MAX_SLOT_TOKENS:
        raise SchemaError(
            f"the answer needs a slot of {budget} tokens; at most {MAX_SLOT_TOKENS} are allowed",
            field_name,
        )
    char_dfa = answer.char_dfa()
    if char_dfa is not None:
        automaton = char_dfa_automaton(*char_dfa, ctx, budget)
    else:
        # user-written regexes can blow up during determinisation: compile those under a guard
        try:
            guarded = (user_regex or answer.type == "json"
                       or len(regex) > GUARD_CHOICES_OVER_CHARS)
            automaton = compile_regex(regex, ctx, budget, field_name, guarded=guarded)
        except SchemaError as exc:
            if user_regex and exc.field == field_name:  # the client's regex is at fault
                raise type(exc)(exc.message, f"{field_name}.regex") from None
            raise
    shortest = shortest_answer(automaton)
    if shortest >= 1 << 30:  # no accepting state reachable
        raise SchemaError(EMPTY_LANGUAGE, f"{field_name}.regex" if user_regex else field_name)
    if shortest > budget:
        raise SchemaError(
            f"the shortest valid answer needs {shortest} tokens but the slot has {budget}; "
            "raise max_tokens",
            f"{field_name}.max_tokens",
        )
    return automaton


def compile_question(question: Question, ctx: TokenizerContext, field_name: str) -> TokenAutomaton:
    """Compile ``question``'s answer schema; errors name ``field_name.answer``."""
    return compile_answer(question.answer, ctx, f"{field_name}.answer")
