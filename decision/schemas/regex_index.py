"""outlines-core's index of a regex (its token transitions), built in this process or, for a
regex that may blow up during determinisation, in a forked child under CPU, memory and wall-time
limits.

Its own module because the guard is the one part of compilation that forks and sets rlimits:
every limit (``COMPILE_*``) is read here, at call time, and nowhere else.
"""

from __future__ import annotations

import ctypes
import faulthandler
import math
import multiprocessing
import os
import signal
from typing import Any

try:
    import resource
except ImportError:  # Windows: no rlimits (nor fork)
    raise ImportError(
        "decision runs on Linux or macOS: answer schemas are compiled in a forked child under CPU "
        "and memory limits (the resource module), which this system has not; on Windows use WSL"
    ) from None

from outlines_core import Index, Vocabulary

from decision.errors import CompileBusyError, SchemaError
from decision.schemas.context import TokenizerContext

# A guarded compile is refused once its child has used this much CPU time (RLIMIT_CPU, whole
# seconds): CPU time, unlike wall time, does not grow with the machine's load, so the refusal is a
# property of the regex and is remembered (compile_answer).
COMPILE_CPU_LIMIT_S = 10
# ... and once it has grown its data by this much past the parent's (RLIMIT_DATA): within the CPU
# limit a determinisation can reach ~3 GB, and the service runs four compiles at a time. The
# largest automata the size limits (automata.MAX_STATES, MAX_EDGES) let through take ~0.3 GB.
COMPILE_MEMORY_LIMIT_BYTES = 1 << 30
# Wall-time safety net for a child starved of CPU on a busy machine: a refusal at this limit says
# nothing about the regex, so it is not remembered and a retry compiles again.
COMPILE_WALL_LIMIT_S = 60.0
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


def regex_transitions(
    regex: str,
    ctx: TokenizerContext,
    field_name: str = "answer",
    guarded: bool = True,
    cpu_limit: int | None = None,
) -> tuple[int, dict, set[int]]:
    """outlines-core's initial state, transitions and final states of ``regex`` over ``ctx``'s
    vocabulary (``guarded``: in a child process with a CPU-time limit, default
    ``COMPILE_CPU_LIMIT_S``); its refusal as a ``SchemaError`` under ``field_name``."""
    sentinel = ctx.by_bytes.get(SENTINEL, [None])[0]
    if guarded:
        limit = COMPILE_CPU_LIMIT_S if cpu_limit is None else cpu_limit
        return _guarded_transitions(regex, ctx.vocabulary, field_name, limit, sentinel)
    try:
        return _index_transitions(regex, ctx.vocabulary, sentinel)
    except Exception as exc:
        raise _index_error(f"{type(exc).__name__}: {exc}", field_name) from exc
