"""Compile answer schemas to token automata over a tokenizer's vocabulary (cached).

A ``TokenAutomaton`` is the edge list of a DFA over token ids, ready for the vectorised dynamic
programme of ``decision.joint.dp``: state 0 is initial; from every accepting state of the answer
language, ``[EOS]`` leads to an extra absorbing state DONE which only loops on ``[EOS]``, so a slot
is the answer followed by ``[EOS]`` padding and nothing may follow the padding.
"""

from __future__ import annotations

import ctypes
import faulthandler
import hashlib
import math
import multiprocessing
import os
import signal
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

try:
    import resource
except ImportError:  # Windows: no rlimits (nor fork)
    raise ImportError(
        "decision runs on Linux or macOS: answer schemas are compiled in a forked child under CPU "
        "and memory limits (the resource module), which this system has not; on Windows use WSL"
    ) from None

import torch
from outlines_core import Index, Vocabulary
from tokenizers import Tokenizer

from decision.errors import CompileBusyError, DecisionInputError, SchemaError
from decision.schemas.json_subset import json_regex
from decision.schemas.models import (
    MAX_SLOT_TOKENS,
    JsonAnswer,
    PatternAnswer,
    Question,
    _Answer,
)
from decision.schemas.regex_guard import check_regex
from decision.tokenizer import SpecialIds, build_vocabulary, special_ids, token_bytes

MAX_STATES = 50_000
MAX_EDGES = 2_000_000
# A guarded compile is refused once its child has used this much CPU time (RLIMIT_CPU, whole
# seconds): CPU time, unlike wall time, does not grow with the machine's load, so the refusal is a
# property of the regex and is remembered (compile_answer).
COMPILE_CPU_LIMIT_S = 10
# ... and once it has grown its data by this much past the parent's (RLIMIT_DATA): within the CPU
# limit a determinisation can reach ~3 GB, and the service runs four compiles at a time. The
# largest automata the limits below let through take ~0.3 GB.
COMPILE_MEMORY_LIMIT_BYTES = 1 << 30
# Wall-time safety net for a child starved of CPU on a busy machine: a refusal at this limit says
# nothing about the regex, so it is not remembered and a retry compiles again.
COMPILE_WALL_LIMIT_S = 60.0
# A choice's regex (its options' alternation) longer than this compiles under the guard too: it
# does not blow up, but grows linearly, and 256 options of 256 tokens (a 460 KB body) took ~12 s
# and ~640 MB in the service's own process before the state limit refused it. A short one stays
# in process (the guard's fork costs ~20 ms).
GUARD_CHOICES_OVER_CHARS = 4096
_PR_SET_PDEATHSIG = 1  # prctl(2)


