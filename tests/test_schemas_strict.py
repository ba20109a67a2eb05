"""Answer-schema fields are strictly typed, as the request options are: a bound of ``true``,
``"10"`` or ``10.0`` and a ``max_tokens`` of ``"5"`` are refused naming the field, not read as
1, 10 and 5; choice options and a regex must be strings."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from decision.schemas import AnswerSchema, Question

ADAPTER = TypeAdapter(AnswerSchema)

# (answer type, integer field, a value in range, the other fields the schema needs)
INTEGER_FIELDS: list[tuple[str, str, int, dict[str, Any]]] = [
    ("integer", "minimum", 0, {}),
    ("integer", "maximum", 10, {}),
    ("number", "max_tokens", 5, {}),
    ("pattern", "max_tokens", 5, {"regex": "[a-c]+"}),
    ("json", "max_tokens", 5, {"schema": {"type": "boolean"}}),
]


def _loose(value: int) -> st.SearchStrategy[Any]:
    """Values lax pydantic read as ``value`` (or as some integer) that a client did not mean."""
    return st.sampled_from([str(value), float(value), f" {value} ", f"{value}.0", True, False])


@settings(max_examples=60, deadline=None)
@given(case=st.sampled_from(INTEGER_FIELDS), data=st.data())
def test_integer_fields_refuse_bools_strings_and_floats(case, data) -> None:
    kind, name, good, rest = case
    loose = data.draw(_loose(good))
    with pytest.raises(ValidationError) as info:
        ADAPTER.validate_python({"type": kind, **rest, name: loose})
    error = info.value.errors()[0]
    assert error["loc"] == (kind, name), error
    assert "integer" in error["msg"]
    # the integer itself is fine
    assert getattr(ADAPTER.validate_python({"type": kind, **rest, name: good}), name) == good


@pytest.mark.parametrize("options", [[1, 2], ["a", 2], ["a", True], ["a", None], ["a", 1.5]])
def test_choice_options_must_be_strings(options: list[Any]) -> None:
    with pytest.raises(ValidationError) as info:
        ADAPTER.validate_python({"type": "choice", "options": options})
    error = info.value.errors()[0]
    bad = next(i for i, option in enumerate(options) if not isinstance(option, str))
    assert error["loc"] == ("choice", "options", bad)
    assert "string" in error["msg"]


@pytest.mark.parametrize("regex", [5, True, b"[a-c]"])
def test_a_regex_must_be_a_string(regex: Any) -> None:
    with pytest.raises(ValidationError) as info:
        ADAPTER.validate_python({"type": "pattern", "regex": regex})
    assert info.value.errors()[0]["loc"] == ("pattern", "regex")


def test_question_error_names_the_answer_field() -> None:
    with pytest.raises(ValidationError) as info:
        Question.model_validate({"id": "q", "text": "How many?",
                                 "answer": {"type": "integer", "minimum": 0, "maximum": "10"}})
    assert info.value.errors()[0]["loc"] == ("answer", "integer", "maximum")


def test_json_text_is_strict_too() -> None:
    # the service and the CLIs read JSON text; 10.0 in JSON is a float there as well
    with pytest.raises(ValidationError):
        ADAPTER.validate_json('{"type": "integer", "maximum": 10.0}')
    assert ADAPTER.validate_json('{"type": "integer", "maximum": 10}').maximum == 10


@pytest.mark.parametrize(
    "schema", [{"enum": (1, 2)}, {"enum": [{1: 2}]}, {"enum": [{1, 2}]}, {"const": b"x"}]
)
def test_a_json_schema_must_be_json_data(ctx, schema: dict[str, Any]) -> None:
    """The compile cache keys a schema by its JSON text, where a tuple reads as a list: the
    schema {"enum": (1, 2)}, refused ("enum must be a non-empty list"), was remembered under the
    key of {"enum": [1, 2]}, which was then refused too. A non-string key was a TypeError."""
    from decision.schemas import JsonAnswer, compile_answer

    with pytest.raises(ValidationError) as info:
        JsonAnswer(schema=schema)
    assert info.value.errors()[0]["loc"] == ("schema",)
    assert compile_answer(JsonAnswer(schema={"enum": [1, 2]}), ctx, "q").num_states > 1
    shared = {"type": "boolean"}  # one sub-schema in two places is JSON data; a cycle is not
    JsonAnswer(schema={"type": "object", "properties": {"a": shared, "b": shared}})
    cycle: dict[str, Any] = {"type": "array"}
    cycle["items"] = cycle
    with pytest.raises(ValidationError):
        JsonAnswer(schema=cycle)


# -- compile time of regexes (in this file for its small tokenizer fixture) ---------------------


@pytest.fixture(scope="module")
def ctx():
    from decision.joint.toy import lease_sentences
    from decision.schemas import tokenizer_context
    from decision.tokenizer import train_tokenizer

    return tokenizer_context(train_tokenizer(lease_sentences(300), vocab_size=600))


@pytest.mark.parametrize("regex", ["a[a-z]{22}", "[a-z]{2}x[a-z]{20}", "a.{14}"])
def test_counted_repeats_compile_at_once(ctx, regex: str, monkeypatch) -> None:
    # outlines-core also builds the DFA's unanchored search states, where a match may begin at
    # any "a": 2^22 of them for a[a-z]{22}, which ran into the 10 s limit and was refused
    import re
    from collections import OrderedDict

    from decision.schemas import PatternAnswer, compile_answer, regex_index
    from decision.schemas import compile as compile_module

    # "at once": within 1 s of the compiling child's CPU time (these take ~0.01-0.03 s; the
    # unanchored states took past 10 s), else it is refused. CPU time, unlike wall time, does
    # not grow with the machine's load. Caches of this test's own: compiled here, not found
    # compiled by an earlier test, and a refusal at 1 s is not remembered for later ones.
    monkeypatch.setattr(regex_index, "COMPILE_CPU_LIMIT_S", 1)
    monkeypatch.setattr(compile_module, "_automata", OrderedDict())
    monkeypatch.setattr(compile_module, "_automata_bytes", 0)
    monkeypatch.setattr(compile_module, "_refused", OrderedDict())
    automaton = compile_answer(PatternAnswer(regex=regex, max_tokens=24), ctx, "q.answer")
    assert automaton.num_states < 200
    eos = ctx.special.eos
    for text in ("a" * 23, "ab" + "c" * 21, "a" * 22, "b" * 23, "a" + "é" * 14, "a" * 15):
        ids = [ctx.by_bytes[bytes([b])][0] for b in text.encode()]
        walk = _accepts(automaton, ids + [eos])
        assert walk == (re.fullmatch(regex, text) is not None), text


def _accepts(automaton, ids: list[int]) -> bool:
    edges = {(s, t): d for s, t, d in zip(automaton.src.tolist(), automaton.tok.tolist(),
                                          automaton.dst.tolist(), strict=True)}
    state = 0
    for token in ids:
        if (state, token) not in edges:
            return False
        state = edges[state, token]
    return bool(automaton.accept[state])


def test_a_refused_regex_is_refused_again_at_once(ctx, monkeypatch) -> None:
    from decision.errors import SchemaError
    from decision.schemas import PatternAnswer, compile_answer, regex_index
    from decision.schemas import compile as compile_module

    monkeypatch.setattr(regex_index, "COMPILE_CPU_LIMIT_S", 1)
    calls = []
    real = compile_module.compile_regex

    def counted(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(compile_module, "compile_regex", counted)
    answer = PatternAnswer(regex="[a-z]*a[a-z]{21}", max_tokens=24)  # 2^21 anchored states
    with pytest.raises(SchemaError) as first:
        compile_answer(answer, ctx, "questions.0.answer")
    assert first.value.field == "questions.0.answer.regex"
    assert "within 1 s of CPU time" in first.value.message
    with pytest.raises(SchemaError) as again:  # the same schema as another question's
        compile_answer(PatternAnswer(regex="[a-z]*a[a-z]{21}", max_tokens=24), ctx,
                       "questions.3.answer")
    assert len(calls) == 1  # from the refusals remembered: not compiled (1 s of CPU) again
    assert again.value.message == first.value.message
    assert again.value.field == "questions.3.answer.regex"


def test_a_compile_starved_of_wall_time_is_not_remembered(ctx, monkeypatch) -> None:
    """The wall-time safety net says the machine was busy, not that the regex is too large: the
    same schema compiles when sent again."""
    from decision.errors import SchemaError
    from decision.schemas import PatternAnswer, compile_answer, regex_index
    from decision.schemas import compile as compile_module

    answer = PatternAnswer(regex="[0-9]{3}-x[a-c]{2}", max_tokens=12)  # never sent elsewhere
    monkeypatch.setattr(regex_index, "COMPILE_WALL_LIMIT_S", 0.0)
    with pytest.raises(compile_module.CompileBusyError) as busy:
        compile_answer(answer, ctx, "questions.1.answer")
    assert isinstance(busy.value, SchemaError)
    assert busy.value.field == "questions.1.answer.regex" and "wall time" in busy.value.message
    monkeypatch.setattr(regex_index, "COMPILE_WALL_LIMIT_S", 60.0)
    automaton = compile_answer(answer, ctx, "questions.1.answer")
    assert automaton.num_states > 1


def test_the_cpu_limit_stops_the_child_not_the_caller(ctx) -> None:
    """The kernel's RLIMIT_CPU stops the compiling child: SIGXCPU is reported as the CPU limit."""
    from decision.errors import SchemaError
    from decision.schemas.compile import compile_regex

    with pytest.raises(SchemaError, match="within 1 s of CPU time"):
        compile_regex("[a-z]*a[a-z]{22}", ctx, budget=8, cpu_limit=1)


def test_a_child_stopped_while_sending_is_a_schema_error(ctx, monkeypatch) -> None:
    """The CPU limit can fall while the child writes a large automaton into the pipe: the
    parent then read a message cut short, and multiprocessing's OSError ("got end of file
    during message") escaped instead of the CPU-limit refusal."""
    import os
    import signal
    import struct

    from decision.errors import SchemaError
    from decision.schemas import compile as compile_module
    from decision.schemas import regex_index

    def cut_short(conn, *args) -> None:  # pragma: no cover - subprocess
        conn._send(struct.pack("!i", 1 << 20) + b"x" * 100)  # a 1 MiB message's first bytes
        os.kill(os.getpid(), signal.SIGXCPU)

    monkeypatch.setattr(regex_index, "_child", cut_short)
    with pytest.raises(SchemaError, match="within 1 s of CPU time"):
        compile_module.compile_regex("[a-c]{2}", ctx, budget=4, cpu_limit=1)


def test_a_long_choice_compiles_under_the_guard(ctx, monkeypatch) -> None:
    """Options are literals (no blow-up), so choices compiled in the service's own process; 256
    options of 256 tokens took ~12 s and ~640 MB there before the state limit refused them. A
    choice whose regex is longer than GUARD_CHOICES_OVER_CHARS compiles in the limited child,
    to the same automaton; a short one stays in process."""
    from decision.schemas import ChoiceAnswer, compile_answer, regex_index
    from decision.schemas import compile as compile_module

    calls: list[str] = []
    guarded = regex_index._guarded_transitions

    def spy(regex: str, *args: Any) -> Any:
        calls.append(regex)
        return guarded(regex, *args)

    monkeypatch.setattr(regex_index, "_guarded_transitions", spy)
    short = ChoiceAnswer(options=["yes", "no", "not stated"])
    compile_answer(short, ctx, "q")
    assert calls == []
    words = compile_module.GUARD_CHOICES_OVER_CHARS // 32 // 3 + 2  # of 3 characters each
    long = ChoiceAnswer(options=[" ".join(["ab"] * words) + f" {i}" for i in range(32)])
    assert len(long.regex()) > compile_module.GUARD_CHOICES_OVER_CHARS
    automaton = compile_answer(long, ctx, "q")
    assert calls == [long.regex()]
    direct = compile_module.compile_regex(long.regex(), ctx, automaton.budget, guarded=False)
    assert automaton.num_states == direct.num_states
    assert torch.equal(automaton.tok, direct.tok) and torch.equal(automaton.dst, direct.dst)