def _find_prctl() -> Any:
    """libc's prctl, looked up here in the parent: a forked child of a threaded process should
    not dlopen (another thread may have held the loader's lock at the fork). None off Linux."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _find_prctl()
SENTINEL = b"\x01"  # read before every regex, when the vocabulary has it (_index_transitions)
_CACHE_SIZE = 512
# ... and at most this many bytes of automata: one at the edge limit holds ~48 MB of tensors, so
# 512 distinct large schemas would otherwise keep gigabytes.
_CACHE_BYTES = 256 << 20


@dataclass(frozen=True)
class TokenAutomaton:
    """A token DFA as tensors: edges ``src -tok-> dst``, accepting states, slot budget."""

    num_states: int
    src: torch.Tensor  # [E] int64
    tok: torch.Tensor  # [E] int64
    dst: torch.Tensor  # [E] int64
    accept: torch.Tensor  # [S] bool
    budget: int

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])


@dataclass
class TokenizerContext:
    """What compilation needs from one tokenizer, computed once."""

    tokenizer: Tokenizer
    special: SpecialIds
    vocabulary: Vocabulary
    pieces: list[bytes | None]
    by_bytes: dict[bytes, list[int]]
    fingerprint: str
    vocab_size: int
    max_piece: int = field(default=1)
    plain: Tokenizer | None = None  # a copy that reads special-token text as ordinary text

    def canonical_ids(self, text: str) -> list[int]:
        """``text`` in the tokenizer's own (canonical) encoding, as an answer: text such as
        ``[EOS]`` or ``<a1>`` is its bytes' tokens, never a special token (answers hold none)."""
        return (self.plain or self.tokenizer).encode(text, add_special_tokens=False).ids

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` in its canonical encoding (``canonical_ids``)."""
        return len(self.canonical_ids(text))

    def text(self, ids: list[int]) -> str:
        """The text of answer token ids (``[EOS]`` padding dropped)."""
        data = b"".join(self.pieces[i] or b"" for i in ids if i != self.special.eos)
        return data.decode("utf-8", errors="strict")


_contexts: dict[int, tuple[Tokenizer, TokenizerContext]] = {}
_automata: OrderedDict[tuple[str, str], TokenAutomaton] = OrderedDict()
# Schemas refused: (message, field below the question's answer field). A regex that ran into the
# compile time limit is refused again at once instead of holding a validation thread 10 s more.
_refused: OrderedDict[tuple[str, str], tuple[str, str]] = OrderedDict()
_lock = threading.Lock()
_automata_bytes = 0  # the size of ``_automata``'s tensors (``automaton_bytes``)


# Texts a tokenizer must encode back to exactly their bytes: the first starts with a letter (a
# pre-tokenizer that adds a prefix space adds it there), the second with and ends in spaces (a
# normaliser that strips them), both hold case, digits, composed and decomposed accents,
# compatibility characters NFKC folds, CJK, emoji, a character outside the BMP, NUL and CR/LF.
_EXACT_PROBES = (
    "Yes no 12 \u00e9 e\u0301 \u00df \ufb01 \u2460 \uff21 \u4e2d\u6587 \U0001f600 \U00010348"
    " [EOS] <a1> \x00\t\r\n",
    "  x \u0130  ",
)


def _check_exact(plain: Tokenizer, pieces: list[bytes | None]) -> None:
    """Refuse a tokenizer whose encoding does not spell a text's own bytes (a normaliser, NFKC
    or lowercasing, or a pre-tokenizer adding a prefix space): answers are spelled byte for byte
    by the automata, and budgets and scored options count the canonical encoding, so an option
    "\ufb01" counted as "fi" got a slot too short for its own bytes. Every byte must be a token
    (integer budgets count characters; a BPE lacking a byte drops it from the text)."""
    if plain.normalizer is not None:
        raise DecisionInputError(
            "tokenizer has a normalizer: answers are spelled byte for byte, and a normalised "
            "encoding spells another text", "tokenizer",
        )
    single = {p for p in pieces if p is not None and len(p) == 1}
    missing = [b for b in range(256) if bytes([b]) not in single]
    if missing:  # a BPE without the byte drops it from the text silently
        raise DecisionInputError(
            f"tokenizer has no token for {len(missing)} of the 256 bytes (first "
            f"0x{missing[0]:02x}): some texts cannot be spelled", "tokenizer",
        )
    # a non-special added token's text is matched before the byte-level model: one whose text
    # is also a byte's symbol ("\u00fc" is byte 0xFC's) read "\u00fc" as that lone byte
    added = tuple(t.content for t in plain.get_added_tokens_decoder().values() if not t.special)
    for text in (*_EXACT_PROBES, *added):
        ids = plain.encode(text, add_special_tokens=False).ids
        spelled = b"".join(pieces[i] or b"" for i in ids if i < len(pieces))
        if spelled != text.encode("utf-8"):
            raise DecisionInputError(
                f"tokenizer does not encode text as its own bytes ({text!r} comes back as "
                f"{spelled!r}): answers are spelled byte for byte", "tokenizer",
            )


def tokenizer_context(tokenizer: Tokenizer) -> TokenizerContext:
    """The (cached) compilation context of ``tokenizer``."""
    with _lock:
        hit = _contexts.get(id(tokenizer))
        if hit is not None and hit[0] is tokenizer:
            return hit[1]
    pieces = token_bytes(tokenizer)
    by_bytes: dict[bytes, list[int]] = {}
    for token_id, data in enumerate(pieces):
        if data:
            by_bytes.setdefault(data, []).append(token_id)
    serialized = tokenizer.to_str()
    plain = Tokenizer.from_str(serialized)
    plain.encode_special_tokens = True
    _check_exact(plain, pieces)
    ctx = TokenizerContext(
        tokenizer=tokenizer,
        special=special_ids(tokenizer),
        vocabulary=build_vocabulary(tokenizer),
        pieces=pieces,
        by_bytes=by_bytes,
        fingerprint=hashlib.sha1(serialized.encode()).hexdigest(),
        vocab_size=len(pieces),
        max_piece=max(len(p) for p in by_bytes),
        plain=plain,
    )
    with _lock:
        _contexts[id(tokenizer)] = (tokenizer, ctx)
    return ctx


def _index_transitions(
    regex: str, vocabulary: Vocabulary, sentinel: int | None = None
) -> tuple[int, dict, set[int]]:
    """outlines-core's initial state, transitions and final states of ``regex``, full-matched.

    ``sentinel``: the id of the one-byte token ``SENTINEL``, read before the regex (below).
    """
    # outlines-core determinises with leftmost-first semantics: in ``a|ab`` it stops after ``a``.
    # An end anchor makes the DFA keep every alternative alive, i.e. full-match semantics.
    if sentinel is None:
        index = Index(f"(?:{regex})$", vocabulary)
        return index.get_initial_state(), index.get_transitions(), set(index.get_final_states())
    # outlines-core builds regex-automata's whole DFA, the unanchored search states too, though
    # it walks only the anchored ones: ``a[a-z]{22}`` has 25 anchored states but 2^22 unanchored
    # ones (a match may start at any "a"), which took past the 10 s guard. A sentinel byte first
    # lets an unanchored match start only after a sentinel, which the answer's own characters
    # rarely include: that DFA stays as small as the anchored one. It also admits a regex that
    # matches the empty string, whose anchored start outlines-core refuses ("anchored universal
    # start state doesn't exist"). The walk starts after the sentinel.
    index = Index(f"\\x{SENTINEL[0]:02x}(?:{regex})$", vocabulary)
    transitions = index.get_transitions()
    start = transitions[index.get_initial_state()][sentinel]
    return start, transitions, set(index.get_final_states())


def _limit_cpu(seconds: int) -> None:
    """Make the kernel stop this process after ``seconds`` of CPU time (SIGXCPU, no core file)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:  # a hard limit can only be lowered
        seconds = min(seconds, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, hard))
    else:  # the hard limit one second on SIGKILLs a child that outlived SIGXCPU
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))


def _limit_data(extra_bytes: int) -> None:
    """Let this process's data (heap and private anonymous mappings, ``RLIMIT_DATA``) grow by at
    most ``extra_bytes`` past what the fork inherited; past it an allocation fails."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            line = next(li for li in status if li.startswith("VmData:"))
        inherited = int(line.split()[1]) * 1024  # "VmData:  123456 kB"
    except (OSError, StopIteration, ValueError):  # not Linux: only the CPU limit holds
        return
    limit = inherited + extra_bytes
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))


def _die_with_parent(parent: int) -> None:
    """Linux: have the kernel SIGKILL this child when the thread that forked it ends, e.g. the
    server killed (a SIGTERM'd uvicorn re-raises the signal, skipping exit handlers); else the
    child computed on, for nobody, until its CPU limit."""
    if _PRCTL is None:  # not Linux: the CPU limit still ends it
        return
    _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent had already gone before the prctl
        os._exit(1)


def _child(
    conn, regex: str, vocabulary: Vocabulary, sentinel: int | None, cpu_limit: int,
    memory_limit: int, parent: int,
) -> None:  # pragma: no cover - subprocess
    try:
        _die_with_parent(parent)
        faulthandler.disable()  # an abort at the memory limit is a refusal, not a crash to dump
        _limit_cpu(cpu_limit)
        _limit_data(memory_limit)
        conn.send(("ok", _index_transitions(regex, vocabulary, sentinel)))
    except BaseException as exc:  # report every failure to the parent
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


EMPTY_LANGUAGE = "regex matches no text at all (its language is empty)"


def _index_error(message: str, field_name: str) -> SchemaError:
    """outlines-core's refusal as a SchemaError. It reports a regex that matches nothing as a
    vocabulary "missing tokens" for an empty list of characters (every byte is a token here)."""
    if "missing tokens" in message and "characters: []" in message:
        return SchemaError(EMPTY_LANGUAGE, field_name)
    return SchemaError(f"regex not supported by outlines-core: {message}", field_name)


def _guarded_transitions(
    regex: str, vocabulary: Vocabulary, field_name: str, cpu_limit: int,
    sentinel: int | None = None, wall_limit: float | None = None,
):
    """Build the outlines-core index in a forked child stopped after ``cpu_limit`` s of CPU time
    (or ``wall_limit`` s of wall time, default ``COMPILE_WALL_LIMIT_S``, if starved)."""
    cpu_limit = max(1, math.ceil(cpu_limit))
    wall_limit = COMPILE_WALL_LIMIT_S if wall_limit is None else wall_limit
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, daemon=True, args=(
        child, regex, vocabulary, sentinel, cpu_limit, COMPILE_MEMORY_LIMIT_BYTES, os.getpid()))
    proc.start()
    child.close()
    try:
        if not parent.poll(wall_limit):
            raise CompileBusyError(
                f"regex automaton did not compile within {wall_limit:.0f} s of wall time (the "
                "machine is busy); not remembered, a retry compiles it again", field_name
            )
        status, payload = parent.recv()
    except (EOFError, OSError):  # OSError: the child died within its message (mid-send)
        proc.join()
        if proc.exitcode == -signal.SIGXCPU:
            raise SchemaError(
                f"regex automaton did not compile within {cpu_limit} s of CPU time (too large)",
                field_name,
            ) from None
        if proc.exitcode == -signal.SIGABRT:  # Rust aborts when an allocation fails
            raise _memory_error(field_name) from None
        raise SchemaError(
            f"regex compilation crashed (exit code {proc.exitcode}; automaton too large?)",
            field_name,
        ) from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        parent.close()
    if status != "ok":
        if payload.startswith("MemoryError"):
            raise _memory_error(field_name)
        raise _index_error(payload, field_name)
    return payload


def _memory_error(field_name: str) -> SchemaError:
    return SchemaError(
        f"regex automaton did not compile within {COMPILE_MEMORY_LIMIT_BYTES >> 20} MiB of "
        "memory (too large)", field_name,
    )


def _with_done(
    src: list[int], tok: list[int], dst: list[int], accepting: list[int], done: int, eos: int,
    budget: int,
) -> TokenAutomaton:
    """The automaton of answer edges ``src -tok-> dst`` over states ``0..done-1``, completed by
    the ``[EOS]`` convention: each accepting state -> DONE (= ``done``), DONE -> DONE."""
    src = [*src, *accepting, done]
    tok = [*tok, *[eos] * len(accepting), eos]
    dst = [*dst, *[done] * len(accepting), done]
    accept = torch.zeros(done + 1, dtype=torch.bool)
    accept[accepting] = True
    accept[done] = True
    as_long = lambda xs: torch.tensor(xs, dtype=torch.long)  # noqa: E731
    return TokenAutomaton(done + 1, as_long(src), as_long(tok), as_long(dst), accept, budget)


def _to_automaton(
    initial: int, transitions: dict, finals: set[int], eos: int, budget: int, field_name: str
) -> TokenAutomaton:
    reachable, todo = {initial}, [initial]
    while todo:  # states before a sentinel (see _index_transitions) are left out
        for nxt in transitions.get(todo.pop(), {}).values():
            if nxt not in reachable:
                reachable.add(nxt)
                todo.append(nxt)
    transitions = {s: targets for s, targets in transitions.items() if s in reachable}
    states = {initial: 0}
    for state in transitions:
        states.setdefault(state, len(states))
    for targets in transitions.values():
        for nxt in targets.values():
            states.setdefault(nxt, len(states))
    done = len(states)
    src: list[int] = []
    tok: list[int] = []
    dst: list[int] = []
    for state, targets in transitions.items():
        for token_id, nxt in targets.items():
            if token_id == eos:
                continue  # outlines' own end loop; replaced by the DONE state below
            src.append(states[state])
            tok.append(token_id)
            dst.append(states[nxt])
    accepting = [states[state] for state in finals if state in states]
    edges = len(src) + len(accepting) + 1
    if edges > MAX_EDGES or done + 1 > MAX_STATES:
        raise SchemaError(
            f"answer automaton too large ({done + 1} states, {edges} edges; limits "
            f"{MAX_STATES} / {MAX_EDGES})",
            field_name,
        )
    return _with_done(src, tok, dst, accepting, done, eos, budget)


def compile_regex(
    regex: str,
    ctx: TokenizerContext,
    budget: int,
    field_name: str = "answer",
    guarded: bool = True,
    cpu_limit: int | None = None,
) -> TokenAutomaton:
    """Token automaton of ``regex`` (``guarded``: in a child process with a CPU-time limit,
    default ``COMPILE_CPU_LIMIT_S``)."""
    sentinel = ctx.by_bytes.get(SENTINEL, [None])[0]
    if guarded:
        limit = COMPILE_CPU_LIMIT_S if cpu_limit is None else cpu_limit
        initial, transitions, finals = _guarded_transitions(
            regex, ctx.vocabulary, field_name, limit, sentinel
        )
    else:
        try:
            initial, transitions, finals = _index_transitions(regex, ctx.vocabulary, sentinel)
        except Exception as exc:
            raise _index_error(f"{type(exc).__name__}: {exc}", field_name) from exc
    if not finals:
        raise SchemaError("the answer language is empty over this vocabulary", field_name)
    return _to_automaton(initial, transitions, finals, ctx.special.eos, budget, field_name)


def char_dfa_automaton(
    transitions: list[dict[str, int]], accept: list[bool], ctx: TokenizerContext, budget: int
) -> TokenAutomaton:
    """Lift a character DFA (state 0 initial, ASCII alphabet) to tokens: a token is an edge when
    its whole text walks the DFA from one state to another; the [EOS]/DONE convention as above."""
    alphabet = {ch for row in transitions for ch in row}
    tokens = [
        (data.decode("ascii"), ids) for data, ids in ctx.by_bytes.items()
        if data.isascii() and set(data.decode("ascii")) <= alphabet
    ]
    src: list[int] = []
    tok: list[int] = []
    dst: list[int] = []
    for state in range(len(transitions)):
        for text, token_ids in tokens:
            target: int | None = state
            for ch in text:
                target = transitions[target].get(ch)
                if target is None:
                    break
            if target is not None:
                src += [state] * len(token_ids)
                tok += token_ids
                dst += [target] * len(token_ids)
    accepting = [state for state, final in enumerate(accept) if final]
    return _with_done(src, tok, dst, accepting, len(transitions), ctx.special.eos, budget)


def literal_automaton(text: str, ctx: TokenizerContext, budget: int) -> TokenAutomaton:
    """Automaton of the single string ``text``: every tokenisation of its bytes (byte offsets)."""
    data = text.encode("utf-8")
    n = len(data)
    src: list[int] = []
    tok: list[int] = []
    dst: list[int] = []
    for i in range(n):
        for j in range(i + 1, min(n, i + ctx.max_piece) + 1):
            for token_id in ctx.by_bytes.get(data[i:j], ()):
                src += [i]
                tok += [token_id]
                dst += [j]
    return _with_done(src, tok, dst, [n], n + 1, ctx.special.eos, budget)


def shortest_answer(automaton: TokenAutomaton) -> int:
    """Fewest tokens of an accepted answer ([EOS] padding excluded), by breadth-first search."""
    src, dst = automaton.src.tolist(), automaton.dst.tolist()
    succ: dict[int, set[int]] = {}
    for a, b in zip(src, dst, strict=True):
        succ.setdefault(a, set()).add(b)
    accept = automaton.accept.tolist()
    done = automaton.num_states - 1  # reached only through [EOS]
    frontier, seen, depth = {0}, {0}, 0
    while frontier:
        if any(accept[s] and s != done for s in frontier):
            return depth
        frontier = {b for s in frontier for b in succ.get(s, ()) if b not in seen and b != done}
        seen |= frontier
        depth += 1
    return 1 << 30


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


def automaton_bytes(automaton: TokenAutomaton) -> int:
    """The memory an automaton's tensors hold."""
    tensors = (automaton.src, automaton.tok, automaton.dst, automaton.accept)
    return sum(t.numel() * t.element_size() for t in tensors)


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