def test_the_memory_limit_stops_the_child(ctx, monkeypatch) -> None:
    """A JSON string of up to 10^9 characters grew the compiling child to ~2-3 GB within its
    10 s of CPU time, four such compiles at a time in the service; the child's data is now
    limited (RLIMIT_DATA) and the refusal says so. A small schema compiles under the limit."""
    from collections import OrderedDict

    from decision.errors import SchemaError
    from decision.schemas import JsonAnswer, compile_answer, regex_index
    from decision.schemas import compile as compile_module

    monkeypatch.setattr(regex_index, "COMPILE_MEMORY_LIMIT_BYTES", 96 << 20)
    # its own refusal cache: a refusal of this schema remembered earlier in the session (at the
    # real limit) would answer for it, and its 96 MiB one must not answer for later tests
    monkeypatch.setattr(compile_module, "_refused", OrderedDict())
    with pytest.raises(SchemaError) as refused:
        compile_answer(JsonAnswer(schema={"type": "string", "maxLength": 10**9}), ctx,
                       "questions.0.answer")
    # stopped by the memory limit, not by the 10 s of CPU time ("within 10 s of CPU time")
    assert refused.value.message == ("regex automaton did not compile within 96 MiB of memory "
                                     "(too large)")
    small = JsonAnswer(schema={"type": "string", "maxLength": 7})
    assert compile_answer(small, ctx, "questions.1.answer").num_states > 1


def test_the_automaton_cache_is_bounded_in_bytes(ctx, monkeypatch) -> None:
    """The cache held 512 automata whatever their size (one at the edge limit is ~48 MB): the
    oldest now go once the kept tensors pass ``_CACHE_BYTES``."""
    from collections import OrderedDict

    from decision.schemas import ChoiceAnswer, compile_answer
    from decision.schemas import compile as compile_module

    monkeypatch.setattr(compile_module, "_automata", OrderedDict())  # this test's entries only
    monkeypatch.setattr(compile_module, "_automata_bytes", 0)
    answers = [ChoiceAnswer(options=[f"cache-bytes-{i}-{j}" for j in range(40)])
               for i in range(3)]
    first = compile_answer(answers[0], ctx)
    size = compile_module.automaton_bytes(first)
    monkeypatch.setattr(compile_module, "_CACHE_BYTES", 2 * size + size // 2)
    second = compile_answer(answers[1], ctx)
    assert compile_answer(answers[0], ctx) is first  # two fit: still cached
    compile_answer(answers[2], ctx)  # the third passes the budget: the oldest (second) goes
    assert compile_answer(answers[0], ctx) is first
    assert compile_answer(answers[1], ctx) is not second
    assert compile_module._automata_bytes <= compile_module._CACHE_BYTES
    assert compile_module._automata_bytes == sum(
        map(compile_module.automaton_bytes, compile_module._automata.values()))


_ORPHAN_SCRIPT = """
import multiprocessing, os, sys, threading, time
from decision.model import load_model
from decision.schemas import compile as compile_module, regex_index
ctx = compile_module.tokenizer_context(load_model(sys.argv[1]).tokenizer)
# a compile that never ends and takes no CPU or memory (no limit of the child's would end it):
# a read from a pipe whose write end the child holds too
never, keep = os.pipe()
regex_index._index_transitions = lambda *args: os.read(never, 1)
threading.Thread(target=compile_module.compile_regex, args=("ab", ctx, 8),
                 daemon=True).start()
while not multiprocessing.active_children():
    time.sleep(0.01)
time.sleep(0.5)  # the child is past its start-up
with open(sys.argv[2], "w") as out:
    out.write(str(multiprocessing.active_children()[0].pid))
os._exit(0)  # killed: no exit handler runs
"""


def test_a_compile_child_dies_with_its_server(tmp_path) -> None:
    """A server killed mid-compile (a SIGTERM'd uvicorn re-raises the signal and skips exit
    handlers) left its compile children computing for nobody until their CPU limit."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    pid_file, log = tmp_path / "child.pid", tmp_path / "script.log"
    with log.open("w") as log_handle:  # not a pipe: the orphan would hold it open
        subprocess.run([sys.executable, "-c", _ORPHAN_SCRIPT, str(root / "models/default"),
                        str(pid_file)], stdout=log_handle, stderr=log_handle, timeout=120,
                       cwd=root, check=True)
    child = int(pid_file.read_text())
    status = Path(f"/proc/{child}/status")

    def alive() -> bool:
        try:
            state = next(li for li in status.read_text().splitlines() if li.startswith("State:"))
        except FileNotFoundError:
            return False
        return "zombie" not in state

    # the kernel kills it with its server (gone within the first 0.05 s poll here, loaded);
    # unkilled it would wait for ever: its compile takes no CPU, so no limit of its ends it
    deadline = time.monotonic() + 5
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not alive()
    finally:
        if alive():
            import os
            import signal

            os.kill(child, signal.SIGKILL)
